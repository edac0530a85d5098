// The tape and the backward pass (see variable.h).
#include "autograd/variable.h"

#include <atomic>
#include <unordered_map>

#include "autograd/autocast.h"
#include "autograd/pace.h"
#include "autograd/saved_precision.h"
#include "ops/kernel_util.h"
#include "ops/ops.h"

namespace tessel::autograd {

namespace {
thread_local bool g_grad_enabled = true;
std::atomic<int64_t> g_live_nodes{0};
}  // namespace

// Where an input's gradient goes: the node that made it, or the leaf itself.
struct Edge {
  std::shared_ptr<Node> node;
  std::shared_ptr<VariableState> leaf;
};

struct Node {
  const ops::OpDef* op = nullptr;
  ops::Attrs attrs;
  std::vector<Tensor> saved_inputs;  // defined where the op's backward reads them
  Tensor saved_output;
  // Under a 16-bit autocast, the saved activations in the form shared with other nodes (16-bit
  // or f32, saved_precision.h), where saved_inputs / saved_output hold nothing.
  struct Shared {
    std::shared_ptr<SharedSaved> saved;
    SavedAs how = SavedAs::kAsIs;
  };
  std::vector<Shared> shared_inputs;
  Shared shared_output;
  Shape output_shape;
  // The op's output shares memory with a leaf (a view of a parameter or of the batch): a node
  // that saves it keeps it as it is, since a 16-bit copy could not free the f32 memory.
  bool views_leaf = false;
  std::vector<ops::TensorMeta> input_meta;
  std::vector<Edge> edges;  // per input; empty edge: no gradient wanted
  bool released = false;    // saved tensors freed by a backward pass

  Node() { ++g_live_nodes; }
  ~Node() { --g_live_nodes; }
};

int64_t live_nodes() {
  return g_live_nodes.load();
}

NoGrad::NoGrad() : previous_(g_grad_enabled) {
  g_grad_enabled = false;
}
NoGrad::~NoGrad() {
  g_grad_enabled = previous_;
}
bool grad_enabled() {
  return g_grad_enabled;
}

Variable::Variable(Tensor data, bool requires_grad) : state_(std::make_shared<VariableState>()) {
  state_->data = std::move(data);
  state_->requires_grad = requires_grad;
}

Status Variable::zero_grad() {
  if (!state_) return failed_precondition("zero_grad() of an undefined variable");
  if (!state_->grad.defined()) return ok_status();
  return state_->grad.fill(0.0);
}

Expected<double> Variable::item() const {
  if (!state_) return failed_precondition("item() of an undefined variable");
  if (data().numel() != 1)
    return invalid_argument("item() needs a one-element variable, got shape {}",
                            shape_string(shape()));
  TESSEL_ASSIGN_OR_RETURN(Tensor host, data().to(cpu_device()));
  const auto* bytes = static_cast<const unsigned char*>(host.storage()->host_address());
  return load_scalar(host.dtype(), bytes + host.offset_bytes());
}

Expected<Variable> apply(const ops::OpDef& op, const std::vector<Variable>& inputs,
                         const ops::Attrs& attrs) {
  std::vector<Tensor> values;
  values.reserve(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined())
      return invalid_argument("{}: input {} is an undefined variable", op.name, i);
    VariableState& state = *inputs[i].state();
    if (state.on_use && !state.grad_fn) TESSEL_TRY(state.on_use(state));
    values.push_back(inputs[i].data());
  }
  Expected<Tensor> ran = [&] {
    OpPaceTimer paced;  // a slowed thread (pace.h) pays for the op after it
    return ops::run(op, values, attrs);
  }();
  TESSEL_ASSIGN_OR_RETURN(Tensor out, std::move(ran));
  bool record = false;
  if (g_grad_enabled && op.backward)
    for (size_t i = 0; i < inputs.size(); ++i)
      record = record || (inputs[i].requires_grad() && op.differentiable[i]);
  Variable result(std::move(out), record);
  if (!record) return result;

