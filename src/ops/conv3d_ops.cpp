// conv3d (torch.nn.functional.conv3d: stride, padding, dilation, groups) as one conv2d. A 3-d
// window is KD 2-d windows at depths od sd + kd dd of the depth-padded input, so with
//   X'[n OD + od, (g, kd, c), h, w] = x_padded[n, g C/G + c, od sd + kd dd, h, w]
//   W'[o, (kd, c), i, j]            = w[o, c, kd, i, j]
// (channels of a group kept together, so conv2d's groups still split X' and W' alike)
// y[n, o, od] = conv2d(X', W')[n OD + od, o] with conv2d's height and width options. Forward
// gathers X' (KD strided copies of x: the depth window's reach in memory), runs conv2d and
// moves OD back behind O; backward runs conv2d's own backward rule on (X', W', dY') and
// scatters dX' back, adding the KD depth taps that overlap. So conv3d uses conv2d's kernels
// (implicit gemm on the CPU, im2col + gemm elsewhere) on every device.
#include <cmath>

#include "ops/kernel_util.h"
#include "ops/ops.h"
#include "ops/reference_util.h"

namespace tessel::ops {
namespace {

const char* const kName = "conv3d";

struct Conv3dShape {
  int64_t n = 0, c = 0, d = 0, h = 0, w = 0;  // input
  int64_t o = 0, kd = 0, kh = 0, kw = 0, groups = 1;
  int64_t sd = 1, pd = 0, dd = 1;  // depth's stride, padding, dilation
  int64_t od = 0;                  // output depth
  int64_t padded_d() const { return d + 2 * pd; }
};

// "stride" / "padding" / "dilation": three values (depth, height, width) or one for all.
Expected<std::vector<int64_t>> triple(const Attrs& a, const char* name, int64_t fallback) {
  std::vector<int64_t> v = a.get_ints(name, {fallback});
  if (v.size() == 1) v = {v[0], v[0], v[0]};
  if (v.size() != 3)
    return invalid_argument("{}: {} needs 1 or 3 values, got {}", kName, name, shape_string(v));
  return v;
}

// conv2d's attributes: the height and width entries, groups and compute.
Expected<Attrs> two_d_attrs(const Attrs& a) {
  Attrs out;
  for (const char* name : {"stride", "padding", "dilation"}) {
    TESSEL_ASSIGN_OR_RETURN(std::vector<int64_t> v,
                            triple(a, name, std::string(name) == "padding" ? 0 : 1));
    out.set(name, std::vector<int64_t>{v[1], v[2]});
  }
  out.set("groups", a.get_int("groups", 1));
  if (a.has("compute")) out.set("compute", a.get_int("compute", 0));
  return out;
}

Expected<Conv3dShape> conv3d_shape(const std::vector<TensorMeta>& in, const Attrs& a) {
  const Shape &x = in[0].shape, &w = in[1].shape;
  const int64_t g = a.get_int("groups", 1);
  if (g < 1) return invalid_argument("{}: groups must be >= 1, got {}", kName, g);
  if (x.size() != 5 || w.size() != 5 || in[2].shape != Shape{w[0]} || x[1] != w[1] * g ||
      w[0] % g != 0)
    return invalid_argument(
        "{}: needs x [N, C, D, H, W], weight [O, C / groups, KD, KH, KW], bias [O] with C and O "
        "multiples of groups = {}, got {}",
        kName, g, shapes_string(in));
  TESSEL_ASSIGN_OR_RETURN(std::vector<int64_t> stride, triple(a, "stride", 1));
  TESSEL_ASSIGN_OR_RETURN(std::vector<int64_t> padding, triple(a, "padding", 0));
  TESSEL_ASSIGN_OR_RETURN(std::vector<int64_t> dilation, triple(a, "dilation", 1));
  for (int i = 0; i < 3; ++i)
    if (stride[i] < 1 || dilation[i] < 1 || padding[i] < 0)
      return invalid_argument(
          "{}: needs strides and dilations >= 1 and paddings >= 0, got {}, {}, {}", kName,
          shape_string(stride), shape_string(padding), shape_string(dilation));
  Conv3dShape s{x[0], x[1], x[2], x[3],      x[4],       w[0],       w[2],
                w[3], w[4], g,    stride[0], padding[0], dilation[0]};
  // PyTorch's check and words: every padded extent must hold the dilated window.
  const int64_t sizes[3] = {s.d, s.h, s.w}, kernel[3] = {s.kd, s.kh, s.kw};
  bool fits = true;
  for (int i = 0; i < 3; ++i)
    fits = fits && sizes[i] + 2 * padding[i] >= dilation[i] * (kernel[i] - 1) + 1;
  if (!fits)
    return invalid_argument(
        "{}: Calculated padded input size per channel: ({} x {} x {}). Kernel size: ({} x {} x "
        "{}). Kernel size can't be greater than actual input size",
        kName, s.d + 2 * padding[0], s.h + 2 * padding[1], s.w + 2 * padding[2],
        dilation[0] * (s.kd - 1) + 1, dilation[1] * (s.kh - 1) + 1, dilation[2] * (s.kw - 1) + 1);
  s.od = (s.padded_d() - s.dd * (s.kd - 1) - 1) / s.sd + 1;
  return s;
}

// dst = src element by element (same shape, any strides; dst may be a view into a larger
// tensor), on their device.
Status copy_into(const Tensor& src, const Tensor& dst) {
  if (src.numel() == 0) return ok_status();
  auto views = merged_views({src, dst}, 8);
  if (!views)
    return internal_error("{}: a copy of shape {} needs more than 8 dimensions", kName,
                          shape_string(src.shape()));
  return launch_kernel("copy8", {}, {(*views)[0], (*views)[1]});
}

// x [N, C, D, H, W] padded with pd zero planes on both sides of the depth axis.
Expected<Tensor> depth_padded(const Tensor& x, const Conv3dShape& s) {
  if (s.pd == 0) return x;
  TESSEL_ASSIGN_OR_RETURN(Tensor p,
                          Tensor::zeros({s.n, s.c, s.padded_d(), s.h, s.w}, x.dtype(), x.device()));
  TESSEL_ASSIGN_OR_RETURN(Tensor inside, p.slice(2, s.pd, s.pd + s.d));
  TESSEL_TRY(copy_into(x, inside));
  return p;
}

// The depths of x_padded that tap kd reads, as [N, G, C/G, OD, H, W] (a strided view).
Expected<Tensor> tap(const Tensor& padded, int64_t kd, const Conv3dShape& s) {
  const int64_t start = kd * s.dd;
  TESSEL_ASSIGN_OR_RETURN(Tensor t, padded.slice(2, start, start + (s.od - 1) * s.sd + 1, s.sd));
  return t.reshape({s.n, s.groups, s.c / s.groups, s.od, s.h, s.w});
}

// Tap kd of X' [N, OD, G, KD, C/G, H, W] as [N, G, C/G, OD, H, W] (a view).
Expected<Tensor> columns_tap(const Tensor& columns, int64_t kd) {
  TESSEL_ASSIGN_OR_RETURN(Tensor t, columns.select(3, kd));  // [N, OD, G, C/G, H, W]
  return t.permute({0, 2, 3, 1, 4, 5});
}

// X' as [N OD, G KD C/G, H, W].
Expected<Tensor> gather_columns(const Tensor& x, const Conv3dShape& s) {
  TESSEL_ASSIGN_OR_RETURN(Tensor padded, depth_padded(x, s));
  const int64_t cg = s.c / s.groups;
  TESSEL_ASSIGN_OR_RETURN(
      Tensor columns, empty_like_device({s.n, s.od, s.groups, s.kd, cg, s.h, s.w}, x.dtype(), x));
  for (int64_t kd = 0; kd < s.kd; ++kd) {
    TESSEL_ASSIGN_OR_RETURN(Tensor from, tap(padded, kd, s));
    TESSEL_ASSIGN_OR_RETURN(Tensor to, columns_tap(columns, kd));
    TESSEL_TRY(copy_into(from, to));
  }
  return columns.reshape({s.n * s.od, s.groups * s.kd * cg, s.h, s.w});
}

// W' [O, KD C/G, KH, KW] from w [O, C/G, KD, KH, KW], and back.
Expected<Tensor> flat_weight(const Tensor& w, const Conv3dShape& s) {
  TESSEL_ASSIGN_OR_RETURN(Tensor p, w.permute({0, 2, 1, 3, 4}));
  TESSEL_ASSIGN_OR_RETURN(Tensor c, contiguous_on_device(p));
  return c.reshape({s.o, s.kd * (s.c / s.groups), s.kh, s.kw});
}

Expected<Tensor> unflat_weight(const Tensor& w2, const Conv3dShape& s) {
  TESSEL_ASSIGN_OR_RETURN(Tensor r, w2.reshape({s.o, s.kd, s.c / s.groups, s.kh, s.kw}));
  TESSEL_ASSIGN_OR_RETURN(Tensor p, r.permute({0, 2, 1, 3, 4}));
  return contiguous_on_device(p);
}

// [N OD, O, OH, OW] <-> [N, O, OD, OH, OW].
Expected<Tensor> depth_last_to_output(const Tensor& y2, const Conv3dShape& s) {
  TESSEL_ASSIGN_OR_RETURN(Tensor r, y2.reshape({s.n, s.od, s.o, y2.size(2), y2.size(3)}));
  TESSEL_ASSIGN_OR_RETURN(Tensor p, r.permute({0, 2, 1, 3, 4}));
  return contiguous_on_device(p);
}

Expected<Tensor> output_to_depth_last(const Tensor& y, const Conv3dShape& s) {
  TESSEL_ASSIGN_OR_RETURN(Tensor p, y.permute({0, 2, 1, 3, 4}));
  TESSEL_ASSIGN_OR_RETURN(Tensor c, contiguous_on_device(p));
  return c.reshape({s.n * s.od, s.o, y.size(3), y.size(4)});
}

// dx from dX' [N OD, G KD C/G, H, W]: each tap's columns added back at its depths (in dX''s
// dtype, which conv2d makes x's).
Expected<Tensor> scatter_columns(const Tensor& dcols, const Conv3dShape& s) {
  const int64_t cg = s.c / s.groups;
  TESSEL_ASSIGN_OR_RETURN(Tensor columns, dcols.reshape({s.n, s.od, s.groups, s.kd, cg, s.h, s.w}));
  TESSEL_ASSIGN_OR_RETURN(Tensor dpadded, Tensor::zeros({s.n, s.c, s.padded_d(), s.h, s.w},
                                                        dcols.dtype(), dcols.device()));
  for (int64_t kd = 0; kd < s.kd; ++kd) {
    TESSEL_ASSIGN_OR_RETURN(Tensor from, columns_tap(columns, kd));
    TESSEL_ASSIGN_OR_RETURN(Tensor to, tap(dpadded, kd, s));
    // to += from in place: element i reads to[i] and from[i] and writes to[i] only. `to` merges
    // to [N C, OD, H W], so the kernel's three dimensions hold it (the inputs are copied
    // contiguous where they do not merge).
    TESSEL_TRY(launch_elementwise("binary", {{"OP", "0"}}, {to, from, to}, {}));
  }
  TESSEL_ASSIGN_OR_RETURN(Tensor inside, dpadded.slice(2, s.pd, s.pd + s.d));
  return contiguous_on_device(inside);
}

RefTensor conv3d_reference(const std::vector<RefTensor>& in, const Attrs& a) {
  std::vector<TensorMeta> meta;
  for (const RefTensor& t : in)
    meta.push_back({t.shape, DType::kF32});
  const Conv3dShape s = conv3d_shape(meta, a).value();
  const std::vector<int64_t> st = triple(a, "stride", 1).value(),
                             pad = triple(a, "padding", 0).value(),
                             dil = triple(a, "dilation", 1).value();
  const int64_t oh = (s.h + 2 * pad[1] - dil[1] * (s.kh - 1) - 1) / st[1] + 1;
  const int64_t ow = (s.w + 2 * pad[2] - dil[2] * (s.kw - 1) - 1) / st[2] + 1;
  const int64_t cg = s.c / s.groups, og = s.o / s.groups;
  RefTensor out{{s.n, s.o, s.od, oh, ow}, {}};
  for (int64_t n = 0; n < s.n; ++n)
    for (int64_t o = 0; o < s.o; ++o)
      for (int64_t z = 0; z < s.od; ++z)
        for (int64_t y = 0; y < oh; ++y)
          for (int64_t x = 0; x < ow; ++x) {
            double acc = in[2].values[o];
            for (int64_t c = 0; c < cg; ++c)
              for (int64_t i = 0; i < s.kd; ++i)
                for (int64_t j = 0; j < s.kh; ++j)
                  for (int64_t k = 0; k < s.kw; ++k) {
                    const int64_t d = z * st[0] - pad[0] + i * dil[0];
                    const int64_t h = y * st[1] - pad[1] + j * dil[1];
                    const int64_t w = x * st[2] - pad[2] + k * dil[2];
                    if (d < 0 || d >= s.d || h < 0 || h >= s.h || w < 0 || w >= s.w) continue;
                    const int64_t ci = (o / og) * cg + c;
                    acc += in[0].values[(((n * s.c + ci) * s.d + d) * s.h + h) * s.w + w] *
                           in[1].values[(((o * cg + c) * s.kd + i) * s.kh + j) * s.kw + k];
                  }
            out.values.push_back(acc);
          }
  return out;
}

OpDef conv3d_op() {
  OpDef op;
  op.name = kName;
  op.arity = 3;
  op.attrs = {"stride", "padding", "dilation", "groups", "compute"};
  op.infer = [](const std::vector<TensorMeta>& in, const Attrs& a) -> Expected<TensorMeta> {
    TESSEL_ASSIGN_OR_RETURN(Conv3dShape s, conv3d_shape(in, a));
    TESSEL_ASSIGN_OR_RETURN(Attrs a2, two_d_attrs(a));
    const int64_t cols = s.groups * s.kd * (s.c / s.groups);
    std::vector<TensorMeta> m = {{{s.n * s.od, cols, s.h, s.w}, in[0].dtype},
                                 {{s.o, cols / s.groups, s.kh, s.kw}, in[1].dtype},
                                 in[2]};
    TESSEL_ASSIGN_OR_RETURN(TensorMeta out, infer(*find_op("conv2d").value(), m, a2));
    return TensorMeta{{s.n, s.o, s.od, out.shape[2], out.shape[3]}, out.dtype};
  };
  op.forward = [](const std::vector<Tensor>& in, const Attrs& a,
                  const TensorMeta&) -> Expected<Tensor> {
    TESSEL_ASSIGN_OR_RETURN(Conv3dShape s, conv3d_shape({{in[0].shape(), in[0].dtype()},
                                                         {in[1].shape(), in[1].dtype()},
                                                         {in[2].shape(), in[2].dtype()}},
                                                        a));
    TESSEL_ASSIGN_OR_RETURN(Tensor x2, gather_columns(in[0], s));
    TESSEL_ASSIGN_OR_RETURN(Tensor w2, flat_weight(in[1], s));
    TESSEL_ASSIGN_OR_RETURN(Attrs a2, two_d_attrs(a));
    TESSEL_ASSIGN_OR_RETURN(Tensor y2, run("conv2d", {x2, w2, in[2]}, a2));
    return depth_last_to_output(y2, s);
  };
  op.reference = conv3d_reference;
  op.save_inputs = {true, true, false};
  op.backward = [](const BackwardArgs& b) -> Expected<std::vector<Tensor>> {
    TESSEL_ASSIGN_OR_RETURN(Conv3dShape s, conv3d_shape(b.input_meta, b.attrs));
    TESSEL_ASSIGN_OR_RETURN(Attrs a2, two_d_attrs(b.attrs));
    TESSEL_ASSIGN_OR_RETURN(Tensor x2, gather_columns(b.inputs[0], s));
    TESSEL_ASSIGN_OR_RETURN(Tensor w2, flat_weight(b.inputs[1], s));
    TESSEL_ASSIGN_OR_RETURN(Tensor dy2, output_to_depth_last(b.grad_output, s));
    BackwardArgs args{{x2, w2, Tensor()},
                      {},
                      {{x2.shape(), x2.dtype()}, {w2.shape(), w2.dtype()}, b.input_meta[2]},
                      a2,
                      dy2,
                      b.needs_grad,
                      {}};
    TESSEL_ASSIGN_OR_RETURN(std::vector<Tensor> g2, find_op("conv2d").value()->backward(args));
    std::vector<Tensor> grads(3);
    if (b.needs_grad[0]) {
      TESSEL_ASSIGN_OR_RETURN(grads[0], scatter_columns(g2[0], s));
    }
    if (b.needs_grad[1]) {
      TESSEL_ASSIGN_OR_RETURN(grads[1], unflat_weight(g2[1], s));
    }
    grads[2] = g2[2];
    return grads;
  };
  return op;
}

}  // namespace

void add_conv3d_ops(std::vector<OpDef>& ops) {
  ops.push_back(conv3d_op());
}

Expected<Tensor> conv3d(const Tensor& x, const Tensor& weight, const Tensor& bias,
                        std::vector<int64_t> stride, std::vector<int64_t> padding,
                        std::vector<int64_t> dilation, int64_t groups) {
  return run(kName, {x, weight, bias},
             conv_attrs(std::move(stride), std::move(padding), std::move(dilation), groups));
}

}  // namespace tessel::ops
