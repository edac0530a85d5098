// Typed functions over the op registry, one per op: what backward rules, nn/ and users call.
// Each checks its inputs (Status naming the op and the shapes) and runs on the inputs' device.
// This is the op library's one public header: ops/*.h beside it (integer_ops.h, flash_attention.h,
// kernel_util.h, ...) are the machinery the op definitions share, not an interface.
//
//   TESSEL_ASSIGN_OR_RETURN(Tensor h, ops::linear(x, w1, b1));
//   TESSEL_ASSIGN_OR_RETURN(Tensor loss, ops::cross_entropy(ops::relu(h).value(), targets));
#pragma once

#include <optional>
#include <string>
#include <utility>

#include "ops/op.h"

namespace tessel::ops {

// Among f32, f16, bf16 (nearest even) and the integer types i8, u8, i16, i32, i64 (integer to
// integer keeps the low bits, float to integer rounds toward zero).
Expected<Tensor> cast(const Tensor& x, DType dtype);

// Element-wise, NumPy broadcasting, PyTorch's type promotion (torch.result_type,
// ops/integer_ops.h): integers widen among themselves (u8 with i8 gives i16) and wrap around on
// overflow; an integer with a float gives the float; two floats give the wider (bf16 with f16:
// f32); a 0-d operand decides only when its kind (integer < float) is higher than every other
// operand's, so a 0-d f32 with a bf16 tensor gives bf16. The gradient of each input has its own
// dtype.
Expected<Tensor> add(const Tensor& a, const Tensor& b);
Expected<Tensor> sub(const Tensor& a, const Tensor& b);
Expected<Tensor> mul(const Tensor& a, const Tensor& b);
Expected<Tensor> div(const Tensor& a, const Tensor& b);
// floor_divide (Python's //), remainder (the divisor's sign, torch.remainder) and div with
// rounding_mode "" (true division), "floor" or "trunc", as PyTorch's, not differentiable.
// Integers: a zero divisor is an error, "<op>: integer division by zero (ZeroDivisionError)", as
// PyTorch raises; -2^63 // -1 gives -2^63. Floats: PyTorch's fmod-based results (x // 0 is
// +-inf or nan, x % 0 is nan, a zero keeps the sign of x / y).
Expected<Tensor> floor_divide(const Tensor& a, const Tensor& b);
Expected<Tensor> remainder(const Tensor& a, const Tensor& b);
Expected<Tensor> div(const Tensor& a, const Tensor& b, const std::string& rounding_mode);
Expected<Tensor> relu(const Tensor& x);
Expected<Tensor> gelu(const Tensor& x);  // the tanh approximation
Expected<Tensor> tanh(const Tensor& x);
Expected<Tensor> sigmoid(const Tensor& x);
Expected<Tensor> silu(const Tensor& x);      // x sigmoid(x)
Expected<Tensor> gelu_erf(const Tensor& x);  // the exact gelu, 0.5 x (1 + erf(x / sqrt 2))
Expected<Tensor> rsqrt(const Tensor& x);
Expected<Tensor> scale(const Tensor& x, double factor);  // factor * x
// PyTorch's element-wise math (ops/math_ops.cpp), floats of any width computed in f32: exp, log,
// sqrt, abs (gradient 0 at 0), neg, erf; pow, maximum and minimum broadcast (maximum and minimum
// propagate NaN and split the gradient of a tie); clamp to [min, max], either bound optional;
// where(condition (bool), a, b) broadcasting all three; comparisons "eq", "ne", "lt", "le",
// "gt", "ge" (bool results). pow of two integer tensors stays integer as PyTorch's (wrapping;
// 0 ** 0 = 1; a negative exponent gives 1 ** e = 1, (-1) ** e = +-1, else 0).
Expected<Tensor> exp(const Tensor& x);
Expected<Tensor> log(const Tensor& x);
Expected<Tensor> sqrt(const Tensor& x);
Expected<Tensor> abs(const Tensor& x);
Expected<Tensor> neg(const Tensor& x);
Expected<Tensor> erf(const Tensor& x);
Expected<Tensor> pow(const Tensor& x, const Tensor& exponent);
Expected<Tensor> maximum(const Tensor& a, const Tensor& b);
Expected<Tensor> minimum(const Tensor& a, const Tensor& b);
Expected<Tensor> clamp(const Tensor& x, std::optional<double> min, std::optional<double> max);
Expected<Tensor> where(const Tensor& condition, const Tensor& a, const Tensor& b);
Expected<Tensor> compare(const std::string& op, const Tensor& a, const Tensor& b);
// dst += src in place (same shape and dtype; dst contiguous): how gradients accumulate without
// a temporary. Not an op: nothing records it.
Status add_into(const Tensor& dst, const Tensor& src);

// a [..., M, K] @ b [..., K, N] -> [..., M, N], batch dimensions broadcast.
// The gemm ops (matmul, linear, conv2d) take f32, f16 and bf16 operands and return f32; they
// multiply in `compute` (f32, bf16 or f16; by default the operands' 16-bit dtype, else f32),
// accumulating in f32 (ops/gemm_precision.h). Gradients have their inputs' dtypes.
Expected<Tensor> matmul(const Tensor& a, const Tensor& b);
Expected<Tensor> matmul(const Tensor& a, const Tensor& b, DType compute);
// x [..., K], weight [N, K], bias [N] -> x @ weight^T + bias, as torch.nn.functional.linear.
Expected<Tensor> linear(const Tensor& x, const Tensor& weight, const Tensor& bias);
Expected<Tensor> linear(const Tensor& x, const Tensor& weight, const Tensor& bias, DType compute);

// Over `axes` (empty: all), keeping them as size 1 when keepdim.
Expected<Tensor> sum(const Tensor& x, std::vector<int64_t> axes = {}, bool keepdim = false);
Expected<Tensor> mean(const Tensor& x, std::vector<int64_t> axes = {}, bool keepdim = false);
Expected<Tensor> max(const Tensor& x, std::vector<int64_t> axes = {}, bool keepdim = false);
// The sum of `grad` over the dimensions that broadcasting to grad's shape added to `shape`.
Expected<Tensor> sum_to(const Tensor& grad, const Shape& shape);
// y [N] += the column sums of x [M, N] (x's columns at unit stride): gradients added in place.
Status sum_rows_into(const Tensor& x, const Tensor& y);

// Over the last axis.
Expected<Tensor> softmax(const Tensor& x);
Expected<Tensor> log_softmax(const Tensor& x);
// logits [..., C], target [...] (i64 class ids) or [..., C] (f32 class probabilities) -> the
// loss of torch.nn.functional.cross_entropy: reduction 0 the mean over the targets that are not
// ignore_index (weighted by their class weights), 1 their sum, 2 none (one loss per target).
// class_weight: one per class, or empty for all 1.
Expected<Tensor> cross_entropy(const Tensor& logits, const Tensor& target,
                               int64_t ignore_index = -100, double label_smoothing = 0.0,
                               int reduction = 0, std::vector<double> class_weight = {});
// Over the last axis, with weight and bias of its size.
Expected<Tensor> layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias,
                            double eps = 1e-5);
