// Reverse-mode automatic differentiation: Variables record the ops run on them on a tape, and
// backward() walks it in reverse, calling each op's backward rule (ops/op.h).
//
//   Variable w(weight, /*requires_grad=*/true), x(input);
//   TESSEL_ASSIGN_OR_RETURN(Variable y, apply("matmul", {x, w}));
//   TESSEL_ASSIGN_OR_RETURN(Variable loss, apply("sum", {y}));
//   TESSEL_TRY(loss.backward());        // w.grad() is now d loss / d w
//
// The tape is the graph itself: a Variable made by an op points at its Node, and a Node at the
// Nodes (or leaf Variables) of its inputs. A Node keeps only the tensors its op's backward reads
// (OpDef::save_inputs / save_output) and the inputs' shapes, so intermediate activations that no
// backward rule needs are freed as soon as nothing else holds them. backward() frees the saved
// tensors as it goes; a second backward through the same graph is an error that says so.
// Gradients of leaves accumulate (+=) across backward calls until zero_grad(). Inside a NoGrad
// scope nothing is recorded. Inside a 16-bit Autocast scope the saved f32 activations may be kept
// as bf16/f16 copies instead (which ones and why: autograd/saved_precision.h).
//
// Leaf hooks are how data-parallel training (parallel/) sees the tape without owning it: a leaf's
// `on_grad_ready` runs once per backward pass, right after the last contribution that pass makes
// to its gradient (DDP starts a bucket's all-reduce there, while backward goes on), and its
// `on_use` runs in apply() before an op reads the leaf's value (ZeRO-3 gathers the parameter
// there and may replace it with set_data). An error from a hook fails the op or the backward.
#pragma once

#include <functional>
#include <memory>
#include <string_view>
#include <vector>

#include "ops/op.h"
#include "runtime/tensor.h"

namespace tessel::autograd {

struct Node;

// What a Variable is: its value, whether gradients flow to it, its gradient (leaves only), and
// the node that made it (null for leaves).
struct VariableState {
  Tensor data;
  Tensor grad;
  bool requires_grad = false;
  std::shared_ptr<Node> grad_fn;
  // Leaf hooks (see the top of this file); empty: none.
  std::function<Status(VariableState&)> on_grad_ready;
  std::function<Status(VariableState&)> on_use;
};

class Variable {
 public:
  Variable() = default;
  explicit Variable(Tensor data, bool requires_grad = false);

  bool defined() const { return state_ != nullptr; }
  const Tensor& data() const { return state_->data; }
  const Shape& shape() const { return state_->data.shape(); }
  bool requires_grad() const { return state_ && state_->requires_grad; }
  bool is_leaf() const { return state_->grad_fn == nullptr; }
  // The accumulated gradient of a leaf; undefined before any backward reached it.
  const Tensor& grad() const { return state_->grad; }
  // Sets the gradient to zero in place, keeping its memory (PyTorch's
  // zero_grad(set_to_none=False)): a parameter's gradient is a view into the flat buffer that
  // the optimizer reads (nn::FlatParameters), so dropping it would leave that buffer stale. A
  // variable without a gradient keeps none.
  Status zero_grad();
  // The value of a one-element variable as a double (torch.Tensor.item()); an error for others.
  Expected<double> item() const;
  // Replaces the value of a leaf (an optimizer step), keeping its gradient.
  void set_data(Tensor data) { state_->data = std::move(data); }

  // Back-propagates from this variable. `grad_output` has its shape; omitted, the variable must
  // have one element and the seed is 1.
  Status backward(const Tensor& grad_output = Tensor()) const;
  // The same, handing the gradient over: on a leaf, a gradient nothing else holds becomes the
  // leaf's gradient as it is, without the copy the overload above makes of a tensor its caller
  // still holds (PyTorch's AccumulateGrad steals a gradient the same way). What stands for the
  // rest of a network (a bench's loss) hands its gradient over, as the next layer's backward does.
  Status backward(Tensor&& grad_output) const;

  const std::shared_ptr<VariableState>& state() const { return state_; }

 private:
  std::shared_ptr<VariableState> state_;
};

// Runs op `name` on the inputs' values and records it when gradients are enabled and any
// differentiable input requires them.
Expected<Variable> apply(std::string_view name, const std::vector<Variable>& inputs,
                         const ops::Attrs& attrs = {});
Expected<Variable> apply(const ops::OpDef& op, const std::vector<Variable>& inputs,
                         const ops::Attrs& attrs = {});

// While one exists on a thread, ops on that thread record nothing (evaluation, optimizer steps).
class NoGrad {
 public:
  NoGrad();
  ~NoGrad();
  NoGrad(const NoGrad&) = delete;
  NoGrad& operator=(const NoGrad&) = delete;

 private:
  bool previous_;
};
bool grad_enabled();

// How many tape nodes are alive in the process (tests check that graphs are freed).
int64_t live_nodes();

}  // namespace tessel::autograd
