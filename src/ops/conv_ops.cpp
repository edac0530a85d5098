// NCHW convolution and pooling. conv2d is im2col (kernels/conv.tile) + the batched gemm, with the
// bias added by the broadcasting add; its gradient recomputes the columns from the saved input
// rather than keeping them (they are kh * kw times the input's size) and folds the column
// gradient back with col2im. Pooling is the pool2d / pool2d_grad kernels. conv2d's precision is
// that of its gemms (ops/gemm_precision.h): x and weight f32, f16 or bf16, result f32.
#include "ops/gemm_precision.h"
#include "ops/kernel_util.h"
#include "ops/ops.h"
#include "ops/reference_util.h"

namespace tessel::ops {
namespace {

struct Window {
  int64_t kh, kw, sh, sw, ph, pw, dh, dw;
  int64_t out_h(int64_t h) const { return (h + 2 * ph - dh * (kh - 1) - 1) / sh + 1; }
  int64_t out_w(int64_t w) const { return (w + 2 * pw - dw * (kw - 1) - 1) / sw + 1; }
};

Expected<std::pair<int64_t, int64_t>> pair_attr(const std::string& op, const Attrs& a,
                                                const std::string& name,
                                                std::vector<int64_t> fallback, int64_t min) {
  std::vector<int64_t> v = a.get_ints(name, fallback);
  if (v.empty()) v = fallback;
  if (v.size() == 1) v.push_back(v[0]);
  if (v.size() != 2 || v[0] < min || v[1] < min)
    return invalid_argument("{}: {} must be one or two integers >= {}, got {}", op, name, min,
                            shape_string(v));
  return std::make_pair(v[0], v[1]);
}

Expected<Window> window_of(const std::string& op, const Attrs& a, int64_t kh, int64_t kw) {
  TESSEL_ASSIGN_OR_RETURN(auto s, pair_attr(op, a, "stride", {kh, kw}, 1));
  if (op == "conv2d" && !a.has("stride")) s = {1, 1};
  TESSEL_ASSIGN_OR_RETURN(auto p, pair_attr(op, a, "padding", {0, 0}, 0));
  TESSEL_ASSIGN_OR_RETURN(auto d, pair_attr(op, a, "dilation", {1, 1}, 1));
  return Window{kh, kw, s.first, s.second, p.first, p.second, d.first, d.second};
}

std::vector<KernelArg> window_args(const Window& w, bool dilation) {
  std::vector<KernelArg> args{w.kh, w.kw, w.sh, w.sw, w.ph, w.pw};
  if (dilation) {
    args.push_back(w.dh);
    args.push_back(w.dw);
  }
  return args;
}

// ---- conv2d ----

Expected<TensorMeta> infer_conv(const std::vector<TensorMeta>& in, const Attrs& a) {
  const Shape &x = in[0].shape, &w = in[1].shape, &b = in[2].shape;
  if (x.size() != 4 || w.size() != 4 || b != Shape{w[0]} || x[1] != w[1] ||
      !is_float_operand(in[2].dtype))
    return invalid_argument(
        "conv2d: needs x [N, C, H, W], weight [O, C, KH, KW], bias [O], got {}",
        shapes_string(in));
  TESSEL_TRY(gemm_compute_dtype("conv2d", {in[0], in[1]}, a).status());
  if (a.get_int("groups", 1) != 1)
    return unimplemented("conv2d: groups = {} (only 1 so far)", a.get_int("groups", 1));
  TESSEL_ASSIGN_OR_RETURN(Window win, window_of("conv2d", a, w[2], w[3]));
  int64_t oh = win.out_h(x[2]), ow = win.out_w(x[3]);
  if (oh < 1 || ow < 1)
    return invalid_argument(
        "conv2d: a {}x{} window (dilation {}x{}) does not fit input {} with padding {}x{}", w[2],
        w[3], win.dh, win.dw, shape_string(x), win.ph, win.pw);
  return TensorMeta{{x[0], w[0], oh, ow}, DType::kF32};
}

Expected<Tensor> im2col(const Tensor& x, const Window& w, int64_t oh, int64_t ow) {
  const int64_t n = x.size(0), k = x.size(1) * w.kh * w.kw, l = oh * ow;
  TESSEL_ASSIGN_OR_RETURN(Tensor cols, empty_like_device({n, k, l}, x.dtype(), x));
  std::vector<KernelArg> args{x, cols, ow};
  for (KernelArg& s : window_args(w, true))
    args.push_back(s);
  TESSEL_TRY(launch_kernel("im2col", {}, args));
  return cols;
}

Expected<DType> conv_compute(const Tensor& x, const Tensor& weight, const Attrs& a) {
  return gemm_compute_dtype("conv2d", {{x.shape(), x.dtype()}, {weight.shape(), weight.dtype()}},
                            a);
}

Expected<Tensor> conv_forward(const std::vector<Tensor>& in, const Attrs& a,
                              const TensorMeta& out) {
  const Tensor &x = in[0], &weight = in[1];
  TESSEL_ASSIGN_OR_RETURN(Window w, window_of("conv2d", a, weight.size(2), weight.size(3)));
  TESSEL_ASSIGN_OR_RETURN(DType compute, conv_compute(x, weight, a));
  const int64_t o = weight.size(0), oh = out.shape[2], ow = out.shape[3];
  TESSEL_ASSIGN_OR_RETURN(Tensor cols, im2col(x, w, oh, ow));
  TESSEL_ASSIGN_OR_RETURN(Tensor w2, reshape(weight, {o, -1}));
  TESSEL_ASSIGN_OR_RETURN(Tensor y, matmul(w2, cols, compute));  // [N, O, OH OW]
  TESSEL_ASSIGN_OR_RETURN(Tensor bias, cast(in[2], DType::kF32));
  TESSEL_ASSIGN_OR_RETURN(Tensor b, reshape(bias, {o, 1}));
  TESSEL_ASSIGN_OR_RETURN(Tensor yb, add(y, b));
  return reshape(yb, out.shape);
}

Expected<std::vector<Tensor>> conv_backward(const BackwardArgs& b) {
  const Tensor &x = b.inputs[0], &weight = b.inputs[1];
  TESSEL_ASSIGN_OR_RETURN(Window w, window_of("conv2d", b.attrs, weight.size(2), weight.size(3)));
  TESSEL_ASSIGN_OR_RETURN(DType compute, conv_compute(x, weight, b.attrs));
  const int64_t n = x.size(0), o = weight.size(0), oh = b.grad_output.size(2),
                ow = b.grad_output.size(3);
  TESSEL_ASSIGN_OR_RETURN(Tensor g, reshape(b.grad_output, {n, o, oh * ow}));
  std::vector<Tensor> grads(3);
  if (b.needs_grad[1]) {  // dW = sum_n g_n cols_n^T
    TESSEL_ASSIGN_OR_RETURN(Tensor cols, im2col(x, w, oh, ow));
    TESSEL_ASSIGN_OR_RETURN(Tensor ct, cols.transpose(1, 2));
    TESSEL_ASSIGN_OR_RETURN(Tensor per_sample, matmul(g, ct, compute));
    TESSEL_ASSIGN_OR_RETURN(Tensor dw, sum(per_sample, {0}));
    TESSEL_ASSIGN_OR_RETURN(Tensor dw4, reshape(dw, weight.shape()));
    TESSEL_ASSIGN_OR_RETURN(grads[1], cast(dw4, weight.dtype()));
  }
  if (b.needs_grad[0]) {  // dcols = W^T g, folded back onto the input
    TESSEL_ASSIGN_OR_RETURN(Tensor w2, reshape(weight, {o, -1}));
    TESSEL_ASSIGN_OR_RETURN(Tensor wt, w2.transpose(0, 1));
    TESSEL_ASSIGN_OR_RETURN(Tensor dcols, matmul(wt, g, compute));
    TESSEL_ASSIGN_OR_RETURN(Tensor dx, empty_like_device(x.shape(), DType::kF32, x));
    std::vector<KernelArg> args{dcols, dx, oh, ow};
    for (KernelArg& s : window_args(w, true))
      args.push_back(s);
    TESSEL_TRY(launch_kernel("col2im", {}, args));
    TESSEL_ASSIGN_OR_RETURN(grads[0], cast(dx, x.dtype()));
  }
  if (b.needs_grad[2]) {
    TESSEL_ASSIGN_OR_RETURN(Tensor db, sum(g, {0, 2}));
    TESSEL_ASSIGN_OR_RETURN(grads[2], cast(db, b.input_meta[2].dtype));
  }
  return grads;
}

RefTensor conv_reference(std::vector<RefTensor> in, const Attrs& a) {
  if (a.has("compute"))  // x and weight as the compute dtype rounds them
    for (int i = 0; i < 2; ++i)
      for (double& v : in[i].values)
        v = round_to(v, static_cast<DType>(a.get_int("compute", 0)));
  const Shape &xs = in[0].shape, &ws = in[1].shape;
  Window w = window_of("conv2d", a, ws[2], ws[3]).value();
  const int64_t n = xs[0], c = xs[1], h = xs[2], wd = xs[3], o = ws[0], oh = w.out_h(h),
                ow = w.out_w(wd);
  RefTensor out{{n, o, oh, ow}, std::vector<double>(n * o * oh * ow)};
  for (int64_t b = 0; b < n; ++b)
    for (int64_t f = 0; f < o; ++f)
      for (int64_t y = 0; y < oh; ++y)
        for (int64_t x = 0; x < ow; ++x) {
          double s = in[2].values[f];
          for (int64_t ch = 0; ch < c; ++ch)
            for (int64_t i = 0; i < w.kh; ++i)
              for (int64_t j = 0; j < w.kw; ++j) {
                int64_t iy = y * w.sh - w.ph + i * w.dh, ix = x * w.sw - w.pw + j * w.dw;
                if (iy < 0 || iy >= h || ix < 0 || ix >= wd) continue;
                s += in[0].values[((b * c + ch) * h + iy) * wd + ix] *
                     in[1].values[((f * c + ch) * w.kh + i) * w.kw + j];
              }
          out.values[((b * o + f) * oh + y) * ow + x] = s;
        }
  return out;
}

OpDef conv2d_op() {
  OpDef op;
  op.name = "conv2d";
  op.arity = 3;
  op.attrs = {"stride", "padding", "dilation", "groups", "compute"};
  op.infer = infer_conv;
  op.forward = conv_forward;
  op.reference = conv_reference;
  op.save_inputs = {true, true, false};
  op.backward = conv_backward;
  return op;
}

// ---- pooling ----

Expected<Window> pool_window(const std::string& op, const Attrs& a) {
  TESSEL_ASSIGN_OR_RETURN(auto k, pair_attr(op, a, "window", {}, 1));
  TESSEL_ASSIGN_OR_RETURN(Window w, window_of(op, a, k.first, k.second));
  if (w.ph * 2 > w.kh || w.pw * 2 > w.kw)
    return invalid_argument("{}: padding {}x{} is more than half the window {}x{}", op, w.ph, w.pw,
                            w.kh, w.kw);
  return w;
}

OpDef pool_op(const std::string& name, bool is_max) {
  OpDef op;
  op.name = name;
  op.attrs = {"window", "stride", "padding"};
  op.infer = [name](const std::vector<TensorMeta>& in, const Attrs& a) -> Expected<TensorMeta> {
    const Shape& x = in[0].shape;
    if (x.size() != 4 || in[0].dtype != DType::kF32)
      return invalid_argument("{}: needs an f32 input [N, C, H, W], got {}", name,
                              shapes_string(in));
    TESSEL_ASSIGN_OR_RETURN(Window w, pool_window(name, a));
    int64_t oh = w.out_h(x[2]), ow = w.out_w(x[3]);
    if (oh < 1 || ow < 1)
      return invalid_argument("{}: a {}x{} window does not fit input {}", name, w.kh, w.kw,
                              shape_string(x));
    return TensorMeta{{x[0], x[1], oh, ow}, DType::kF32};
  };
  op.forward = [name, is_max](const std::vector<Tensor>& in, const Attrs& a,
                              const TensorMeta& out) -> Expected<Tensor> {
    TESSEL_ASSIGN_OR_RETURN(Window w, pool_window(name, a));
    TESSEL_ASSIGN_OR_RETURN(Tensor x, contiguous_on_device(in[0]));
    TESSEL_ASSIGN_OR_RETURN(Tensor y, empty_like_device(out.shape, out.dtype, x));
    std::vector<KernelArg> args{x, y};
    for (KernelArg& s : window_args(w, false))
      args.push_back(s);
    TESSEL_TRY(launch_kernel("pool2d", {{"MAX", is_max ? "1" : "0"}}, args));
    return y;
  };
  op.reference = [name, is_max](const std::vector<RefTensor>& in, const Attrs& a) {
    Window w = pool_window(name, a).value();
    const Shape& xs = in[0].shape;
    const int64_t h = xs[2], wd = xs[3], oh = w.out_h(h), ow = w.out_w(wd);
    RefTensor out{{xs[0], xs[1], oh, ow}, {}};
    for (int64_t p = 0; p < xs[0] * xs[1]; ++p)
      for (int64_t y = 0; y < oh; ++y)
        for (int64_t x = 0; x < ow; ++x) {
          double acc = is_max ? -INFINITY : 0.0;
          for (int64_t i = 0; i < w.kh; ++i)
            for (int64_t j = 0; j < w.kw; ++j) {
              int64_t iy = y * w.sh - w.ph + i, ix = x * w.sw - w.pw + j;
              bool inside = iy >= 0 && iy < h && ix >= 0 && ix < wd;
              double v = inside ? in[0].values[(p * h + iy) * wd + ix] : (is_max ? -INFINITY : 0.0);
              acc = is_max ? std::max(acc, v) : acc + v;
            }
          out.values.push_back(is_max ? acc : acc / static_cast<double>(w.kh * w.kw));
        }
    return out;
  };
  op.save_inputs = {is_max};
  op.save_output = is_max;
  op.backward = [name, is_max](const BackwardArgs& b) -> Expected<std::vector<Tensor>> {
    TESSEL_ASSIGN_OR_RETURN(Window w, pool_window(name, b.attrs));
    TESSEL_ASSIGN_OR_RETURN(Tensor g, contiguous_on_device(b.grad_output));
    TESSEL_ASSIGN_OR_RETURN(Tensor dx, empty_like_device(b.input_meta[0].shape, DType::kF32, g));
    // Average pooling reads neither X nor Y: dx and g stand in for them.
    Tensor x = dx, y = g;
    if (is_max) {
      TESSEL_ASSIGN_OR_RETURN(x, contiguous_on_device(b.inputs[0]));
      y = b.output;
    }
    std::vector<KernelArg> args{x, y, g, dx};
    for (KernelArg& s : window_args(w, false))
      args.push_back(s);
    TESSEL_TRY(launch_kernel("pool2d_grad", {{"MAX", is_max ? "1" : "0"}}, args));
    return std::vector<Tensor>{dx};
  };
  return op;
}

}  // namespace

void add_conv_ops(std::vector<OpDef>& ops) {
  ops.push_back(conv2d_op());
  ops.push_back(pool_op("max_pool2d", true));
  ops.push_back(pool_op("avg_pool2d", false));
}

Expected<Tensor> conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias,
                        std::vector<int64_t> stride, std::vector<int64_t> padding,
                        std::vector<int64_t> dilation) {
  return run("conv2d", {x, weight, bias},
             Attrs()
                 .set("stride", std::move(stride))
                 .set("padding", std::move(padding))
                 .set("dilation", std::move(dilation)));
}
Expected<Tensor> max_pool2d(const Tensor& x, std::vector<int64_t> window,
                            std::vector<int64_t> stride, std::vector<int64_t> padding) {
  Attrs a = Attrs().set("window", std::move(window)).set("padding", std::move(padding));
  if (!stride.empty()) a.set("stride", std::move(stride));
  return run("max_pool2d", {x}, a);
}
Expected<Tensor> avg_pool2d(const Tensor& x, std::vector<int64_t> window,
                            std::vector<int64_t> stride, std::vector<int64_t> padding) {
  Attrs a = Attrs().set("window", std::move(window)).set("padding", std::move(padding));
  if (!stride.empty()) a.set("stride", std::move(stride));
  return run("avg_pool2d", {x}, a);
}

}  // namespace tessel::ops
