// Recorded ops on Variables (see functional.h).
#include "autograd/functional.h"

namespace tessel::autograd {

using ops::Attrs;

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
Expected<Variable> scale(const Variable& x, double factor) {
  return apply("scale", {x}, Attrs().set("factor", factor));
}
Expected<Variable> matmul(const Variable& a, const Variable& b) {
  return apply("matmul", {a, b});
}
Expected<Variable> linear(const Variable& x, const Variable& weight, const Variable& bias) {
  return apply("linear", {x, weight, bias});
}
Expected<Variable> sum(const Variable& x, std::vector<int64_t> axes, bool keepdim) {
  return apply("sum", {x}, Attrs().set("axes", std::move(axes)).set("keepdim", keepdim ? 1 : 0));
}
Expected<Variable> mean(const Variable& x, std::vector<int64_t> axes, bool keepdim) {
  return apply("mean", {x}, Attrs().set("axes", std::move(axes)).set("keepdim", keepdim ? 1 : 0));
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

}  // namespace tessel::autograd
