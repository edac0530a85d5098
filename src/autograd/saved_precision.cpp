// The 16-bit saved activations of autocast (see saved_precision.h): the one table of which saved
// tensors are rounded, and the copies shared between the nodes that keep the same tensor.
#include "autograd/saved_precision.h"

#include <map>
#include <memory>
#include <set>
#include <string>
#include <tuple>

#include "ops/ops.h"

namespace tessel::autograd {
namespace {

// Ops whose backward is a gemm over the saved operands (linear: x and the weight, matmul: both
// sides, conv2d: x and the weight). Under a 16-bit `compute` attr the gemm rounds an f32 operand
// to that dtype as it stages it (ops/gemm_precision.h), so an operand stored already rounded, by
// the same round-to-nearest-even, gives bit-identical gradients and skips the rounding. The
// weights themselves are leaves and are never copied (the caller's rule).
const std::set<std::string>& gemm_ops() {
  static const std::set<std::string> ops = {"linear", "matmul", "conv2d"};
  return ops;
}

// Ops whose saved activations are kept in 16 bits and widened back for their backward rule. The
// rule then differs from the f32 one by evaluating its derivative at the rounded point (a relative
// error of 2^-9 in bf16 per element, noise beside the gradient's own):
// - element-wise activations: gelu, silu (their input) and relu, tanh, sigmoid (their output).
//   relu's mask y > 0 is exact: rounding keeps the sign and bf16 has f32's exponent range, so only
//   f32 values below 2^-133 (far below anything an activation carries) would round to zero.
// - softmax's output (an unfused attention's T x T weights, the largest activation there) and
//   attention's q, k, v and output: what flash attention keeps in bf16 too; its backward's row
//   sums of dO * O are taken in f32 from the widened values.
// - the normalisations' input (layer, batch, RMS, group norm): the backward recomputes the
//   statistics in f32 from it, so they are those of the rounded input, and the gradient is the
//   exact one there. Rounding loses digits that centring exposes only where |mean| >> std, which
//   activations between layers do not have (the accuracy checks in DESIGN.md).
// - mul and div: both operands (gates, masks, scalings between layers).
// Kept f32 (kF32, not listed): the loss's inputs (cross_entropy, log_softmax), whose gradient
// every other one starts from; max pooling's input, whose backward recomputes each window's
// argmax: elements that differ only past bf16's 8 bits tie once rounded and the gradient goes to
// another element than the forward's (in saved_precision_test's small CNN that moved the conv
// weight gradient by 4x its size), and the relu output before it then stays f32 for both nodes;
// and everything this table does not name, so a new op saves f32 until someone decides here.
const std::map<std::string, std::set<int>>& widened_slots() {
  static const std::map<std::string, std::set<int>> slots = {
      {"relu", {kOutputSlot}},
      {"tanh", {kOutputSlot}},
      {"sigmoid", {kOutputSlot}},
      {"gelu", {0}},
      {"gelu_erf", {0}},
      {"silu", {0}},
      {"softmax", {kOutputSlot}},
      {"causal_attention", {0, kOutputSlot}},       // qkv; input 1 is its f32 log-sum-exp rows
      {"scaled_dot_product_attention", {0, 1, 2}},  // q, k, v; the mask stays as it is
      {"layer_norm", {0}},
      {"batch_norm", {0}},
      {"rms_norm", {0}},
      {"group_norm", {0}},
      {"mul", {0, 1}},
      {"div", {0, 1}},
  };
  return slots;
}

// One f32 tensor's shared saved form, held weakly: the entry is stale once either is freed (a new
// storage at a freed one's address is another control block, so `source` tells them apart).
struct TableEntry {
  std::weak_ptr<Storage> source;
  std::weak_ptr<SharedSaved> saved;
};

// The elements of a tensor: its storage, offset and layout (a contiguous tensor by its element
// count alone, so a reshape of it finds the same entry), and the autocast dtype.
using TableKey = std::tuple<const Storage*, size_t, Shape, Strides, DType>;

TableKey key_of(const Tensor& t, DType compute) {
  if (t.is_contiguous()) return {t.storage().get(), t.offset_bytes(), {t.numel()}, {1}, compute};
  return {t.storage().get(), t.offset_bytes(), t.shape(), t.strides(), compute};
}

// Per thread, as the autocast scope is. Stale entries are dropped whenever the map has doubled
// since the last sweep, so it stays the size of what is alive.
thread_local std::map<TableKey, TableEntry> g_table;
thread_local size_t g_swept_size = 0;
thread_local bool g_keep_f32 = false;

void sweep() {
  std::erase_if(g_table, [](const auto& entry) {
    return entry.second.source.expired() || entry.second.saved.expired();
  });
  g_swept_size = g_table.size();
}

}  // namespace

SavedAs saved_as(const ops::OpDef& op, const ops::Attrs& attrs, int slot, DType compute) {
  if (g_keep_f32 || (compute != DType::kBF16 && compute != DType::kF16)) return SavedAs::kAsIs;
  if (gemm_ops().count(op.name) != 0 && slot >= 0 && slot <= 1) {
    // Direct only when the backward gemm rounds to the same dtype; a gemm recorded without the
    // attr under the scope computes in f32 and gets its operand widened.
    const bool same = attrs.get_int("compute", -1) == static_cast<int64_t>(compute);
    return same ? SavedAs::kRounded : SavedAs::kWidened;
  }
  auto it = widened_slots().find(op.name);
  if (it != widened_slots().end() && it->second.count(slot) != 0) return SavedAs::kWidened;
  return SavedAs::kF32;
}

Expected<std::shared_ptr<SharedSaved>> share_saved(const Tensor& t, SavedAs how, DType compute) {
  const TableKey key = key_of(t, compute);
  auto it = g_table.find(key);
  if (it != g_table.end() && it->second.source.lock() == t.storage()) {
    if (std::shared_ptr<SharedSaved> saved = it->second.saved.lock()) {
      // Kept in f32 by this node: every node sharing it reads the f32 (the copy is freed).
      if (how == SavedAs::kF32 && saved->tensor.dtype() != t.dtype()) saved->tensor = t;
      return saved;
    }
  }
  auto saved = std::make_shared<SharedSaved>();
  if (how == SavedAs::kF32) {
    saved->tensor = t;
  } else {
    TESSEL_ASSIGN_OR_RETURN(Tensor rounded, ops::cast(t, compute));
    TESSEL_ASSIGN_OR_RETURN(saved->tensor, rounded.contiguous());
  }
  g_table[key] = TableEntry{t.storage(), saved};
  if (g_table.size() >= 2 * g_swept_size + 16) sweep();
  return saved;
}

Expected<Tensor> saved_for_backward(const SharedSaved& saved, const Shape& shape, SavedAs how) {
  Tensor t = saved.tensor;
  if (t.shape() != shape) {
    TESSEL_ASSIGN_OR_RETURN(t, t.reshape(shape));
  }
  if (how == SavedAs::kWidened && t.dtype() != DType::kF32) return ops::cast(t, DType::kF32);
  return t;
}

KeepSavedF32::KeepSavedF32() : previous_(g_keep_f32) {
  g_keep_f32 = true;
}
KeepSavedF32::~KeepSavedF32() {
  g_keep_f32 = previous_;
}

}  // namespace tessel::autograd
