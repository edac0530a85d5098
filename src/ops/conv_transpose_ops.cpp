// conv_transpose2d (torch.nn.functional.conv_transpose2d) and the 1-d convolutions, built on
// conv2d's kernels (ops/conv_ops.cpp) without touching them:
// - conv_transpose2d(x [N, Cin, H, W], weight [Cin, Cout / G, KH, KW], bias [Cout]) is the input
//   gradient of conv2d with that weight (read as [O = Cin, C / G = Cout / G, KH, KW]) taken at x,
//   for an input of the transposed output's size (conv2d's backward rule, run directly); its
//   input gradient is conv2d of the output gradient, its weight gradient conv2d's weight
//   gradient with the roles of input and output gradient swapped, its bias gradient a sum.
//   output_padding adds rows and columns at the end that no input reaches (bias only); where it
//   is not below the stride (allowed up to the dilation) they are added as zeros after the fact.
// - conv1d and conv_transpose1d run their 2-d form over [N, C, 1, L] with window 1 x K (views:
//   exact, same kernels), forward and backward.
#include <array>

#include "ops/kernel_util.h"
#include "ops/ops.h"

namespace tessel::ops {
namespace {

// Per spatial dimension (h, w) of conv_transpose2d.
struct TransposedWindow {
  std::array<int64_t, 2> k{}, s{}, p{}, op{}, d{};
  int64_t groups = 1;
  // The output size without output_padding, and with it.
  int64_t reach(int i, int64_t in) const {
    return (in - 1) * s[i] - 2 * p[i] + d[i] * (k[i] - 1) + 1;
  }
  int64_t out(int i, int64_t in) const { return reach(i, in) + op[i]; }
  // The size conv2d's backward computes: the full one where output_padding < stride (conv2d of
  // that size has the input's size), else the reach.
  int64_t computed(int i, int64_t in) const { return op[i] < s[i] ? out(i, in) : reach(i, in); }
};

Expected<std::array<int64_t, 2>> pair_of(const Attrs& a, const std::string& name,
                                         std::vector<int64_t> fallback, int64_t min) {
  std::vector<int64_t> v = a.get_ints(name, fallback);
  if (v.size() == 1) v.push_back(v[0]);
  if (v.size() != 2 || v[0] < min || v[1] < min)
    return invalid_argument("conv_transpose2d: {} must be one or two integers >= {}, got {}", name,
                            min, shape_string(v));
  return std::array<int64_t, 2>{v[0], v[1]};
}

Expected<TransposedWindow> transposed_window(const Attrs& a, const Shape& weight) {
  TransposedWindow t;
  t.k = {weight[2], weight[3]};
  TESSEL_ASSIGN_OR_RETURN(t.s, pair_of(a, "stride", {1, 1}, 1));
  TESSEL_ASSIGN_OR_RETURN(t.p, pair_of(a, "padding", {0, 0}, 0));
  TESSEL_ASSIGN_OR_RETURN(t.op, pair_of(a, "output_padding", {0, 0}, 0));
  TESSEL_ASSIGN_OR_RETURN(t.d, pair_of(a, "dilation", {1, 1}, 1));
  t.groups = a.get_int("groups", 1);
  for (int i = 0; i < 2; ++i)
    if (t.op[i] >= std::max(t.s[i], t.d[i]))
      return invalid_argument(
          "conv_transpose2d: output padding must be smaller than either stride or dilation, got "
          "output_padding {}, stride {}, dilation {}",
          t.op[i], t.s[i], t.d[i]);
  return t;
}

Expected<TensorMeta> infer_transposed(const std::vector<TensorMeta>& in, const Attrs& a) {
  const Shape &x = in[0].shape, &w = in[1].shape, &b = in[2].shape;
  const int64_t g = a.get_int("groups", 1);
  if (g < 1) return invalid_argument("conv_transpose2d: groups must be >= 1, got {}", g);
  if (x.size() != 4 || w.size() != 4 || x[1] != w[0] || w[0] % g != 0 || b != Shape{w[1] * g})
    return invalid_argument(
        "conv_transpose2d: needs x [N, Cin, H, W], weight [Cin, Cout / groups, KH, KW], bias "
        "[Cout] with Cin a multiple of groups = {}, got {}",
        g, shapes_string(in));
  for (const TensorMeta& m : in)
    if (m.dtype != DType::kF32)
      return invalid_argument("conv_transpose2d: needs f32 tensors, got {}", shapes_string(in));
  TESSEL_ASSIGN_OR_RETURN(TransposedWindow t, transposed_window(a, w));
  const int64_t oh = t.out(0, x[2]), ow = t.out(1, x[3]);
  if (t.reach(0, x[2]) < 1 || t.reach(1, x[3]) < 1)
    return invalid_argument(
        "conv_transpose2d: output size is too small: input {} with a {}x{} window, stride {}x{}, "
        "padding {}x{}, dilation {}x{} gives {}x{}",
        shape_string(x), t.k[0], t.k[1], t.s[0], t.s[1], t.p[0], t.p[1], t.d[0], t.d[1], oh, ow);
  return TensorMeta{{x[0], w[1] * g, oh, ow}, DType::kF32};
}

Attrs conv2d_attrs(const TransposedWindow& t) {
  return Attrs()
      .set("stride", {t.s[0], t.s[1]})
      .set("padding", {t.p[0], t.p[1]})
      .set("dilation", {t.d[0], t.d[1]})
      .set("groups", t.groups);
}

// conv2d's backward rule with `input` standing for its input, `grad` for its output gradient and
// only input `which` (0: the input, 1: the weight) asked for.
Expected<Tensor> conv2d_gradient(const Tensor& input, const Tensor& weight, const Tensor& grad,
                                 const TransposedWindow& t, int which) {
  TESSEL_ASSIGN_OR_RETURN(const OpDef* conv, find_op("conv2d"));
  const Attrs attrs = conv2d_attrs(t);
  const int64_t o = weight.size(0);
  BackwardArgs args{
      {input, weight, Tensor()},
      {},
      {{input.shape(), input.dtype()}, {weight.shape(), weight.dtype()}, {{o}, DType::kF32}},
      attrs,
      grad,
      {which == 0, which == 1, false},
      {}};
  TESSEL_ASSIGN_OR_RETURN(std::vector<Tensor> grads, conv->backward(args));
  return grads[which];
}

// y [N, C, h, w] with zeros added at the end up to [N, C, oh, ow].
Expected<Tensor> pad_end(Tensor y, int64_t oh, int64_t ow) {
  for (int dim : {2, 3}) {
    const int64_t want = dim == 2 ? oh : ow;
    if (y.size(dim) == want) continue;
    Shape zeros_shape = y.shape();
    zeros_shape[dim] = want - y.size(dim);
    TESSEL_ASSIGN_OR_RETURN(Tensor zeros, Tensor::zeros(zeros_shape, DType::kF32, y.device()));
    TESSEL_ASSIGN_OR_RETURN(y, concat(y, zeros, dim));
  }
  return y;
}

Expected<Tensor> transposed_forward(const std::vector<Tensor>& in, const Attrs& a,
                                    const TensorMeta& out) {
  const Tensor &x = in[0], &weight = in[1];
  TESSEL_ASSIGN_OR_RETURN(TransposedWindow t, transposed_window(a, weight.shape()));
  const Shape computed{x.size(0), out.shape[1], t.computed(0, x.size(2)), t.computed(1, x.size(3))};
  // conv2d's backward reads its input's shape and device only: a stride-0 view stands in.
  TESSEL_ASSIGN_OR_RETURN(Tensor zero, Tensor::zeros({1}, DType::kF32, x.device()));
  TESSEL_ASSIGN_OR_RETURN(Tensor stand_in, zero.expand(computed));
  TESSEL_ASSIGN_OR_RETURN(Tensor y, conv2d_gradient(stand_in, weight, x, t, 0));
  TESSEL_ASSIGN_OR_RETURN(y, pad_end(y, out.shape[2], out.shape[3]));
  TESSEL_ASSIGN_OR_RETURN(Tensor b4, reshape(in[2], {1, out.shape[1], 1, 1}));
  return add(y, b4);
}

Expected<std::vector<Tensor>> transposed_backward(const BackwardArgs& b) {
  const Tensor &x = b.inputs[0], &weight = b.inputs[1];
  TESSEL_ASSIGN_OR_RETURN(TransposedWindow t, transposed_window(b.attrs, weight.shape()));
  // The rows and columns output_padding added past conv2d's reach get the bias only.
  Tensor dy = b.grad_output;
  TESSEL_ASSIGN_OR_RETURN(dy, slice(dy, 2, 0, t.computed(0, x.size(2))));
  TESSEL_ASSIGN_OR_RETURN(dy, slice(dy, 3, 0, t.computed(1, x.size(3))));
  std::vector<Tensor> grads(3);
  if (b.needs_grad[0]) {
    TESSEL_ASSIGN_OR_RETURN(Tensor zero_bias, Tensor::zeros({x.size(1)}, DType::kF32, x.device()));
    TESSEL_ASSIGN_OR_RETURN(grads[0], run("conv2d", {dy, weight, zero_bias}, conv2d_attrs(t)));
  }
  if (b.needs_grad[1]) {
    TESSEL_ASSIGN_OR_RETURN(grads[1], conv2d_gradient(dy, weight, x, t, 1));
  }
  if (b.needs_grad[2]) {
    TESSEL_ASSIGN_OR_RETURN(grads[2], sum(b.grad_output, {0, 2, 3}));
  }
  return grads;
}

RefTensor transposed_reference(const std::vector<RefTensor>& in, const Attrs& a) {
  const Shape &xs = in[0].shape, &ws = in[1].shape;
  TransposedWindow t = transposed_window(a, ws).value();
  const int64_t n = xs[0], cin = xs[1], h = xs[2], w = xs[3], cog = ws[1];
  const int64_t cout = cog * t.groups, cig = cin / t.groups, oh = t.out(0, h), ow = t.out(1, w);
  RefTensor out{{n, cout, oh, ow}, std::vector<double>(n * cout * oh * ow)};
  for (int64_t b = 0; b < n; ++b)
    for (int64_t co = 0; co < cout; ++co)
      for (int64_t y = 0; y < oh; ++y)
        for (int64_t x = 0; x < ow; ++x)
          out.values[((b * cout + co) * oh + y) * ow + x] = in[2].values[co];
  for (int64_t b = 0; b < n; ++b)
    for (int64_t ci = 0; ci < cin; ++ci)
      for (int64_t iy = 0; iy < h; ++iy)
        for (int64_t ix = 0; ix < w; ++ix)
          for (int64_t c = 0; c < cog; ++c)
            for (int64_t i = 0; i < t.k[0]; ++i)
              for (int64_t j = 0; j < t.k[1]; ++j) {
                const int64_t y = iy * t.s[0] - t.p[0] + i * t.d[0];
                const int64_t x = ix * t.s[1] - t.p[1] + j * t.d[1];
                if (y < 0 || y >= oh || x < 0 || x >= ow) continue;
                const int64_t co = ci / cig * cog + c;
                out.values[((b * cout + co) * oh + y) * ow + x] +=
                    in[0].values[((b * cin + ci) * h + iy) * w + ix] *
                    in[1].values[((ci * cog + c) * t.k[0] + i) * t.k[1] + j];
              }
  return out;
}

OpDef conv_transpose2d_op() {
  OpDef op;
  op.name = "conv_transpose2d";
  op.arity = 3;
  op.attrs = {"stride", "padding", "output_padding", "dilation", "groups"};
  op.infer = infer_transposed;
  op.forward = transposed_forward;
  op.reference = transposed_reference;
  op.save_inputs = {true, true, false};
  op.backward = transposed_backward;
  return op;
}

// ---- 1-d forms over [N, C, 1, L] ----

// x, weight and bias with a unit height inserted (bias unchanged).
Shape with_unit_height(const Shape& s) {
  if (s.size() != 3) return s;
  return {s[0], s[1], 1, s[2]};
}

Attrs two_d_attrs(const Attrs& a) {
  Attrs out;
  for (const auto& [name, value] : a.values()) {
    if (const auto* v = std::get_if<std::vector<int64_t>>(&value)) {
      const int64_t unit = name == "padding" || name == "output_padding" ? 0 : 1;
      out.set(name, v->size() == 1 ? std::vector<int64_t>{unit, (*v)[0]} : *v);
    } else if (const auto* i = std::get_if<int64_t>(&value)) {
      const bool pair = name == "stride" || name == "padding" || name == "output_padding" ||
                        name == "dilation";  // set("stride", {3}) stores one integer
      if (pair)
        out.set(name, std::vector<int64_t>{name == "stride" || name == "dilation" ? 1 : 0, *i});
      else
        out.set(name, *i);
    }
  }
  return out;
}

// (The registry is being built: find_op only runs when the op does.)
OpDef one_d_op(const std::string& name, const std::string& two_d, std::vector<std::string> attrs) {
  OpDef op;
  op.name = name;
  op.arity = 3;
  op.attrs = std::move(attrs);
  op.infer = [name, two_d](const std::vector<TensorMeta>& in,
                           const Attrs& a) -> Expected<TensorMeta> {
    if (in[0].shape.size() != 3 || in[1].shape.size() != 3)
      return invalid_argument("{}: needs x [N, C, L] and weight [*, *, K], got {}", name,
                              shapes_string(in));
    for (const auto& [attr, value] : a.values())
      if (const auto* v = std::get_if<std::vector<int64_t>>(&value); v && v->size() != 1)
        return invalid_argument("{}: {} must be one integer, got {}", name, attr, shape_string(*v));
    std::vector<TensorMeta> m = in;
    for (int i = 0; i < 2; ++i)
      m[i].shape = with_unit_height(m[i].shape);
    TESSEL_ASSIGN_OR_RETURN(TensorMeta out, infer(*find_op(two_d).value(), m, two_d_attrs(a)));
    return TensorMeta{{out.shape[0], out.shape[1], out.shape[3]}, out.dtype};
  };
  op.forward = [name, two_d](const std::vector<Tensor>& in, const Attrs& a,
                             const TensorMeta&) -> Expected<Tensor> {
    TESSEL_ASSIGN_OR_RETURN(Tensor x, reshape(in[0], with_unit_height(in[0].shape())));
    TESSEL_ASSIGN_OR_RETURN(Tensor w, reshape(in[1], with_unit_height(in[1].shape())));
    TESSEL_ASSIGN_OR_RETURN(Tensor y, run(two_d, {x, w, in[2]}, two_d_attrs(a)));
    return reshape(y, {y.size(0), y.size(1), y.size(3)});
  };
  op.reference = [name, two_d](const std::vector<RefTensor>& in, const Attrs& a) {
    std::vector<RefTensor> r = in;
    for (int i = 0; i < 2; ++i)
      r[i].shape = with_unit_height(r[i].shape);
    RefTensor y = find_op(two_d).value()->reference(r, two_d_attrs(a));
    y.shape = {y.shape[0], y.shape[1], y.shape[3]};
    return y;
  };
  op.save_inputs = {true, true, false};
  op.backward = [name, two_d](const BackwardArgs& b) -> Expected<std::vector<Tensor>> {
    const Attrs attrs = two_d_attrs(b.attrs);
    BackwardArgs args{{}, {}, b.input_meta, attrs, Tensor(), b.needs_grad, {}};
    for (size_t i = 0; i < 3; ++i) {
      Tensor t = b.inputs[i];
      if (t.defined() && i < 2) {
        TESSEL_ASSIGN_OR_RETURN(t, reshape(t, with_unit_height(t.shape())));
      }
      args.inputs.push_back(t);
      if (i < 2) args.input_meta[i].shape = with_unit_height(args.input_meta[i].shape);
    }
    TESSEL_ASSIGN_OR_RETURN(args.grad_output,
                            reshape(b.grad_output, with_unit_height(b.grad_output.shape())));
    TESSEL_ASSIGN_OR_RETURN(std::vector<Tensor> grads, find_op(two_d).value()->backward(args));
    for (size_t i = 0; i < 2; ++i)
      if (grads[i].defined()) {
        TESSEL_ASSIGN_OR_RETURN(grads[i], reshape(grads[i], b.input_meta[i].shape));
      }
    return grads;
  };
  return op;
}

}  // namespace

void add_conv_transpose_ops(std::vector<OpDef>& ops) {
  ops.push_back(conv_transpose2d_op());
}

// After add_conv_ops and add_conv_transpose_ops: they wrap conv2d and conv_transpose2d.
void add_conv1d_ops(std::vector<OpDef>& ops) {
  ops.push_back(
      one_d_op("conv1d", "conv2d", {"stride", "padding", "dilation", "groups", "compute"}));
  ops.push_back(one_d_op("conv_transpose1d", "conv_transpose2d",
                         {"stride", "padding", "output_padding", "dilation", "groups"}));
}

Expected<Tensor> conv_transpose2d(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                  std::vector<int64_t> stride, std::vector<int64_t> padding,
                                  std::vector<int64_t> output_padding,
                                  std::vector<int64_t> dilation, int64_t groups) {
  return run("conv_transpose2d", {x, weight, bias},
             conv_transpose_attrs(std::move(stride), std::move(padding), std::move(output_padding),
                                  std::move(dilation), groups));
}

Attrs conv_transpose_attrs(std::vector<int64_t> stride, std::vector<int64_t> padding,
                           std::vector<int64_t> output_padding, std::vector<int64_t> dilation,
                           int64_t groups) {
  return conv_attrs(std::move(stride), std::move(padding), std::move(dilation), groups)
      .set("output_padding", std::move(output_padding));
}

Expected<Tensor> conv1d(const Tensor& x, const Tensor& weight, const Tensor& bias, int64_t stride,
                        int64_t padding, int64_t dilation, int64_t groups) {
  return run("conv1d", {x, weight, bias}, conv_attrs({stride}, {padding}, {dilation}, groups));
}

Expected<Tensor> conv_transpose1d(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                  int64_t stride, int64_t padding, int64_t output_padding,
                                  int64_t dilation, int64_t groups) {
  return run("conv_transpose1d", {x, weight, bias},
             conv_transpose_attrs({stride}, {padding}, {output_padding}, {dilation}, groups));
}

}  // namespace tessel::ops
