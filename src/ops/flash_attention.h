// Fused causal self-attention: the kernels of kernels/flash_attention.tile launched over
// [B, H, N, E] views, for the ops that dispatch to them (ops.h's causal_attention in
// ops/flash_attention_ops.cpp, scaled_dot_product_attention in ops/attention_ops.cpp when it is
// causal with no mask and one k/v head per query head). FlashAttention-2's scheme: the forward
// keeps only O and the row log-sum-exp L; backward recomputes P block by block, dQ in one
// kernel over query blocks (which also stores D = rowsum(dO * O)) and dK, dV in another over key
// blocks, so no T x T matrix is ever in memory and no gradient is written twice.
//
//   AttentionHeads in{q, k, v};                          // [B, H, N, E] views, any strides
//   TESSEL_TRY(flash_attention_forward(in, o, lse, scale));
//   TESSEL_TRY(flash_attention_backward(in, o, d_o, lse, {dq, dk, dv}, scale));
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "ops/kernel_cache.h"
#include "ops/op.h"

namespace tessel::ops {

// q, k, v (or their gradients) of one attention, each [B, H, N, E] on one device.
struct AttentionHeads {
  View q, k, v;
};

// Whether the fused kernels take head size `e` on `device`: any e up to 256 on a CPU; e <= 64 on
// OpenCL and CUDA devices, whose 32-48 KiB of fast memory per block hold the tiles only that far.
bool flash_attention_supported(const Device* device, int64_t e);

// o [B, H, N, E] = softmax(scale q k^T, causal) v; lse [B, H, N] f32 = the log-sum-exp of each
// row of scale q k^T over its visible keys.
Status flash_attention_forward(const AttentionHeads& in, const View& o, const View& lse,
                               double scale);

// Which kernels run the backward: the split ones (flash_attention_grad_q, then _grad_kv: blocks
// of BQ / BKV rows, S and dP computed in both) or the per-head one (flash_attention_grad: one
// block per (batch, head), S and dP once). The per-head kernel is for CPUs with B H at least
// twice their threads; flash_backward_choice says which for a device and B H.
enum class FlashBackward { kSplit, kPerHead };
FlashBackward flash_backward_choice(const Device* device, int64_t batch_heads);

// The gradients of q, k and v from the forward's o and lse and the output gradient d_o, by the
// kernels `choice` names (flash_backward_choice when none does: tests run both).
Status flash_attention_backward(const AttentionHeads& in, const View& o, const View& d_o,
                                const View& lse, const AttentionHeads& grads, double scale,
                                std::optional<FlashBackward> choice = std::nullopt);

// A tensor laid out as [B, H, N, E] (its shape, or its rank-2 / rank-3 tail with B = H = 1 or
// B = 1), merging leading dimensions into B where their strides allow; nullopt when they do not.
std::optional<View> heads_view(const Tensor& t);

}  // namespace tessel::ops
