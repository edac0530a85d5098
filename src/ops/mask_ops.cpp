// Masking ops: causal_mask (attention scores above the diagonal set to a value, -inf by default)
// and dropout (seeded: the mask is a hash of the seed and the element's position, so backward
// makes it again and nothing is saved). Kernels: kernels/mask.tile.
#include <cmath>
#include <limits>

#include "ops/kernel_util.h"
#include "ops/ops.h"
#include "ops/reference_util.h"

namespace tessel::ops {
namespace {

// Runs a [D0, D1, D2] element-wise kernel from x to a fresh tensor of its shape.
Expected<Tensor> map_elements(const std::string& kernel, const Tensor& x,
                              const std::vector<KernelArg>& scalars) {
  TESSEL_ASSIGN_OR_RETURN(Tensor y, empty_like_device(x.shape(), x.dtype(), x));
  if (y.numel() == 0) return y;
  Tensor in = x;
  auto views = merged_views({in, y}, 3);
  if (!views) {
    TESSEL_ASSIGN_OR_RETURN(in, contiguous_on_device(x));
    views = merged_views({in, y}, 3);
  }
  std::vector<KernelArg> args{(*views)[0], (*views)[1]};
  args.insert(args.end(), scalars.begin(), scalars.end());
  TESSEL_TRY(launch_kernel(kernel, {}, args));
  return y;
}

// ---- causal_mask ----

Expected<Tensor> causal_mask_kernel(const Tensor& x, double hidden) {
  TESSEL_ASSIGN_OR_RETURN(Tensor y, empty_like_device(x.shape(), x.dtype(), x));
  if (y.numel() == 0) return y;
  const int64_t m = x.size(-2), n = x.size(-1), z = x.numel() / (m * n);
  TESSEL_ASSIGN_OR_RETURN(Tensor in, contiguous_on_device(x));
  TESSEL_TRY(launch_kernel(
      "causal_mask", {},
      {View{in, {z, m, n}, {m * n, n, 1}}, View{y, {z, m, n}, {m * n, n, 1}}, hidden}));
  return y;
}

OpDef causal_mask_op() {
  OpDef op;
  op.name = "causal_mask";
  op.attrs = {"value"};
  op.infer = [](const std::vector<TensorMeta>& in, const Attrs&) -> Expected<TensorMeta> {
    if (in[0].shape.size() < 2 || in[0].dtype != DType::kF32)
      return invalid_argument("causal_mask: needs f32 scores [..., queries, keys], got {}",
                              shapes_string(in));
    return in[0];
  };
  op.forward = [](const std::vector<Tensor>& in, const Attrs& a, const TensorMeta&) {
    return causal_mask_kernel(in[0],
                              a.get_double("value", -std::numeric_limits<double>::infinity()));
  };
  op.reference = [](const std::vector<RefTensor>& in, const Attrs& a) {
    RefTensor out = in[0];
    const int64_t m = in[0].shape[in[0].shape.size() - 2], n = in[0].shape.back();
    for (int64_t i = 0; i < reference::numel(out.shape); ++i) {
      int64_t r = i / n % m, c = i % n;
      if (c > r + n - m) out.values[i] = a.get_double("value", -INFINITY);
    }
    return out;
  };
  op.backward = [](const BackwardArgs& b) -> Expected<std::vector<Tensor>> {
    TESSEL_ASSIGN_OR_RETURN(Tensor dx, causal_mask_kernel(b.grad_output, 0.0));
    return std::vector<Tensor>{dx};
  };
  return op;
}

// ---- dropout ----

constexpr int64_t kPrime = 2147483647;  // 2^31 - 1

int64_t dropout_threshold(double p) {
  return static_cast<int64_t>(std::ceil(p * static_cast<double>(kPrime)));
}

Expected<Tensor> dropout_kernel(const Tensor& x, const Attrs& a) {
  const double p = a.get_double("p", 0.5);
  return map_elements("dropout", x, {dropout_threshold(p), a.get_int("seed", 0), 1.0 / (1.0 - p)});
}

OpDef dropout_op() {
  OpDef op;
  op.name = "dropout";
  op.attrs = {"p", "seed"};
  op.infer = [](const std::vector<TensorMeta>& in, const Attrs& a) -> Expected<TensorMeta> {
    double p = a.get_double("p", 0.5);
    if (!(p >= 0 && p < 1)) return invalid_argument("dropout: p = {} is outside [0, 1)", p);
    if (!is_floating_point(in[0].dtype))
      return invalid_argument("dropout: needs a floating-point input, got {}", shapes_string(in));
    if (a.get_int("seed", 0) < 0)
      return invalid_argument("dropout: seed {} is negative", a.get_int("seed", 0));
    return in[0];
  };
  op.forward = [](const std::vector<Tensor>& in, const Attrs& a, const TensorMeta&) {
    return dropout_kernel(in[0], a);
  };
  op.reference = [](const std::vector<RefTensor>& in, const Attrs& a) {
    const double p = a.get_double("p", 0.5);
    const int64_t seed = a.get_int("seed", 0), threshold = dropout_threshold(p);
    RefTensor out = in[0];
    for (int64_t n = 0; n < static_cast<int64_t>(out.values.size()); ++n) {
      out.values[n] = reference::dropout_keeps(n, seed, threshold) ? out.values[n] / (1 - p) : 0.0;
    }
    return out;
  };
  op.backward = [](const BackwardArgs& b) -> Expected<std::vector<Tensor>> {
    TESSEL_ASSIGN_OR_RETURN(Tensor dx, dropout_kernel(b.grad_output, b.attrs));
    return std::vector<Tensor>{dx};
  };
  return op;
}

}  // namespace

void add_mask_ops(std::vector<OpDef>& ops) {
  ops.push_back(causal_mask_op());
  ops.push_back(dropout_op());
}

Expected<Tensor> causal_mask(const Tensor& scores) {
  return run("causal_mask", {scores});
}
Expected<Tensor> dropout(const Tensor& x, double p, int64_t seed) {
  return run("dropout", {x}, Attrs().set("p", p).set("seed", seed));
}

}  // namespace tessel::ops
