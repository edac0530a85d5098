// Normalisations beside layer_norm (nn_ops.cpp): layer_norm_stats (the mean and inverse
// standard deviation layer_norm uses, ONNX's optional outputs), rms_norm over the last axis
// (torch.nn.functional.rms_norm with normalized_shape [C]; kernels/rmsnorm.tile) and group_norm
// (torch.nn.functional.group_norm: x [N, C, *] normalised over each group of C / G channels and
// all positions, then a per-channel affine). group_norm runs layernorm.tile's kernels over rows of
// [N G, C / G * S] with a unit, stride-0 gamma and a zero beta, and the affine as mul and add.
#include <cmath>
#include <limits>

#include "ops/kernel_util.h"
#include "ops/ops.h"
#include "ops/reference_util.h"

namespace tessel::ops {
namespace {

// PyTorch's rms_norm default: eps=None means the dtype's machine epsilon.
double rms_eps(const Attrs& a) {
  return a.get_double("eps", std::numeric_limits<float>::epsilon());
}

Status check_eps(const std::string& op, double eps) {
  if (!(eps >= 0)) return invalid_argument("{}: eps must be >= 0, got {}", op, eps);
  return ok_status();
}

OpDef rms_norm_op() {
  OpDef op;
  op.name = "rms_norm";
  op.arity = 2;
  op.attrs = {"eps"};
  op.infer = [](const std::vector<TensorMeta>& in, const Attrs& a) -> Expected<TensorMeta> {
    const Shape& x = in[0].shape;
    if (x.empty() || in[1].shape != Shape{x.back()} || in[0].dtype != DType::kF32 ||
        in[1].dtype != DType::kF32)
      return invalid_argument("rms_norm: needs f32 x [..., C] and weight [C], got {}",
                              shapes_string(in));
    TESSEL_TRY(check_eps("rms_norm", rms_eps(a)));
    return in[0];
  };
  op.forward = [](const std::vector<Tensor>& in, const Attrs& a,
                  const TensorMeta& out) -> Expected<Tensor> {
    TESSEL_ASSIGN_OR_RETURN(Tensor y, empty_like_device(out.shape, out.dtype, in[0]));
    TESSEL_ASSIGN_OR_RETURN(View x, rows_view(in[0]));
    TESSEL_ASSIGN_OR_RETURN(View yv, rows_view(y));
    TESSEL_TRY(launch_kernel("rmsnorm", {}, {x, in[1], yv, rms_eps(a)}));
    return y;
  };
  op.reference = [](const std::vector<RefTensor>& in, const Attrs& a) {
    RefTensor out = in[0];
    const int64_t n = in[0].shape.back(), m = reference::numel(in[0].shape) / n;
    for (int64_t r = 0; r < m; ++r) {
      double q = 0;
      for (int64_t c = 0; c < n; ++c)
        q += in[0].values[r * n + c] * in[0].values[r * n + c] / n;
      for (int64_t c = 0; c < n; ++c)
        out.values[r * n + c] *= in[1].values[c] / std::sqrt(q + rms_eps(a));
    }
    return out;
  };
  op.save_inputs = {true, true};
  op.backward = [](const BackwardArgs& b) -> Expected<std::vector<Tensor>> {
    TESSEL_ASSIGN_OR_RETURN(auto d, row_norm_grad("rmsnorm_grad", {}, b.inputs[0], b.inputs[1],
                                                  b.grad_output, rms_eps(b.attrs)));
    std::vector<Tensor> grads{d.first, Tensor()};
    if (b.needs_grad[1]) {
      TESSEL_ASSIGN_OR_RETURN(grads[1], sum(d.second, {0}));
    }
    return grads;
  };
  return op;
}

Shape infer_shape_of_stats(const Shape& x) {
  Shape out{2};
  out.insert(out.end(), x.begin(), x.end() - 1);
  return out;
}

// ---- layer_norm_stats ----
//
// ONNX LayerNormalization's optional outputs Mean and InvStdDev for x [..., C]: one tensor
// [2, ...] (mean first). Not differentiable: they are what a backward pass reads.

OpDef layer_norm_stats_op() {
  OpDef op;
  op.name = "layer_norm_stats";
  op.attrs = {"eps"};
  op.infer = [](const std::vector<TensorMeta>& in, const Attrs& a) -> Expected<TensorMeta> {
    const Shape& x = in[0].shape;
    if (x.empty() || in[0].dtype != DType::kF32)
      return invalid_argument("layer_norm_stats: needs f32 x [..., C], got {}", shapes_string(in));
    TESSEL_TRY(check_eps("layer_norm_stats", a.get_double("eps", 1e-5)));
    return TensorMeta{infer_shape_of_stats(x), DType::kF32};
  };
  op.forward = [](const std::vector<Tensor>& in, const Attrs& a,
                  const TensorMeta& out) -> Expected<Tensor> {
    TESSEL_ASSIGN_OR_RETURN(View x, rows_view(in[0]));
    const int64_t m = x.shape[0];
    TESSEL_ASSIGN_OR_RETURN(Tensor s, empty_like_device(out.shape, out.dtype, in[0]));
    TESSEL_TRY(launch_kernel("layernorm_stats", {},
                             {x, View{s, {2, m}, {m, 1}}, a.get_double("eps", 1e-5)}));
    return s;
  };
  op.reference = [](const std::vector<RefTensor>& in, const Attrs& a) {
    const int64_t n = in[0].shape.back(), m = reference::numel(in[0].shape) / n;
    RefTensor out{infer_shape_of_stats(in[0].shape), std::vector<double>(2 * m)};
    for (int64_t r = 0; r < m; ++r) {
      double mean = 0, var = 0;
      for (int64_t c = 0; c < n; ++c)
        mean += in[0].values[r * n + c] / n;
      for (int64_t c = 0; c < n; ++c)
        var += (in[0].values[r * n + c] - mean) * (in[0].values[r * n + c] - mean) / n;
      out.values[r] = mean;
      out.values[m + r] = 1 / std::sqrt(var + a.get_double("eps", 1e-5));
    }
    return out;
  };
  return op;
}

// ---- group_norm ----

struct Groups {
  int64_t n, c, g, positions;
  int64_t rows() const { return n * g; }
  int64_t row_length() const { return c / g * positions; }
};
Groups groups_of(const Shape& x, const Attrs& a) {
  int64_t positions = 1;
  for (size_t d = 2; d < x.size(); ++d)
    positions *= x[d];
  return {x[0], x[1], a.get_int("num_groups", 1), positions};
}

// weight or bias [C] as [C, 1, ..., 1], broadcasting over x [N, C, *].
Expected<Tensor> per_channel(const Tensor& t, int64_t rank) {
  Shape s(rank - 1, 1);
  s[0] = t.size(0);
  return reshape(t, s);
}

// x normalised per group, without the affine: [N, C, *] (layernorm over [N G, C / G * S] rows).
Expected<Tensor> normalised(const Tensor& x, const Groups& p, double eps) {
  TESSEL_ASSIGN_OR_RETURN(Tensor xc, contiguous_on_device(x));
  const int64_t m = p.rows(), l = p.row_length();
  TESSEL_ASSIGN_OR_RETURN(Tensor one, Tensor::full({1}, 1.0, DType::kF32, x.device()));
  TESSEL_ASSIGN_OR_RETURN(Tensor zero, Tensor::zeros({1}, DType::kF32, x.device()));
  TESSEL_ASSIGN_OR_RETURN(Tensor y, empty_like_device(x.shape(), DType::kF32, x));
  TESSEL_TRY(launch_kernel("layernorm", {},
                           {View{xc, {m, l}, {l, 1}}, View{one, {l}, {0}}, View{zero, {l}, {0}},
                            View{y, {m, l}, {l, 1}}, eps}));
  return y;
}

OpDef group_norm_op() {
  OpDef op;
  op.name = "group_norm";
  op.arity = 3;
  op.attrs = {"num_groups", "eps"};
  op.infer = [](const std::vector<TensorMeta>& in, const Attrs& a) -> Expected<TensorMeta> {
    const Shape& x = in[0].shape;
    const int64_t g = a.get_int("num_groups", 1);
    bool ok = x.size() >= 2 && in[1].shape == Shape{x[1]} && in[2].shape == Shape{x[1]};
    for (const TensorMeta& m : in)
      ok = ok && m.dtype == DType::kF32;
    if (!ok)
      return invalid_argument("group_norm: needs f32 x [N, C, *], weight [C], bias [C], got {}",
                              shapes_string(in));
    if (g < 1 || x[1] % g != 0)
      return invalid_argument("group_norm: {} channels do not split into num_groups = {}", x[1], g);
    TESSEL_TRY(check_eps("group_norm", a.get_double("eps", 1e-5)));
    return in[0];
  };
  op.forward = [](const std::vector<Tensor>& in, const Attrs& a,
                  const TensorMeta&) -> Expected<Tensor> {
    const Groups p = groups_of(in[0].shape(), a);
    TESSEL_ASSIGN_OR_RETURN(Tensor xhat, normalised(in[0], p, a.get_double("eps", 1e-5)));
    TESSEL_ASSIGN_OR_RETURN(Tensor w, per_channel(in[1], in[0].rank()));
    TESSEL_ASSIGN_OR_RETURN(Tensor bias, per_channel(in[2], in[0].rank()));
    TESSEL_ASSIGN_OR_RETURN(Tensor scaled, mul(xhat, w));
    return add(scaled, bias);
  };
  op.reference = [](const std::vector<RefTensor>& in, const Attrs& a) {
    const Groups p = groups_of(in[0].shape, a);
    const double eps = a.get_double("eps", 1e-5);
    const int64_t l = p.row_length(), per_channel = p.positions;
    RefTensor out = in[0];
    for (int64_t r = 0; r < p.rows(); ++r) {
      const double* row = &in[0].values[r * l];
      double mean = 0, var = 0;
      for (int64_t i = 0; i < l; ++i)
        mean += row[i] / l;
      for (int64_t i = 0; i < l; ++i)
        var += (row[i] - mean) * (row[i] - mean) / l;
      for (int64_t i = 0; i < l; ++i) {
        const int64_t channel = r % p.g * (p.c / p.g) + i / per_channel;
        out.values[r * l + i] =
            (row[i] - mean) / std::sqrt(var + eps) * in[1].values[channel] + in[2].values[channel];
      }
    }
    return out;
  };
  op.save_inputs = {true, true, false};
  // dbias = sum of g over N and positions; dweight = sum of g xhat; dx = the layer-norm gradient
  // of the rows with g weight as the output gradient.
  op.backward = [](const BackwardArgs& b) -> Expected<std::vector<Tensor>> {
    const Tensor& x = b.inputs[0];
    const Groups p = groups_of(x.shape(), b.attrs);
    const double eps = b.attrs.get_double("eps", 1e-5);
    std::vector<int64_t> not_channels{0};
    for (int64_t d = 2; d < x.rank(); ++d)
      not_channels.push_back(d);
    std::vector<Tensor> grads(3);
    if (b.needs_grad[2]) {
      TESSEL_ASSIGN_OR_RETURN(grads[2], sum(b.grad_output, not_channels));
    }
    if (b.needs_grad[1]) {
      TESSEL_ASSIGN_OR_RETURN(Tensor xhat, normalised(x, p, eps));
      TESSEL_ASSIGN_OR_RETURN(Tensor gx, mul(b.grad_output, xhat));
      TESSEL_ASSIGN_OR_RETURN(grads[1], sum(gx, not_channels));
    }
    if (b.needs_grad[0]) {
      TESSEL_ASSIGN_OR_RETURN(Tensor w, per_channel(b.inputs[1], x.rank()));
      TESSEL_ASSIGN_OR_RETURN(Tensor gw, mul(b.grad_output, w));
      TESSEL_ASSIGN_OR_RETURN(Tensor xc, contiguous_on_device(x));
      const int64_t m = p.rows(), l = p.row_length();
      TESSEL_ASSIGN_OR_RETURN(Tensor one, Tensor::full({1}, 1.0, DType::kF32, x.device()));
      TESSEL_ASSIGN_OR_RETURN(Tensor dx, empty_like_device(x.shape(), DType::kF32, x));
      TESSEL_ASSIGN_OR_RETURN(Tensor unused, empty_like_device({m, l}, DType::kF32, x));
      TESSEL_TRY(launch_kernel("layernorm_grad", {},
                               {View{xc, {m, l}, {l, 1}}, View{one, {l}, {0}},
                                View{gw, {m, l}, {l, 1}}, View{dx, {m, l}, {l, 1}}, unused, eps}));
      grads[0] = dx;
    }
    return grads;
  };
  return op;
}

}  // namespace

void add_norm_ops(std::vector<OpDef>& ops) {
  ops.push_back(rms_norm_op());
  ops.push_back(group_norm_op());
  ops.push_back(layer_norm_stats_op());
}

Expected<Tensor> rms_norm(const Tensor& x, const Tensor& weight, std::optional<double> eps) {
  Attrs a;
  if (eps) a.set("eps", *eps);
  return run("rms_norm", {x, weight}, a);
}
Expected<Tensor> layer_norm_stats(const Tensor& x, double eps) {
  return run("layer_norm_stats", {x}, Attrs().set("eps", eps));
}
Expected<Tensor> group_norm(const Tensor& x, int64_t num_groups, const Tensor& weight,
                            const Tensor& bias, double eps) {
  return run("group_norm", {x, weight, bias},
             Attrs().set("num_groups", num_groups).set("eps", eps));
}

}  // namespace tessel::ops