// torch.nn.functional.rms_norm over the last axis (eps: PyTorch's default, f32's machine
// epsilon, when absent) and group_norm over x [N, C, *] in num_groups groups (ops/norm_ops.cpp).
Expected<Tensor> rms_norm(const Tensor& x, const Tensor& weight,
                          std::optional<double> eps = std::nullopt);
Expected<Tensor> group_norm(const Tensor& x, int64_t num_groups, const Tensor& weight,
                            const Tensor& bias, double eps = 1e-5);
// layer_norm's statistics of x [..., C] (ONNX LayerNormalization's Mean and InvStdDev outputs):
// [2, ...], the means first, then 1 / sqrt(var + eps). Not differentiable.
Expected<Tensor> layer_norm_stats(const Tensor& x, double eps = 1e-5);
// weight [V, C], ids [...] i64 -> [..., C].
Expected<Tensor> embedding(const Tensor& weight, const Tensor& ids);

// Indexing along `dim` (ops/index_ops.cpp); ids are i64 in [-N, N), negatives counting from the
// end as ONNX takes them. index_select: torch.index_select with an index of any rank (ONNX
// Gather). gather / scatter_add: torch.gather / torch.scatter_add with index (and src) of x's
// shape except along dim.
Expected<Tensor> index_select(const Tensor& x, int64_t dim, const Tensor& index);
Expected<Tensor> gather(const Tensor& x, int64_t dim, const Tensor& index);
Expected<Tensor> scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src);