  auto node = std::make_shared<Node>();
  // Leaf memory: a leaf, or a view (or an input handed back as it is) of leaf memory.
  auto leaf_memory = [](const Variable& v) {
    return v.is_leaf() || v.state()->grad_fn->views_leaf;
  };
  for (size_t i = 0; i < inputs.size(); ++i)
    if (result.data().storage() == values[i].storage() && leaf_memory(inputs[i]))
      node->views_leaf = true;
  node->op = &op;
  node->attrs = attrs;
  node->saved_inputs.resize(inputs.size());
  node->shared_inputs.resize(inputs.size());
  node->edges.resize(inputs.size());
  node->output_shape = result.shape();
  const DType compute = autocast_dtype();
  // What the node keeps of a tensor: leaves and their views, and non-f32 tensors, as they are
  // (a copy would not free them); f32 activations as saved_as() says.
  auto keep = [&](const Tensor& t, bool of_leaf, int slot, Tensor& kept,
                  Node::Shared& shared) -> Status {
    const SavedAs how =
        of_leaf || t.dtype() != DType::kF32 ? SavedAs::kAsIs : saved_as(op, attrs, slot, compute);
    if (how == SavedAs::kAsIs) {
      kept = t;
      return ok_status();
    }
    TESSEL_ASSIGN_OR_RETURN(shared.saved, share_saved(t, how, compute));
    shared.how = how;
    return ok_status();
  };
  for (size_t i = 0; i < inputs.size(); ++i) {
    node->input_meta.push_back({values[i].shape(), values[i].dtype()});
    if (op.save_inputs[i]) {
      TESSEL_TRY(keep(values[i], leaf_memory(inputs[i]), static_cast<int>(i), node->saved_inputs[i],
                      node->shared_inputs[i]));
    }
    if (!inputs[i].requires_grad() || !op.differentiable[i]) continue;
    const auto& state = inputs[i].state();
    if (state->grad_fn)
      node->edges[i].node = state->grad_fn;
    else
      node->edges[i].leaf = state;
  }
  if (op.save_output) {
    TESSEL_TRY(keep(result.data(), node->views_leaf, kOutputSlot, node->saved_output,
                    node->shared_output));
  }
  result.state()->grad_fn = std::move(node);
  return result;
}

std::vector<Tensor> saved_tensors_of(const Variable& v) {
  if (!v.defined() || v.is_leaf()) return {};
  const Node& n = *v.state()->grad_fn;
  std::vector<Tensor> out = n.saved_inputs;
  out.push_back(n.saved_output);
  for (size_t i = 0; i < n.shared_inputs.size(); ++i)
    if (n.shared_inputs[i].saved) out[i] = n.shared_inputs[i].saved->tensor;
  if (n.shared_output.saved) out.back() = n.shared_output.saved->tensor;
  return out;
}

Expected<Variable> apply(std::string_view name, const std::vector<Variable>& inputs,
                         const ops::Attrs& attrs) {
  TESSEL_ASSIGN_OR_RETURN(const ops::OpDef* op, ops::find_op(name));
  return apply(*op, inputs, attrs);
}

namespace {

// a + b, where a may be undefined (the first contribution).
Expected<Tensor> accumulate(const Tensor& a, Tensor b) {
  if (!a.defined()) return b;
  return ops::add(a, b);
}

// A leaf's gradient is owned by the leaf: a tensor that something else may still hold (the same
// gradient handed to both inputs of an add, the caller's seed) is copied first.
Expected<Tensor> owned(Tensor t) {
  if (t.is_contiguous() && t.storage().use_count() == 1) return t;
  return ops::copy_on_device(t);
}

// Adds g to a leaf's gradient. A gradient that is already there is updated in place, so a leaf
// whose gradient is a view into a flat buffer (nn::FlatParameters) keeps accumulating into it.
Status accumulate_into_leaf(VariableState& leaf, Tensor g) {
  if (!leaf.grad.defined()) {
    TESSEL_ASSIGN_OR_RETURN(leaf.grad, owned(std::move(g)));
    return ok_status();
  }
  if (leaf.grad.is_contiguous() && leaf.grad.device() == g.device() &&
      ops::kernel_writable_in_place(leaf.grad))
    return ops::add_into(leaf.grad, g);
  TESSEL_ASSIGN_OR_RETURN(Tensor sum, ops::add(leaf.grad, g));
  return leaf.grad.copy_from(sum);
}

// The gradient an edge's leaf already has, when a backward rule may add into it in place.
Tensor accumulation_target(const Edge& e, const ops::TensorMeta& meta) {
  if (!e.leaf) return Tensor();
  const Tensor& g = e.leaf->grad;
  if (!g.defined() || !g.is_contiguous() || g.shape() != meta.shape || g.dtype() != meta.dtype ||
      !ops::kernel_writable_in_place(g))
    return Tensor();
  return g;
}

}  // namespace

Status Variable::backward(const Tensor& grad_output) const {
  // A second handle: a leaf's gradient is then a copy, since the caller still holds its own.
  return backward(Tensor(grad_output));
}

