// Replaying a captured step with its fused groups (see replay.h).
#include "graph/replay.h"

#include <optional>
#include <set>

#include "ops/kernel_util.h"
#include "ops/launch_hook.h"
#include "support/log.h"

namespace tessel::graph {
namespace {

// An element-wise launch held back until its group's last launch.
struct Held {
  std::string kernel;
  ops::KernelParams params;
  std::vector<Tensor> tensors;  // element-wise launches
  std::vector<ops::KernelArg> scalars;
  std::vector<ops::KernelArg> args;  // a producer held for its epilogue: its arguments
  bool elementwise = true;
};

// A kernel argument's tensor and the view it is launched as.
ops::View view_of(const ops::KernelArg& a) {
  if (const ops::View* v = std::get_if<ops::View>(&a)) return *v;
  const Tensor& t = std::get<Tensor>(a);
  return ops::View{t, t.shape(), t.strides()};
}

bool contiguous(const Tensor& t) {
  return t.is_contiguous();
}

bool same_view(const Tensor& a, const Tensor& b) {
  return a.storage() == b.storage() && a.offset_bytes() == b.offset_bytes() &&
         a.shape() == b.shape() && a.strides() == b.strides() && a.dtype() == b.dtype();
}

class Replayer : public ops::LaunchHook {
 public:
  Replayer(const Graph& g, const FusionPlan& plan, FusedSteps::Stats& stats)
      : g_(g), plan_(plan), stats_(stats), held_(g.nodes.size()) {}

  Status elementwise(const std::string& kernel, const ops::KernelParams& params,
                     const std::vector<Tensor>& tensors, const std::vector<ops::KernelArg>& scalars,
                     const std::function<Status()>& launch) override {
    if (!following_ || !matches(kernel, params, tensors, scalars.size())) {
      TESSEL_TRY(leave());
      return launch();
    }
    const int node = next_++;
    const int group = plan_.group_of[size_t(node)];
    if (group < 0) return launch();
    held_[size_t(node)] = Held{kernel, params, tensors, scalars, {}, true};
    if (node != plan_.groups[size_t(group)].nodes.back()) return ok_status();
    return run_group(plan_.groups[size_t(group)]);
  }

  Status kernel(const std::string& kernel, const ops::KernelParams& params,
                const std::vector<ops::KernelArg>& args,
                const std::function<Status()>& launch) override {
    if (following_) {
      // The captured signature of a non-element-wise node: rebuilt the way graph.cpp builds it.
      const Node& n = g_.nodes[size_t(std::min<size_t>(next_, g_.nodes.size() - 1))];
      bool same = next_ < g_.nodes.size() && !n.elementwise && n.kernel == kernel &&
                  n.params == params && n.operands.size() == tensor_count(args);
      if (same) {
        size_t k = 0;
        for (const ops::KernelArg& a : args) {
          const Tensor* t = std::get_if<Tensor>(&a);
          const ops::View* v = std::get_if<ops::View>(&a);
          if (!t && !v) continue;
          const Operand& o = n.operands[k++];
          const Shape& shape = v ? v->shape : t->shape();
          const Strides& strides = v ? v->strides : t->strides();
          same = same && shape == o.shape && strides == o.strides;
        }
      }
      if (same) {
        const int node = int(next_++);
        if (plan_.group_of[size_t(node)] >= 0) {  // a producer whose epilogue a group becomes
          held_[size_t(node)] = Held{kernel, params, {}, {}, args, false};
          return ok_status();
        }
      } else {
        TESSEL_TRY(leave());
      }
    }
    return launch();
  }

  const std::set<int>& blamed() const { return blamed_; }

  // After the step: whether it followed the graph to its end. Runs anything still held.
  Expected<bool> finish() {
    const bool followed = following_ && next_ == g_.nodes.size();
    TESSEL_TRY(leave());
    return followed;
  }

 private:
  static size_t tensor_count(const std::vector<ops::KernelArg>& args) {
    size_t n = 0;
    for (const ops::KernelArg& a : args)
      n += std::holds_alternative<Tensor>(a) || std::holds_alternative<ops::View>(a);
    return n;
  }