// Scores [..., queries, keys] with the keys after each query's position set to -inf.
Expected<Tensor> causal_mask(const Tensor& scores);
// x * keep / (1 - p); keep is a hash of (seed, position), so a seed gives the same mask anywhere.
Expected<Tensor> dropout(const Tensor& x, double p, int64_t seed);

// NCHW. conv2d: x [N, C, H, W], weight [O, C / groups, KH, KW], bias [O]; stride, padding,
// dilation are {h, w} pairs.
Expected<Tensor> conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias,
                        std::vector<int64_t> stride = {1, 1}, std::vector<int64_t> padding = {0, 0},
                        std::vector<int64_t> dilation = {1, 1}, int64_t groups = 1);
// conv3d (ops/conv3d_ops.cpp) as torch.nn.functional.conv3d: x [N, C, D, H, W], weight
// [O, C / groups, KD, KH, KW], bias [O]; stride, padding, dilation {d, h, w} (or one value for
// all three). It runs as one conv2d over the depth taps, forward and backward.
Expected<Tensor> conv3d(const Tensor& x, const Tensor& weight, const Tensor& bias,
                        std::vector<int64_t> stride = {1, 1, 1},
                        std::vector<int64_t> padding = {0, 0, 0},
                        std::vector<int64_t> dilation = {1, 1, 1}, int64_t groups = 1);
// The attributes of a convolution call as the conv ops read them (autograd/ records the ops
// through apply with these): stride, padding, dilation and groups, and output_padding for the
// transposed ones.
Attrs conv_attrs(std::vector<int64_t> stride, std::vector<int64_t> padding,
                 std::vector<int64_t> dilation, int64_t groups);
Attrs conv_transpose_attrs(std::vector<int64_t> stride, std::vector<int64_t> padding,
                           std::vector<int64_t> output_padding, std::vector<int64_t> dilation,
                           int64_t groups);

// conv_transpose2d (ops/conv_transpose_ops.cpp) as torch.nn.functional.conv_transpose2d:
// x [N, Cin, H, W], weight [Cin, Cout / groups, KH, KW], bias [Cout]; output_padding below the
// stride or the dilation. conv1d and conv_transpose1d: x [N, C, L], weight [*, *, K], exactly
// their 2-d forms over [N, C, 1, L].
Expected<Tensor> conv_transpose2d(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                  std::vector<int64_t> stride = {1, 1},
                                  std::vector<int64_t> padding = {0, 0},
                                  std::vector<int64_t> output_padding = {0, 0},
                                  std::vector<int64_t> dilation = {1, 1}, int64_t groups = 1);
Expected<Tensor> conv1d(const Tensor& x, const Tensor& weight, const Tensor& bias,
                        int64_t stride = 1, int64_t padding = 0, int64_t dilation = 1,
                        int64_t groups = 1);
Expected<Tensor> conv_transpose1d(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                  int64_t stride = 1, int64_t padding = 0,
                                  int64_t output_padding = 0, int64_t dilation = 1,
                                  int64_t groups = 1);

// torch.nn.functional.scaled_dot_product_attention (ops/attention_ops.cpp): q [..., Hq, L, E],
// k [..., Hkv, S, E], v [..., Hkv, S, Ev] -> [..., Hq, L, Ev]. A query with every key hidden
// gets zeros (PyTorch 2), not NaN.
struct AttentionOptions {
  Tensor attn_mask;    // bool (true keeps) or f32 (added), broadcast to [..., Hq, L, S]; or none
  int64_t causal = 0;  // 1: is_causal (top-left aligned), 2: bottom-right aligned
  std::optional<double> scale;  // default 1 / sqrt(E)
  bool enable_gqa = false;      // Hq a multiple of Hkv: q head h reads k/v head h / (Hq / Hkv)
  double dropout_p = 0;         // > 0 takes a seed: the overloads with one
};
Expected<Tensor> scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                              const AttentionOptions& options = {});
// The op's attributes for `options` (autograd/ records the op through apply); its fourth input
// is the mask, or any f32 tensor (unread) without one.
Expected<Attrs> attention_attrs(const AttentionOptions& options);
// With dropout: attention weights dropped after the softmax as PyTorch's dropout_p does, the
// kept ones scaled by 1 / (1 - p), p = 1 giving zeros. The mask is the dropout op's hash of
// (seed, position in [..., Hq, L, S]), so a seed gives the same mask on every device and backward
// makes it again. The overloads above refuse dropout_p > 0.
Expected<Tensor> scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                              const AttentionOptions& options, int64_t seed);
Expected<Attrs> attention_attrs(const AttentionOptions& options, int64_t seed);
// A GPT block's causal self-attention from its fused projection (ops/flash_attention_ops.cpp):
// qkv [B, T, 3 C] (q, k, v side by side, `heads` heads of C / heads each) -> [B, T, C]. lse, f32
// [B, H, T], receives the rows' log-sum-exp, which the op's backward reads (autograd keeps it as
// a saved input; nn/gpt.cpp records the op).
Expected<Tensor> causal_attention(const Tensor& qkv, const Tensor& lse, int64_t heads);

