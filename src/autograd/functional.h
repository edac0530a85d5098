// The ops of ops/ops.h on Variables, recorded for backward. Each is apply() with the op's name
// and attributes; see ops/ops.h for what each computes.
//
//   TESSEL_ASSIGN_OR_RETURN(Variable h, linear(x, w1, b1));
//   TESSEL_ASSIGN_OR_RETURN(h, relu(h));
//
// causal_self_attention at the end is a composite of recorded ops, so its gradient comes from
// those ops' rules.
#pragma once

#include <concepts>
#include <cstdint>
#include <optional>

#include "autograd/variable.h"
#include "ops/ops.h"

namespace tessel::autograd {

Expected<Variable> add(const Variable& a, const Variable& b);
Expected<Variable> sub(const Variable& a, const Variable& b);
Expected<Variable> mul(const Variable& a, const Variable& b);
Expected<Variable> div(const Variable& a, const Variable& b);
Expected<Variable> relu(const Variable& x);
Expected<Variable> gelu(const Variable& x);
Expected<Variable> tanh(const Variable& x);
Expected<Variable> sigmoid(const Variable& x);
Expected<Variable> silu(const Variable& x);
Expected<Variable> gelu_erf(const Variable& x);
Expected<Variable> rsqrt(const Variable& x);
Expected<Variable> scale(const Variable& x, double factor);
Expected<Variable> matmul(const Variable& a, const Variable& b);
Expected<Variable> linear(const Variable& x, const Variable& weight, const Variable& bias);
Expected<Variable> sum(const Variable& x, std::vector<int64_t> axes = {}, bool keepdim = false);
Expected<Variable> mean(const Variable& x, std::vector<int64_t> axes = {}, bool keepdim = false);
Expected<Variable> max(const Variable& x, std::vector<int64_t> axes = {}, bool keepdim = false);
Expected<Variable> concat(const Variable& a, const Variable& b, int64_t dim);
Expected<Variable> softmax(const Variable& x);
Expected<Variable> log_softmax(const Variable& x);
Expected<Variable> cross_entropy(const Variable& logits, const Variable& target,
                                 int64_t ignore_index = -100, double label_smoothing = 0.0,
                                 int reduction = 0);
Expected<Variable> layer_norm(const Variable& x, const Variable& weight, const Variable& bias,
                              double eps = 1e-5);
Expected<Variable> embedding(const Variable& weight, const Variable& ids);
Expected<Variable> causal_mask(const Variable& scores);
Expected<Variable> dropout(const Variable& x, double p, int64_t seed);
Expected<Variable> conv2d(const Variable& x, const Variable& weight, const Variable& bias,
                          std::vector<int64_t> stride = {1, 1},
                          std::vector<int64_t> padding = {0, 0},
                          std::vector<int64_t> dilation = {1, 1}, int64_t groups = 1);
Expected<Variable> max_pool2d(const Variable& x, std::vector<int64_t> window,
                              std::vector<int64_t> stride = {},
                              std::vector<int64_t> padding = {0, 0});
Expected<Variable> avg_pool2d(const Variable& x, std::vector<int64_t> window,
                              std::vector<int64_t> stride = {},
                              std::vector<int64_t> padding = {0, 0});
// Pooling with every option of ops::PoolOptions (1-, 2- or 3-d by the window's length).
Expected<Variable> max_pool(const Variable& x, std::vector<int64_t> window,
                            const ops::PoolOptions& options = {});
Expected<Variable> avg_pool(const Variable& x, std::vector<int64_t> window,
                            const ops::PoolOptions& options = {});
Expected<Variable> conv_transpose2d(const Variable& x, const Variable& weight, const Variable& bias,
                                    std::vector<int64_t> stride = {1, 1},
                                    std::vector<int64_t> padding = {0, 0},
                                    std::vector<int64_t> output_padding = {0, 0},
                                    std::vector<int64_t> dilation = {1, 1}, int64_t groups = 1);
Expected<Variable> conv1d(const Variable& x, const Variable& weight, const Variable& bias,
                          int64_t stride = 1, int64_t padding = 0, int64_t dilation = 1,
                          int64_t groups = 1);
// ops::scaled_dot_product_attention with an optional mask (bool or f32; it gets no gradient).
Expected<Variable> scaled_dot_product_attention(const Variable& q, const Variable& k,
                                                const Variable& v,
                                                const std::optional<Variable>& attn_mask = {},
                                                int64_t causal = 0,
                                                std::optional<double> scale = {},
                                                bool enable_gqa = false);
Expected<Variable> reshape(const Variable& x, const Shape& shape);
Expected<Variable> permute(const Variable& x, const std::vector<int64_t>& order);
Expected<Variable> slice(const Variable& x, int64_t dim, int64_t start, int64_t end,
                         int64_t step = 1);

// Batch norm over N, H, W of x [N, C, H, W] (or N of [N, C]) with weight and bias [C] (the
// batch_norm op). Training: normalises with the batch's statistics and moves the running ones
// towards them by `momentum`, in place (the running variance is the unbiased one, as in
// PyTorch); evaluation: uses the running ones.
struct BatchNormState {
  Tensor running_mean;  // [C], f32, on x's device
  Tensor running_var;   // [C]
};
Expected<Variable> batch_norm(const Variable& x, const Variable& weight, const Variable& bias,
                              BatchNormState& state, bool training, double momentum = 0.1,
                              double eps = 1e-5);

// ---- Operators ----
// a + b, a - b, a * b, a / b (element-wise, broadcasting), a double on either side, and -a, as on
// torch tensors. An operand may be an Expected<Variable> (another op's result): an expression is
// checked once at the end, and the first error in it is what the result holds.
//
//   TESSEL_ASSIGN_OR_RETURN(Variable y, (x - mean) * 0.5 + 1.0);
Expected<Variable> operator+(const Expected<Variable>& a, const Expected<Variable>& b);
Expected<Variable> operator-(const Expected<Variable>& a, const Expected<Variable>& b);
Expected<Variable> operator*(const Expected<Variable>& a, const Expected<Variable>& b);
Expected<Variable> operator/(const Expected<Variable>& a, const Expected<Variable>& b);
Expected<Variable> operator+(const Expected<Variable>& a, double b);
Expected<Variable> operator-(const Expected<Variable>& a, double b);
Expected<Variable> operator*(const Expected<Variable>& a, double b);
Expected<Variable> operator/(const Expected<Variable>& a, double b);
Expected<Variable> operator+(double a, const Expected<Variable>& b);
Expected<Variable> operator-(double a, const Expected<Variable>& b);
Expected<Variable> operator*(double a, const Expected<Variable>& b);
Expected<Variable> operator/(double a, const Expected<Variable>& b);
Expected<Variable> operator-(const Expected<Variable>& a);

// A whole number on either side (int, int64_t ...; these overloads win over the double ones for
// an integer argument): with an integer variable it is a constant of the variable's dtype, so
// int + 2 stays int as in PyTorch (an error if the number does not fit that dtype; a bool variable
// becomes i64); with a float variable it is the double. Division is true division, so int / 2 is
// f32 as in PyTorch.
Expected<Variable> add_whole(const Expected<Variable>& a, int64_t b);
Expected<Variable> sub_whole(const Expected<Variable>& a, int64_t b);
Expected<Variable> rsub_whole(int64_t a, const Expected<Variable>& b);
Expected<Variable> mul_whole(const Expected<Variable>& a, int64_t b);
template <std::integral I>
Expected<Variable> operator+(const Expected<Variable>& a, I b) {
  return add_whole(a, static_cast<int64_t>(b));
}
template <std::integral I>
Expected<Variable> operator-(const Expected<Variable>& a, I b) {
  return sub_whole(a, static_cast<int64_t>(b));
}
template <std::integral I>
Expected<Variable> operator*(const Expected<Variable>& a, I b) {
  return mul_whole(a, static_cast<int64_t>(b));
}
template <std::integral I>
Expected<Variable> operator/(const Expected<Variable>& a, I b) {
  return a / static_cast<double>(b);
}
template <std::integral I>
Expected<Variable> operator+(I a, const Expected<Variable>& b) {
  return add_whole(b, static_cast<int64_t>(a));
}
template <std::integral I>
Expected<Variable> operator-(I a, const Expected<Variable>& b) {
  return rsub_whole(static_cast<int64_t>(a), b);
}
template <std::integral I>
Expected<Variable> operator*(I a, const Expected<Variable>& b) {
  return mul_whole(b, static_cast<int64_t>(a));
}
template <std::integral I>
Expected<Variable> operator/(I a, const Expected<Variable>& b) {
  return static_cast<double>(a) / b;
}

// ---- Composites ----

// softmax(q k^T / sqrt(D), causally masked) v for q, k, v [..., T, D].
Expected<Variable> causal_self_attention(const Variable& q, const Variable& k, const Variable& v);

}  // namespace tessel::autograd
