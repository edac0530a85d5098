// batch_norm: torch.nn.functional.batch_norm over the N, H, W axes of x [N, C, H, W] (or N of
// [N, C]), on kernels/batchnorm.tile. Inputs: x, weight [C], bias [C], running_mean [C],
// running_var [C]; attributes training (0/1), momentum, eps.
//
// Training normalises with the batch's statistics and, like PyTorch, moves running_mean and
// running_var towards them *in place* (the running variance is the unbiased one); evaluation
// normalises with the running statistics. Forward is two passes over x (statistics, then one
// multiply-add per element); backward is two more (the per-channel sums, then dx), and
// recomputes the batch statistics in its first pass rather than keeping them from forward.
#include "ops/kernel_util.h"
#include "ops/ops.h"
#include "ops/reference_util.h"

#include <cmath>

namespace tessel::ops {
namespace {

// x as [N, C, L].
View channels_view(const Tensor& x) {
  const Strides& s = x.strides();
  const int64_t l = x.rank() == 4 ? x.size(2) * x.size(3) : 1;
  return View{x, {x.size(0), x.size(1), l}, {s[0], s[1], x.rank() == 4 ? s[3] : 1}};
}

Expected<Tensor> channels_contiguous(const Tensor& x) {
  // H and W must merge into one axis L; anything else is copied first.
  if (x.rank() == 4 && x.strides()[2] != x.size(3) * x.strides()[3]) return copy_on_device(x);
  return x;
}

Expected<TensorMeta> infer_batch_norm(const std::vector<TensorMeta>& in, const Attrs&) {
  const Shape& x = in[0].shape;
  bool ok = (x.size() == 2 || x.size() == 4) && x[0] > 0;
  for (size_t i = 0; i < in.size(); ++i) {
    ok = ok && in[i].dtype == DType::kF32;
    if (i > 0) ok = ok && x.size() >= 2 && in[i].shape == Shape{x[1]};
  }
  if (!ok)
    return invalid_argument(
        "batch_norm: needs f32 x [N, C] or [N, C, H, W] (N >= 1) and weight, bias, running_mean, "
        "running_var [C], got {}",
        shapes_string(in));
  return TensorMeta{x, DType::kF32};
}

KernelParams mode(const Attrs& a) {
  return {{"TRAIN", a.get_int("training", 1) != 0 ? "1" : "0"}};
}

Expected<Tensor> batch_norm_forward(const std::vector<Tensor>& in, const Attrs& a,
                                    const TensorMeta& out) {
  TESSEL_ASSIGN_OR_RETURN(Tensor x, channels_contiguous(in[0]));
  const int64_t c = x.size(1);
  TESSEL_ASSIGN_OR_RETURN(Tensor stats, empty_like_device({2, c}, DType::kF32, x));
  TESSEL_TRY(launch_kernel("batchnorm_stats", mode(a),
                           {channels_view(x), in[3], in[4], stats, a.get_double("momentum", 0.1),
                            a.get_double("eps", 1e-5)}));
  TESSEL_ASSIGN_OR_RETURN(Tensor y, empty_like_device(out.shape, out.dtype, x));
  TESSEL_TRY(launch_kernel("batchnorm_apply", {},
                           {channels_view(x), stats, in[1], in[2], channels_view(y)}));
  return y;
}

Expected<std::vector<Tensor>> batch_norm_backward(const BackwardArgs& b) {
  TESSEL_ASSIGN_OR_RETURN(Tensor x, channels_contiguous(b.inputs[0]));
  TESSEL_ASSIGN_OR_RETURN(Tensor g, channels_contiguous(b.grad_output));
  const int64_t c = x.size(1);
  TESSEL_ASSIGN_OR_RETURN(Tensor coef, empty_like_device({4, c}, DType::kF32, x));
  TESSEL_ASSIGN_OR_RETURN(Tensor dweight, empty_like_device({c}, DType::kF32, x));
  TESSEL_ASSIGN_OR_RETURN(Tensor dbias, empty_like_device({c}, DType::kF32, x));
  TESSEL_TRY(launch_kernel("batchnorm_grad_stats", mode(b.attrs),
                           {channels_view(x), channels_view(g), b.inputs[3], b.inputs[4],
                            b.inputs[1], coef, dweight, dbias, b.attrs.get_double("eps", 1e-5)}));
  std::vector<Tensor> grads(5);
  if (b.needs_grad[0]) {
    TESSEL_ASSIGN_OR_RETURN(Tensor dx, empty_like_device(x.shape(), x.dtype(), x));
    TESSEL_TRY(launch_kernel("batchnorm_grad_apply", {},
                             {channels_view(x), channels_view(g), coef, channels_view(dx)}));
    grads[0] = dx;
  }
  if (b.needs_grad[1]) grads[1] = dweight;
  if (b.needs_grad[2]) grads[2] = dbias;
  return grads;
}

// Plain C++ in double: the statistics of each channel, then the normalisation.
RefTensor batch_norm_reference(const std::vector<RefTensor>& in, const Attrs& a) {
  const RefTensor& x = in[0];
  const int64_t n = x.shape[0], c = x.shape[1], l = reference::numel(x.shape) / (n * c);
  const bool training = a.get_int("training", 1) != 0;
  const double eps = a.get_double("eps", 1e-5);
  RefTensor y = x;
  for (int64_t ch = 0; ch < c; ++ch) {
    double mean = in[3].values[ch], var = in[4].values[ch];
    if (training) {
      mean = var = 0;
      for (int64_t i = 0; i < n; ++i)
        for (int64_t p = 0; p < l; ++p)
          mean += x.values[(i * c + ch) * l + p] / double(n * l);
      for (int64_t i = 0; i < n; ++i)
        for (int64_t p = 0; p < l; ++p)
          var += std::pow(x.values[(i * c + ch) * l + p] - mean, 2) / double(n * l);
    }
    for (int64_t i = 0; i < n; ++i)
      for (int64_t p = 0; p < l; ++p) {
        double& v = y.values[(i * c + ch) * l + p];
        v = (v - mean) / std::sqrt(var + eps) * in[1].values[ch] + in[2].values[ch];
      }
  }
  return y;
}

OpDef batch_norm_op() {
  OpDef op;
  op.name = "batch_norm";
  op.arity = 5;
  op.attrs = {"training", "momentum", "eps"};
  op.infer = infer_batch_norm;
  op.forward = batch_norm_forward;
  op.reference = batch_norm_reference;
  op.save_inputs = {true, true, false, true, true};
  op.differentiable = {true, true, true, false, false};
  op.backward = batch_norm_backward;
  return op;
}

}  // namespace

void add_batch_norm_ops(std::vector<OpDef>& ops) {
  ops.push_back(batch_norm_op());
}

Expected<Tensor> batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias,
                            const Tensor& running_mean, const Tensor& running_var, bool training,
                            double momentum, double eps) {
  return run("batch_norm", {x, weight, bias, running_mean, running_var},
             Attrs()
                 .set("training", training ? 1 : 0)
                 .set("momentum", momentum)
                 .set("eps", eps));
}

}  // namespace tessel::ops
