// Recorded ops on Variables (see functional.h).
#include "autograd/functional.h"

#include <cmath>

#include "autograd/autocast.h"
#include "ops/ops.h"

namespace tessel::autograd {

using ops::Attrs;

namespace {
// The gemm ops carry the autocast scope's dtype as their "compute" attr (autocast.h).
Attrs autocast_attrs(Attrs attrs = {}) {
  if (autocast_dtype() != DType::kF32) attrs.set("compute", static_cast<int64_t>(autocast_dtype()));
  return attrs;
}
}  // namespace

Expected<Variable> add(const Variable& a, const Variable& b) {
  return apply("add", {a, b});
}
Expected<Variable> sub(const Variable& a, const Variable& b) {
  return apply("sub", {a, b});
}
Expected<Variable> mul(const Variable& a, const Variable& b) {
  return apply("mul", {a, b});
}
Expected<Variable> div(const Variable& a, const Variable& b) {
  return apply("div", {a, b});
}
Expected<Variable> relu(const Variable& x) {
  return apply("relu", {x});
}
Expected<Variable> gelu(const Variable& x) {
  return apply("gelu", {x});
}
Expected<Variable> tanh(const Variable& x) {
  return apply("tanh", {x});
}
Expected<Variable> sigmoid(const Variable& x) {
  return apply("sigmoid", {x});
}
Expected<Variable> silu(const Variable& x) {
  return apply("silu", {x});
}
Expected<Variable> gelu_erf(const Variable& x) {
  return apply("gelu_erf", {x});
}
Expected<Variable> rsqrt(const Variable& x) {
  return apply("rsqrt", {x});
}
Expected<Variable> scale(const Variable& x, double factor) {
  return apply("scale", {x}, Attrs().set("factor", factor));
}
Expected<Variable> matmul(const Variable& a, const Variable& b) {
  return apply("matmul", {a, b}, autocast_attrs());
}
Expected<Variable> linear(const Variable& x, const Variable& weight, const Variable& bias) {
  return apply("linear", {x, weight, bias}, autocast_attrs());
}
Expected<Variable> sum(const Variable& x, std::vector<int64_t> axes, bool keepdim) {
  return apply("sum", {x}, Attrs().set("axes", std::move(axes)).set("keepdim", keepdim ? 1 : 0));
}
Expected<Variable> mean(const Variable& x, std::vector<int64_t> axes, bool keepdim) {
  return apply("mean", {x}, Attrs().set("axes", std::move(axes)).set("keepdim", keepdim ? 1 : 0));
}
Expected<Variable> max(const Variable& x, std::vector<int64_t> axes, bool keepdim) {
  return apply("max", {x}, Attrs().set("axes", std::move(axes)).set("keepdim", keepdim ? 1 : 0));
}
Expected<Variable> concat(const Variable& a, const Variable& b, int64_t dim) {
  return apply("concat", {a, b}, Attrs().set("dim", dim));
}
Expected<Variable> softmax(const Variable& x) {
  return apply("softmax", {x});
}
Expected<Variable> log_softmax(const Variable& x) {
  return apply("log_softmax", {x});
}
Expected<Variable> cross_entropy(const Variable& logits, const Variable& target,
                                 int64_t ignore_index, double label_smoothing, int reduction) {
  return apply("cross_entropy", {logits, target},
               Attrs()
                   .set("ignore_index", ignore_index)
                   .set("label_smoothing", label_smoothing)
                   .set("reduction", reduction));
}
Expected<Variable> layer_norm(const Variable& x, const Variable& weight, const Variable& bias,
                              double eps) {
  return apply("layer_norm", {x, weight, bias}, Attrs().set("eps", eps));
}
Expected<Variable> embedding(const Variable& weight, const Variable& ids) {
  return apply("embedding", {weight, ids});
}
Expected<Variable> causal_mask(const Variable& scores) {
  return apply("causal_mask", {scores});
}
Expected<Variable> dropout(const Variable& x, double p, int64_t seed) {
  return apply("dropout", {x}, Attrs().set("p", p).set("seed", seed));
}
Expected<Variable> conv2d(const Variable& x, const Variable& weight, const Variable& bias,
                          std::vector<int64_t> stride, std::vector<int64_t> padding,
                          std::vector<int64_t> dilation, int64_t groups) {
  return apply("conv2d", {x, weight, bias},
               autocast_attrs(ops::conv_attrs(std::move(stride), std::move(padding),
                                              std::move(dilation), groups)));
}
namespace {
Attrs pool_attrs(std::vector<int64_t> window, std::vector<int64_t> stride,
                 std::vector<int64_t> padding) {
  Attrs a = Attrs().set("window", std::move(window)).set("padding", std::move(padding));
  if (!stride.empty()) a.set("stride", std::move(stride));
  return a;
}
}  // namespace
Expected<Variable> max_pool2d(const Variable& x, std::vector<int64_t> window,
                              std::vector<int64_t> stride, std::vector<int64_t> padding) {
  return apply("max_pool2d", {x},
               pool_attrs(std::move(window), std::move(stride), std::move(padding)));
}
Expected<Variable> avg_pool2d(const Variable& x, std::vector<int64_t> window,
                              std::vector<int64_t> stride, std::vector<int64_t> padding) {
  return apply("avg_pool2d", {x},
               pool_attrs(std::move(window), std::move(stride), std::move(padding)));
}
Expected<Variable> max_pool(const Variable& x, std::vector<int64_t> window,
                            const ops::PoolOptions& options) {
  const std::string name = "max_pool" + std::to_string(window.size()) + "d";
  return apply(name, {x}, ops::pool_attrs(std::move(window), options));
}
Expected<Variable> avg_pool(const Variable& x, std::vector<int64_t> window,
                            const ops::PoolOptions& options) {
  const std::string name = "avg_pool" + std::to_string(window.size()) + "d";
  return apply(name, {x}, ops::pool_attrs(std::move(window), options));
}
Expected<Variable> conv_transpose2d(const Variable& x, const Variable& weight, const Variable& bias,
                                    std::vector<int64_t> stride, std::vector<int64_t> padding,
                                    std::vector<int64_t> output_padding,
                                    std::vector<int64_t> dilation, int64_t groups) {
  return apply("conv_transpose2d", {x, weight, bias},
               ops::conv_transpose_attrs(std::move(stride), std::move(padding),
                                         std::move(output_padding), std::move(dilation), groups));
}
Expected<Variable> conv1d(const Variable& x, const Variable& weight, const Variable& bias,
                          int64_t stride, int64_t padding, int64_t dilation, int64_t groups) {
  return apply("conv1d", {x, weight, bias},
               autocast_attrs(ops::conv_attrs({stride}, {padding}, {dilation}, groups)));
}
Expected<Variable> scaled_dot_product_attention(const Variable& q, const Variable& k,
                                                const Variable& v,
                                                const std::optional<Variable>& attn_mask,
                                                int64_t causal, std::optional<double> scale,
                                                bool enable_gqa) {
  ops::AttentionOptions o;
  o.causal = causal;
  o.scale = scale;
  o.enable_gqa = enable_gqa;
  Variable mask;
  if (attn_mask) {
    o.attn_mask = attn_mask->data();
    mask = *attn_mask;
  } else {
    TESSEL_ASSIGN_OR_RETURN(Tensor zero, Tensor::zeros({1}, DType::kF32, q.data().device()));
    mask = Variable(zero);
  }
  TESSEL_ASSIGN_OR_RETURN(Attrs a, ops::attention_attrs(o));
  return apply("scaled_dot_product_attention", {q, k, v, mask}, a);
}
Expected<Variable> reshape(const Variable& x, const Shape& shape) {
  return apply("reshape", {x}, Attrs().set("shape", shape));
}
Expected<Variable> permute(const Variable& x, const std::vector<int64_t>& order) {
  return apply("permute", {x}, Attrs().set("order", order));
}
Expected<Variable> slice(const Variable& x, int64_t dim, int64_t start, int64_t end, int64_t step) {
  return apply("slice", {x},
               Attrs().set("dim", dim).set("start", start).set("end", end).set("step", step));
}

Expected<Variable> batch_norm(const Variable& x, const Variable& weight, const Variable& bias,
                              BatchNormState& state, bool training, double momentum, double eps) {
  // The op updates the running statistics in place (training) and takes them as inputs that get
  // no gradient.
  return apply("batch_norm",
               {x, weight, bias, Variable(state.running_mean), Variable(state.running_var)},
               Attrs().set("training", training ? 1 : 0).set("momentum", momentum).set("eps", eps));
}

Expected<Variable> causal_self_attention(const Variable& q, const Variable& k, const Variable& v) {
  const int64_t rank = static_cast<int64_t>(q.shape().size());
  if (rank < 2 || k.shape() != q.shape() || v.shape() != q.shape())
    return invalid_argument(
        "causal_self_attention: needs q, k, v of one shape [..., T, D], got {}, {}, {}",
        shape_string(q.shape()), shape_string(k.shape()), shape_string(v.shape()));
  std::vector<int64_t> order(rank);
  for (int64_t d = 0; d < rank; ++d)
    order[d] = d;
  std::swap(order[rank - 1], order[rank - 2]);
  TESSEL_ASSIGN_OR_RETURN(Variable kt, permute(k, order));
  TESSEL_ASSIGN_OR_RETURN(Variable scores, matmul(q, kt));
  TESSEL_ASSIGN_OR_RETURN(Variable scaled,
                          scale(scores, 1.0 / std::sqrt(static_cast<double>(q.shape().back()))));
  TESSEL_ASSIGN_OR_RETURN(Variable masked, causal_mask(scaled));
  TESSEL_ASSIGN_OR_RETURN(Variable weights, softmax(masked));
  return matmul(weights, v);
}

}  // namespace tessel::autograd
