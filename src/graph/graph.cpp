// Capturing a step's launches as a Graph, and printing it (see graph.h).
#include "graph/graph.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <set>

#include "ops/launch_hook.h"
#include "ops/op_scope.h"
#include "ops/tuned_launch.h"
#include "tile/ir/visitor.h"

namespace tessel::graph {
namespace {

std::string params_string(const ops::KernelParams& params) {
  std::string out;
  for (const auto& [name, value] : params) {
    if (name == "T") continue;  // the dtype shows on the operands
    if (!out.empty()) out += ",";
    out += fmt::format("{}={}", name, value);
  }
  return out.empty() ? "" : "{" + out + "}";
}

// Per tensor argument of the embedded kernel `name`, in order, whether its body stores, copies,
// fills, reduces or multiplies into it; empty when the kernel is not known (every operand is
// then taken as written).
std::vector<bool> written_tensor_arguments(const std::string& name) {
  static std::mutex mutex;
  static std::map<std::string, std::vector<bool>> cache;
  std::lock_guard<std::mutex> lock(mutex);
  if (auto it = cache.find(name); it != cache.end()) return it->second;
  std::vector<bool> written;
  if (Expected<const tile::Kernel*> k = ops::embedded_kernel(name); k.ok()) {
    struct Writes : tile::IRVisitor {
      std::set<std::string> names;
      using tile::IRVisitor::visit_node;
      void visit_node(const tile::Store* n) override {
        names.insert(n->buffer->name);
        tile::IRVisitor::visit_node(n);
      }
      void visit_node(const tile::Copy* n) override {
        names.insert(n->dst.buffer->name);
        tile::IRVisitor::visit_node(n);
      }
      void visit_node(const tile::Gemm* n) override {
        names.insert(n->c.buffer->name);
        tile::IRVisitor::visit_node(n);
      }
      void visit_node(const tile::Fill* n) override {
        names.insert(n->dst->name);
        tile::IRVisitor::visit_node(n);
      }
      void visit_node(const tile::Reduce* n) override {
        names.insert(n->dst->name);
        tile::IRVisitor::visit_node(n);
      }
    } writes;
    writes.visit((*k)->body);
    for (const tile::KernelArg& a : (*k)->args)
      if (a.is_tensor()) written.push_back(writes.names.count(a.name) > 0);
  }
  cache.emplace(name, written);
  return written;
}

void add_tensor_signature(std::string& out, const Tensor& t, const Shape& shape,
                          const Strides& strides) {
  out += fmt::format("|{}{}{}", dtype_name(t.dtype()), shape_string(shape), shape_string(strides));
}

// Records every launch; the launches themselves run as they would without it.
class Recorder : public ops::LaunchHook {
 public:
  Status elementwise(const std::string& kernel, const ops::KernelParams& params,
                     const std::vector<Tensor>& tensors, const std::vector<ops::KernelArg>& scalars,
                     const std::function<Status()>& launch) override {
    const double seconds = timed(launch);
    if (seconds < 0) return launch_status_;
    Node n = start(kernel, params, true);
    n.seconds = seconds;
    n.signature = launch_signature(kernel, params, tensors, scalars.size());
    for (size_t i = 0; i < tensors.size(); ++i) {
      const bool output = i + 1 == tensors.size();
      n.operands.push_back(operand(tensors[i], tensors[i].shape(), tensors[i].strides(),
                                   output ? int(graph_.nodes.size()) : -1));
      n.writes.push_back(output);
    }
    add_scalars(n, scalars);
    graph_.nodes.push_back(std::move(n));
    return ok_status();
  }