  // Whether an element-wise launch is the captured node at this position: the fields its
  // signature is made of, compared where they lie, without formatting a string per launch.
  bool matches(const std::string& kernel, const ops::KernelParams& params,
               const std::vector<Tensor>& tensors, size_t scalars) const {
    if (next_ >= g_.nodes.size()) return false;
    const Node& n = g_.nodes[next_];
    if (!n.elementwise || n.kernel != kernel || n.params != params ||
        n.operands.size() != tensors.size() || n.scalars.size() != scalars)
      return false;
    for (size_t i = 0; i < tensors.size(); ++i) {
      const Operand& o = n.operands[i];
      if (tensors[i].shape() != o.shape || tensors[i].strides() != o.strides ||
          tensors[i].dtype() != g_.values[size_t(o.value)].dtype)
        return false;
    }
    return true;
  }

  // The step left the captured sequence: what was held back runs now, in order, and the rest
  // of the step runs eagerly. (At the end of a step that followed it, nothing is held.)
  Status leave() {
    if (following_ && next_ < g_.nodes.size()) {
      ++stats_.diverged;
      // A producer held back when the step left the graph may be why: holding its output
      // keeps a reference autograd sees (a leaf takes over a gradient only when nothing else
      // holds it, else it copies, a launch the capture did not have). It is not made a producer
      // again.
      for (size_t node = 0; node < held_.size(); ++node)
        if (held_[node] && !held_[node]->elementwise) blamed_.insert(int(node));
    }
    following_ = false;
    for (std::optional<Held>& h : held_) {
      if (!h) continue;
      Held held = std::move(*h);
      h.reset();
      if (!held.elementwise) {
        TESSEL_TRY(ops::launch_kernel(held.kernel, held.params, held.args));
        continue;
      }
      TESSEL_TRY(ops::launch_elementwise(held.kernel, held.params, held.tensors, held.scalars));
    }
    return ok_status();
  }

  Status run_group(const FusedGroup& group) {
    if (group.producer >= 0) return run_epilogue(group);
    // Each intermediate must be the view its consumer reads, as in the capture.
    for (const auto& [b, k, a] : group.edges) {
      if (!same_view(held_[size_t(b)]->tensors[size_t(k)], held_[size_t(a)]->tensors.back()))
        return leave();
    }
    std::vector<Tensor> tensors;
    for (const auto& [node, operand] : group.inputs)
      tensors.push_back(held_[size_t(node)]->tensors[size_t(operand)]);
    tensors.push_back(held_[size_t(group.nodes.back())]->tensors.back());
    std::vector<ops::KernelArg> args;
    auto views = ops::merged_views(tensors, 3);
    if (!views) {
      for (size_t i = 0; i + 1 < tensors.size(); ++i) {
        TESSEL_ASSIGN_OR_RETURN(tensors[i], ops::contiguous_on_device(tensors[i]));
      }
      views = ops::merged_views(tensors, 3);
      if (!views) return leave();  // an output of more than 3 dimensions that do not merge
    }
    args.assign(views->begin(), views->end());
    for (const auto& [node, scalar] : group.scalars)
      args.push_back(held_[size_t(node)]->scalars[size_t(scalar)]);
    return launch_group(group, args);
  }

  // The group's kernel in place of its launches, which are dropped.
  Status launch_group(const FusedGroup& group, const std::vector<ops::KernelArg>& args) {
    for (int node : group.nodes)
      held_[size_t(node)].reset();
    ++stats_.fused_launches;
    stats_.launches_saved += int64_t(group.nodes.size()) - 1;
    return ops::launch_source(group.source, args);
  }