Status Variable::backward(Tensor&& grad_output) const {
  if (!requires_grad())
    return failed_precondition("backward() of a variable that does not require gradients");
  Tensor seed = std::move(grad_output);
  if (!seed.defined()) {
    if (data().numel() != 1)
      return invalid_argument(
          "backward() without a gradient needs a one-element output, got shape {}",
          shape_string(shape()));
    TESSEL_ASSIGN_OR_RETURN(seed, Tensor::full(shape(), 1.0, data().dtype(), data().device()));
  } else if (seed.shape() != shape() || seed.dtype() != data().dtype() ||
             seed.device() != data().device()) {
    return invalid_argument("backward(): gradient {} {} on {} for a variable {} {} on {}",
                            shape_string(seed.shape()), dtype_name(seed.dtype()),
                            seed.device()->id(), shape_string(shape()), dtype_name(data().dtype()),
                            data().device()->id());
  }
  NoGrad no_grad;
  if (is_leaf()) {
    TESSEL_TRY(accumulate_into_leaf(*state_, std::move(seed)));
    return state_->on_grad_ready ? state_->on_grad_ready(*state_) : ok_status();
  }

  // Count, for each node, how many edges from nodes reachable from the root point at it; a node
  // runs once all of them have delivered their gradient. Leaves with a hook are counted too: the
  // hook runs when the last edge into the leaf has delivered.
  std::unordered_map<Node*, int> pending;
  std::unordered_map<VariableState*, int> pending_leaves;
  std::vector<Node*> stack{state_->grad_fn.get()};
  pending[state_->grad_fn.get()] = 0;
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (const Edge& e : n->edges) {
      if (e.leaf && e.leaf->on_grad_ready) pending_leaves[e.leaf.get()] += 1;
      if (!e.node) continue;
      if (pending.emplace(e.node.get(), 0).second) stack.push_back(e.node.get());
      pending[e.node.get()] += 1;
    }
  }

  std::unordered_map<Node*, Tensor> grads;
  grads[state_->grad_fn.get()] = seed;
  std::vector<Node*> ready{state_->grad_fn.get()};
  while (!ready.empty()) {
    Node* n = ready.back();
    ready.pop_back();
    if (n->released)
      return failed_precondition(
          "backward through '{}' a second time: its saved tensors were freed by the first",
          n->op->name);
    ops::BackwardArgs args{
        n->saved_inputs, n->saved_output, n->input_meta, n->attrs, grads[n], {}, {}};
    // Shared saved activations in the node's shapes, widened to f32 where the rule wants it
    // (freed with args).
    for (size_t i = 0; i < n->shared_inputs.size(); ++i) {
      const Node::Shared& shared = n->shared_inputs[i];
      if (!shared.saved) continue;
      TESSEL_ASSIGN_OR_RETURN(
          args.inputs[i], saved_for_backward(*shared.saved, n->input_meta[i].shape, shared.how));
    }
    if (n->shared_output.saved) {
      TESSEL_ASSIGN_OR_RETURN(
          args.output,
          saved_for_backward(*n->shared_output.saved, n->output_shape, n->shared_output.how));
    }
    args.grad_into.resize(n->edges.size());
    for (size_t i = 0; i < n->edges.size(); ++i) {
      const Edge& e = n->edges[i];
      args.needs_grad.push_back(e.node || e.leaf);
      args.grad_into[i] = accumulation_target(e, n->input_meta[i]);
    }
    grads.erase(n);
    Expected<std::vector<Tensor>> input_grads = [&] {
      OpPaceTimer paced;
      return n->op->backward(args);
    }();
    if (!input_grads.ok())
      return input_grads.status().with_context("backward of '{}'", n->op->name);
    n->saved_inputs.clear();
    n->saved_output = Tensor();
    n->shared_inputs.clear();
    n->shared_output = {};
    n->released = true;
    for (size_t i = 0; i < n->edges.size(); ++i) {
      const Edge& e = n->edges[i];
      if (!e.node && !e.leaf) continue;
      Tensor& g = (*input_grads)[i];
      // A leaf with a hook hears of its last contribution, however it arrived.
      auto delivered = [&](VariableState& leaf) -> Status {
        if (!leaf.on_grad_ready || --pending_leaves[&leaf] > 0) return ok_status();
        return leaf.on_grad_ready(leaf);
      };
      if (!g.defined() && e.leaf && args.grad_into[i].defined()) {  // added in place
        TESSEL_TRY(delivered(*e.leaf));
        continue;
      }
      if (!g.defined())
        return internal_error("backward of '{}' gave no gradient for input {}", n->op->name, i);
      if (g.shape() != n->input_meta[i].shape)
        return internal_error("backward of '{}' gave a gradient {} for input {} of shape {}",
                              n->op->name, shape_string(g.shape()), i,
                              shape_string(n->input_meta[i].shape));
      if (e.leaf) {
        TESSEL_TRY(accumulate_into_leaf(*e.leaf, std::move(g)));
        TESSEL_TRY(delivered(*e.leaf));
      } else {
        TESSEL_ASSIGN_OR_RETURN(grads[e.node.get()], accumulate(grads[e.node.get()], std::move(g)));
        if (--pending[e.node.get()] == 0) ready.push_back(e.node.get());
      }
    }
  }
  return ok_status();
}

}  // namespace tessel::autograd