// Pooling (ops/pool_ops.cpp) over x [N, C, *spatial] with a window of 1, 2 or 3 sizes (the op
// max_pool{1,2,3}d / avg_pool{1,2,3}d by its length), as PyTorch's, with ONNX's asymmetric
// pads. Each list holds one size per spatial dimension, or one for all.
struct PoolOptions {
  std::vector<int64_t> stride;    // default: the window
  std::vector<int64_t> padding;   // both sides, at most half the window (PyTorch)
  std::vector<int64_t> pads;      // or ONNX's: the begins, then the ends, any size
  std::vector<int64_t> dilation;  // max pooling only; default 1
  bool ceil_mode = false;         // PyTorch's: a last window starts inside input or left padding
  bool count_include_pad = true;  // average pooling: padding counts in the divisor
  std::optional<int64_t> divisor_override;  // average pooling: the divisor of every window
};
// Max pooling propagates NaN (the last NaN of a window wins, as in PyTorch); a window that covers
// only padding gives -inf (index -1). Average pooling of such a window gives 0.
Expected<Tensor> max_pool(const Tensor& x, std::vector<int64_t> window,
                          const PoolOptions& options = {});
Expected<Tensor> avg_pool(const Tensor& x, std::vector<int64_t> window,
                          const PoolOptions& options = {});
// The values and, as torch's max_pool2d_with_indices, i64 indices of each window's element,
// flat in its input plane ((d H + h) W + w); not differentiable.
Expected<std::pair<Tensor, Tensor>> max_pool_with_indices(const Tensor& x,
                                                          std::vector<int64_t> window,
                                                          const PoolOptions& options = {});
// The attributes of a pooling op call (autograd/ records them through apply).
Attrs pool_attrs(std::vector<int64_t> window, const PoolOptions& options);
// The 2-d pooling of the first version: windows {h, w}, stride defaulting to the window.
Expected<Tensor> max_pool2d(const Tensor& x, std::vector<int64_t> window,
                            std::vector<int64_t> stride = {},
                            std::vector<int64_t> padding = {0, 0});
Expected<Tensor> avg_pool2d(const Tensor& x, std::vector<int64_t> window,
                            std::vector<int64_t> stride = {},
                            std::vector<int64_t> padding = {0, 0});

// ONNX GlobalAveragePool: x [N, C, D1, ...] -> [N, C, 1, ...], the mean over every position.
Expected<Tensor> global_avg_pool(const Tensor& x);

// torch.nn.functional.batch_norm over N, H, W of x [N, C, H, W] (or N of [N, C]); weight, bias,
// running_mean, running_var [C]. Training uses the batch's statistics and moves the running
// ones towards them in place by `momentum` (unbiased variance); evaluation uses the running ones.
Expected<Tensor> batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias,
                            const Tensor& running_mean, const Tensor& running_var, bool training,
                            double momentum = 0.1, double eps = 1e-5);

// Views (no copy where the layout allows).
Expected<Tensor> reshape(const Tensor& x, const Shape& shape);
Expected<Tensor> permute(const Tensor& x, const std::vector<int64_t>& order);
Expected<Tensor> slice(const Tensor& x, int64_t dim, int64_t start, int64_t end, int64_t step = 1);
// a and b joined along dim (their other sizes equal). Split is slices.
Expected<Tensor> concat(const Tensor& a, const Tensor& b, int64_t dim);
// A contiguous copy on the device (the identity for autograd).
Expected<Tensor> contiguous(const Tensor& x);

}  // namespace tessel::ops