  Status kernel(const std::string& kernel, const ops::KernelParams& params,
                const std::vector<ops::KernelArg>& args,
                const std::function<Status()>& launch) override {
    const double seconds = timed(launch);
    if (seconds < 0) return launch_status_;
    Node n = start(kernel, params, false);
    n.seconds = seconds;
    n.signature = kernel + params_string(params);
    std::vector<ops::KernelArg> scalars;
    for (const ops::KernelArg& a : args) {
      if (const Tensor* t = std::get_if<Tensor>(&a)) {
        add_tensor_signature(n.signature, *t, t->shape(), t->strides());
        n.operands.push_back(operand(*t, t->shape(), t->strides(), -1));
      } else if (const ops::View* v = std::get_if<ops::View>(&a)) {
        add_tensor_signature(n.signature, v->tensor, v->shape, v->strides);
        n.operands.push_back(operand(v->tensor, v->shape, v->strides, -1));
      } else {
        scalars.push_back(a);
      }
    }
    n.signature += fmt::format("|{}", scalars.size());
    n.writes = written_tensor_arguments(kernel);
    if (n.writes.size() != n.operands.size()) n.writes.assign(n.operands.size(), true);
    add_scalars(n, scalars);
    graph_.nodes.push_back(std::move(n));
    return ok_status();
  }

  Graph finish() {
    // Gone now: nothing outside the step kept it.
    for (size_t i = 0; i < watched_.size(); ++i)
      graph_.values[i].temporary = watched_[i].expired();
    return std::move(graph_);
  }

 private:
  // Runs the launch; its seconds, or -1 with launch_status_ holding its error.
  double timed(const std::function<Status()>& launch) {
    const auto t0 = std::chrono::steady_clock::now();
    launch_status_ = launch();
    if (!launch_status_.ok()) return -1;
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }

  Node start(const std::string& kernel, const ops::KernelParams& params, bool elementwise) {
    Node n;
    n.kernel = kernel;
    n.params = params;
    const char* op = ops::current_op();
    n.op = op ? op : "";
    n.elementwise = elementwise;
    return n;
  }

  // `producer`: the node writing it (element-wise outputs), else -1.
  Operand operand(const Tensor& t, const Shape& shape, const Strides& strides, int producer) {
    const Storage* key = t.storage().get();
    auto it = index_.find(key);
    // A storage at the address of one that has died is a new value.
    if (it != index_.end() && watched_[size_t(it->second)].lock() != t.storage()) {
      index_.erase(it);
      it = index_.end();
    }
    if (it == index_.end()) {
      Value v;
      v.dtype = t.dtype();
      v.elements = static_cast<int64_t>(t.storage()->bytes() / t.element_size());
      v.producer = producer;
      it = index_.emplace(key, int(graph_.values.size())).first;
      graph_.values.push_back(v);
      watched_.push_back(t.storage());
      if (!graph_.device) graph_.device = t.device();
    }
    return Operand{it->second, static_cast<int64_t>(t.offset_bytes() / t.element_size()), shape,
                   strides};
  }

  static void add_scalars(Node& n, const std::vector<ops::KernelArg>& scalars) {
    for (const ops::KernelArg& a : scalars) {
      if (const double* d = std::get_if<double>(&a))
        n.scalars.push_back(*d);
      else if (const int64_t* i = std::get_if<int64_t>(&a))
        n.scalars.push_back(static_cast<double>(*i));
    }
  }

