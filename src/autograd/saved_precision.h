// Which tensors the tape keeps in 16 bits under autocast, and the 16-bit copies themselves.
//
// Inside an Autocast scope of bf16 or f16 (autocast.h), the f32 activations a node saves for
// backward (OpDef::save_inputs / save_output) are kept as 16-bit copies (a `cast` op, so every
// device does it), and the f32 original is freed as soon as nothing else holds it: saved
// activations are most of a training step's peak, and this halves them. Master weights, the
// optimizer's state and gradients stay f32. The choice of which saved tensors go 16-bit is made
// here, in saved_as(), and nowhere else; docs/DESIGN.md "Mixed precision" has the table.
//
//   SavedAs how = saved_as(op, attrs, slot, compute);        // per saved input or output
//   if (how != SavedAs::kAsIs) kept = share_saved(t, how, compute);  // one per tensor
//   ...  backward: saved_for_backward(*kept, shape, how)
//
// The tape (variable.cpp) applies it to the tensors that are activations: not leaves (parameters,
// the batch) nor views of them, whose f32 memory a copy could not free, and only f32 ones.
//
// A node's backward then reads a 16-bit operand directly (kRounded: the gemms, which round their
// operands to the same dtype as they stage them, so the result is bit-identical to keeping f32)
// or gets it widened back to f32 for the rule and freed after (kWidened: the rest).
#pragma once

#include <memory>

#include "autograd/variable.h"
#include "ops/op.h"
#include "runtime/tensor.h"
#include "support/status.h"

namespace tessel::autograd {

// The slot of a node's output in saved_as(); inputs are 0, 1, ...
inline constexpr int kOutputSlot = -1;

// How a node keeps one tensor its op's backward reads.
enum class SavedAs {
  kAsIs,     // the tensor itself, outside the sharing below (f32 policy, leaves, non-f32)
  kF32,      // the f32 activation itself, shared: any 16-bit copy of it is dropped for it
  kRounded,  // a 16-bit copy, handed to the backward rule as it is
  kWidened,  // a 16-bit copy, widened to f32 for the backward rule and freed after it
};

// How op `op` (recorded with `attrs` under autocast dtype `compute`) keeps the f32 activation in
// `slot` (an input index or kOutputSlot): kAsIs under compute f32 (the f32 policy is unchanged);
// under a 16-bit compute, kRounded / kWidened where the table in saved_precision.cpp says so,
// else kF32. Callers keep leaves, views of leaves and non-f32 tensors kAsIs without asking.
SavedAs saved_as(const ops::OpDef& op, const ops::Attrs& attrs, int slot, DType compute);

// One saved activation, shared by every node that keeps the same f32 tensor (relu's output and
// the next layer's input; the same elements seen through a reshape), so a tensor saved twice is
// neither rounded nor stored twice. `tensor` is the 16-bit copy (contiguous), or the f32 tensor
// itself once any node keeps it kF32: a copy beside an f32 that stays alive anyway would add
// memory, not save it. Nodes hold it; the sharing itself holds nothing alive.
struct SharedSaved {
  Tensor tensor;
};
// The shared form of f32 activation `t` for a node that keeps it `how` (not kAsIs).
Expected<std::shared_ptr<SharedSaved>> share_saved(const Tensor& t, SavedAs how, DType compute);
// What the node's backward rule gets: the shared tensor in the node's `shape`, widened to f32
// when `how` is kWidened and it is 16-bit.
Expected<Tensor> saved_for_backward(const SharedSaved& saved, const Shape& shape, SavedAs how);

// While one exists on a thread, nodes keep their saved tensors as they are under autocast too (the
// f32 activations of before this policy): tests and `tessel bench precision` compare the two.
class KeepSavedF32 {
 public:
  KeepSavedF32();
  ~KeepSavedF32();
  KeepSavedF32(const KeepSavedF32&) = delete;
  KeepSavedF32& operator=(const KeepSavedF32&) = delete;

 private:
  bool previous_;
};

// What the node that made `v` keeps for its backward, for tests: one tensor per input (undefined
// where it keeps none), then the output (undefined likewise). Empty for a leaf.
std::vector<Tensor> saved_tensors_of(const Variable& v);

}  // namespace tessel::autograd