  // A producer with the group as its epilogue: every element-wise tensor is seen in the layout
  // of the producer's output (all are contiguous and of its size, as in the capture).
  Status run_epilogue(const FusedGroup& group) {
    const Held& producer = *held_[size_t(group.producer)];
    const EpilogueProducer* p = epilogue_producer(g_, g_.nodes[size_t(group.producer)]);
    Node live;  // what accepts() reads of the launch: its scalars
    std::vector<ops::View> tensors;
    for (const ops::KernelArg& a : producer.args) {
      if (std::holds_alternative<Tensor>(a) || std::holds_alternative<ops::View>(a))
        tensors.push_back(view_of(a));
      else if (const double* d = std::get_if<double>(&a))
        live.scalars.push_back(*d);
      else
        live.scalars.push_back(double(std::get<int64_t>(a)));
    }
    if (!p || p->output >= int(tensors.size()) || !p->accepts(live)) return leave();
    const ops::View written = tensors[size_t(p->output)];
    const int64_t size = shape_numel(written.shape);
    Strides strides(written.shape.size());
    int64_t step = 1;
    for (size_t d = written.shape.size(); d-- > 0;) {
      strides[d] = step;
      step *= written.shape[d];
    }
    auto in_layout = [&](const Tensor& t) -> std::optional<ops::View> {
      if (!contiguous(t) || t.numel() != size) return std::nullopt;
      return ops::View{t, written.shape, strides};
    };
    for (const auto& [b, k, a] : group.edges) {
      const Tensor& read = held_[size_t(b)]->tensors[size_t(k)];
      const bool same = a == group.producer
                            ? read.storage() == written.tensor.storage() &&
                                  read.offset_bytes() == written.tensor.offset_bytes() &&
                                  contiguous(read) && read.numel() == size
                            : same_view(read, held_[size_t(a)]->tensors.back());
      if (!same) return leave();
    }
    std::vector<ops::KernelArg> args = producer.args;
    for (const auto& [node, operand] : group.inputs) {
      std::optional<ops::View> v = in_layout(held_[size_t(node)]->tensors[size_t(operand)]);
      if (!v) return leave();
      args.push_back(*v);
    }
    std::optional<ops::View> out = in_layout(held_[size_t(group.nodes.back())]->tensors.back());
    if (!out) return leave();
    args.push_back(*out);
    for (const auto& [node, scalar] : group.scalars)
      args.push_back(held_[size_t(node)]->scalars[size_t(scalar)]);
    return launch_group(group, args);
  }

  const Graph& g_;
  const FusionPlan& plan_;
  FusedSteps::Stats& stats_;
  size_t next_ = 0;
  bool following_ = true;
  std::vector<std::optional<Held>> held_;  // by node
  std::set<int> blamed_;                   // producers held when the step left the graph
};

}  // namespace

struct FusedSteps::State {
  std::optional<Graph> graph;
  FusionPlan plan;
  bool recapture = true;
  std::set<int> no_producers;  // plan_fusion's: producers a replay left the graph holding
  Stats stats;
};

FusedSteps::FusedSteps() : state_(std::make_unique<State>()) {}
FusedSteps::~FusedSteps() = default;
FusedSteps::FusedSteps(FusedSteps&&) noexcept = default;
FusedSteps& FusedSteps::operator=(FusedSteps&&) noexcept = default;

Status FusedSteps::run(const std::function<Status()>& step) {
  State& s = *state_;
  if (s.recapture) {
    TESSEL_ASSIGN_OR_RETURN(Graph g, capture_step(step));
    s.plan = plan_fusion(g, s.no_producers);
    // Each generated kernel is compiled now; one that does not compile is a bug to report, and
    // its group runs unfused rather than failing the run.
    for (size_t i = 0; i < s.plan.groups.size() && g.device; ++i) {
      if (Status st = ops::prepare_source(g.device, s.plan.groups[i].source); !st.ok()) {
        log_warn("graph fusion: group g{} runs unfused: {}", i, st.to_string());
        for (int node : s.plan.groups[i].nodes)
          s.plan.group_of[size_t(node)] = -1;
      }
    }
    s.graph = std::move(g);
    s.recapture = false;
    ++s.stats.captures;
    return ok_status();
  }
  Replayer replayer(*s.graph, s.plan, s.stats);
  Status status;
  {
    ops::LaunchHookScope scope(&replayer);
    status = step();
  }
  Expected<bool> followed = replayer.finish();
  TESSEL_TRY(status);
  TESSEL_TRY(followed.status());
  if (*followed) {
    ++s.stats.replays;
  } else {
    s.recapture = true;
    s.no_producers.insert(replayer.blamed().begin(), replayer.blamed().end());
  }
  return ok_status();
}

const Graph* FusedSteps::graph() const {
  return state_->graph ? &*state_->graph : nullptr;
}
const FusionPlan* FusedSteps::plan() const {
  return state_->graph ? &state_->plan : nullptr;
}
const FusedSteps::Stats& FusedSteps::stats() const {
  return state_->stats;
}

}  // namespace tessel::graph