  Graph graph_;
  Status launch_status_;
  std::map<const Storage*, int> index_;
  // By value index. Not owned: holding a storage would change what the step does (autograd
  // takes over a gradient only when nothing else holds it).
  std::vector<std::weak_ptr<Storage>> watched_;
};

std::string operand_string(const Graph& g, const Operand& o) {
  const Value& v = g.values[size_t(o.value)];
  std::string out = fmt::format("%{}", o.value);
  const bool whole = o.offset == 0 && shape_numel(o.shape) == v.elements;
  if (!whole) out += fmt::format("@{}", o.offset);
  out += shape_string(o.shape);
  // Strides only where they are not the contiguous ones (a broadcast, a transposed view).
  Strides contiguous(o.shape.size());
  int64_t step = 1;
  for (size_t d = o.shape.size(); d-- > 0;) {
    contiguous[d] = step;
    step *= o.shape[d];
  }
  if (o.strides != contiguous) out += fmt::format("s{}", shape_string(o.strides));
  return out;
}

}  // namespace

std::string launch_signature(const std::string& kernel, const ops::KernelParams& params,
                             const std::vector<Tensor>& tensors, size_t scalars) {
  std::string out = kernel + params_string(params);
  for (const Tensor& t : tensors)
    add_tensor_signature(out, t, t.shape(), t.strides());
  out += fmt::format("|{}", scalars);
  return out;
}

Expected<Graph> capture_step(const std::function<Status()>& step) {
  Recorder recorder;
  {
    ops::LaunchHookScope scope(&recorder);
    TESSEL_TRY(step());
  }
  return recorder.finish();
}

std::string to_string(const Graph& g, const std::vector<int>* group_of) {
  std::string out;
  std::vector<int> first_use(g.values.size(), -1);
  for (size_t i = 0; i < g.nodes.size(); ++i)
    for (const Operand& o : g.nodes[i].operands)
      if (first_use[size_t(o.value)] < 0) first_use[size_t(o.value)] = int(i);
  int externals = 0;
  for (const Value& v : g.values)
    externals += v.producer < 0 && !v.temporary;
  out += fmt::format("graph: {} nodes, {} values ({} from outside the step)\n", g.nodes.size(),
                     g.values.size(), externals);
  // Values no element-wise node made: what the step was given and keeps (parameters, gradients,
  // optimizer state, the batch), and the temporaries other kernels wrote.
  for (size_t i = 0; i < g.values.size(); ++i) {
    const Value& v = g.values[i];
    if (v.producer >= 0) continue;
    out += fmt::format("  %{}: {} x {}, {}\n", i, v.elements, dtype_name(v.dtype),
                       v.temporary ? fmt::format("temporary, first at n{}", first_use[i])
                                   : std::string("outside the step"));
  }
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    std::string line = fmt::format("  n{}", i);
    if (group_of && (*group_of)[i] >= 0) line += fmt::format(" [fused g{}]", (*group_of)[i]);
    line += " ";
    if (n.elementwise) line += operand_string(g, n.output()) + " = ";
    line += n.kernel + params_string(n.params);
    line += n.op.empty() ? std::string(" <rule/optimizer>") : fmt::format(" <{}>", n.op);
    line += " (";
    for (int k = 0; k < n.num_inputs(); ++k)
      line += fmt::format("{}{}", k ? ", " : "", operand_string(g, n.operands[size_t(k)]));
    for (double s : n.scalars)
      line += fmt::format(", {}", s);
    line += ")";
    out += line + "\n";
  }
  return out;
}

std::string profile_string(const Graph& g) {
  std::map<std::string, std::pair<int, double>> by_kernel;  // launches, seconds
  double total = 0, elementwise = 0;
  int elementwise_launches = 0;
  for (const Node& n : g.nodes) {
    auto& [count, seconds] = by_kernel[n.kernel];
    ++count;
    seconds += n.seconds;
    total += n.seconds;
    if (n.elementwise) {
      elementwise += n.seconds;
      ++elementwise_launches;
    }
  }
  std::vector<std::pair<std::string, std::pair<int, double>>> rows(by_kernel.begin(),
                                                                   by_kernel.end());
  std::sort(rows.begin(), rows.end(),
            [](const auto& a, const auto& b) { return a.second.second > b.second.second; });
  std::string out =
      fmt::format("launches: {} in {:.2f} ms; element-wise: {} in {:.2f} ms ({:.1f}%)\n",
                  g.nodes.size(), total * 1e3, elementwise_launches, elementwise * 1e3,
                  total > 0 ? 100.0 * elementwise / total : 0.0);
  for (const auto& [kernel, cs] : rows)
    out += fmt::format("  {:<28} {:>5} launches {:>9.3f} ms {:>5.1f}%\n", kernel, cs.first,
                       cs.second * 1e3, total > 0 ? 100.0 * cs.second / total : 0.0);
  return out;
}

}  // namespace tessel::graph
