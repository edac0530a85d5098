// Max and average pooling over 1, 2 or 3 spatial dimensions (kernels/pool.tile), as PyTorch's
// max_pool{1,2,3}d / avg_pool{1,2,3}d with ONNX's asymmetric pads: x [N, C, *spatial] runs as the
// planes [N C, D, H, W] (missing leading spatial dimensions of size 1, window 1), so one kernel
// per direction serves every rank. Options: stride (default the window), padding (symmetric, at
// most half the window as PyTorch checks) or pads (ONNX: the begins, then the ends, any size),
// dilation (max), ceil_mode (PyTorch's rule: a last window must start inside the input or the
// padding before it), count_include_pad and divisor_override (average). Max pooling propagates
// NaN and picks PyTorch's element (the first maximum, the last NaN); max_pool*d_indices gives its
// flat index in the plane (torch's max_pool2d_with_indices). A window that covers only padding
// (possible with dilation, or ONNX pads) gives -inf as in PyTorch, and index -1 (PyTorch's points
// outside the plane) to which no gradient goes. Max pooling's backward recomputes
// the indices from x (cheaper than keeping them from forward to backward) and each input element
// gathers dY from the windows that chose it; average pooling's gathers dY / the divisor.
#include <algorithm>
#include <array>
#include <cmath>

#include "ops/kernel_util.h"
#include "ops/ops.h"

namespace tessel::ops {
namespace {

enum class PoolKind { kMax, kAvg, kMaxIndices };

// A pooling window over (depth, height, width); 1- and 2-d windows are 1 in the leading ones.
struct PoolGeometry {
  std::array<int64_t, 3> k{1, 1, 1}, s{1, 1, 1}, begin{0, 0, 0}, end{0, 0, 0}, dil{1, 1, 1};
  bool ceil_mode = false;
  int64_t mode = 0;  // average: 0 count_include_pad, 1 not, 2 divisor_override
  int64_t divisor = 1;

  // PyTorch's pooling_output_shape, with the padding before and after the input apart.
  int64_t out(int d, int64_t in) const {
    int64_t span = in + begin[d] + end[d] - dil[d] * (k[d] - 1) - 1 + (ceil_mode ? s[d] - 1 : 0);
    int64_t o = (span >= 0 ? span / s[d] : -((-span + s[d] - 1) / s[d])) + 1;
    if (ceil_mode && o > 0 && (o - 1) * s[d] >= in + begin[d]) --o;
    return o;
  }
};

// One to `dims` integers (one repeats) >= min, placed at the end of a (d, h, w) triple.
Status place(const std::string& op, const std::string& name, std::vector<int64_t> v, int dims,
             int64_t min, std::array<int64_t, 3>& to) {
  if (v.size() == 1) v.assign(dims, v[0]);
  bool ok = static_cast<int>(v.size()) == dims;
  for (int64_t x : v)
    ok = ok && x >= min;
  if (!ok)
    return invalid_argument("{}: {} must be 1 or {} integers >= {}, got {}", op, name, dims, min,
                            shape_string(v));
  for (int i = 0; i < dims; ++i)
    to[3 - dims + i] = v[i];
  return ok_status();
}

Expected<PoolGeometry> pool_geometry(const std::string& op, int dims, PoolKind kind,
                                     const Attrs& a) {
  PoolGeometry g;
  TESSEL_TRY(place(op, "window", a.get_ints("window"), dims, 1, g.k));
  std::vector<int64_t> stride = a.get_ints("stride");
  if (stride.empty()) {
    g.s = g.k;
  } else {
    TESSEL_TRY(place(op, "stride", stride, dims, 1, g.s));
  }
  TESSEL_TRY(place(op, "dilation", a.get_ints("dilation", {1}), dims, 1, g.dil));
  std::vector<int64_t> pads = a.get_ints("pads");
  if (!pads.empty()) {
    if (a.has("padding"))
      return invalid_argument("{}: takes padding (symmetric) or pads (ONNX), not both", op);
    if (static_cast<int>(pads.size()) != 2 * dims)
      return invalid_argument("{}: pads must be {} integers (begins, then ends), got {}", op,
                              2 * dims, shape_string(pads));
    TESSEL_TRY(place(op, "pads", {pads.begin(), pads.begin() + dims}, dims, 0, g.begin));
    TESSEL_TRY(place(op, "pads", {pads.begin() + dims, pads.end()}, dims, 0, g.end));
  } else {
    TESSEL_TRY(place(op, "padding", a.get_ints("padding", {0}), dims, 0, g.begin));
    g.end = g.begin;
    for (int d = 0; d < 3; ++d)
      if (g.begin[d] * 2 > g.k[d])
        return invalid_argument(
            "{}: padding {} is more than half the window {} (PyTorch's limit; ONNX pads take "
            "more)",
            op, g.begin[d], g.k[d]);
  }
  g.ceil_mode = a.get_int("ceil_mode", 0) != 0;
  if (kind == PoolKind::kAvg) {
    g.mode = a.get_int("count_include_pad", 1) != 0 ? 0 : 1;
    if (a.has("divisor_override")) {
      g.mode = 2;
      g.divisor = a.get_int("divisor_override", 1);
      if (g.divisor == 0) return invalid_argument("{}: divisor_override must not be 0", op);
    }
  } else if (a.has("count_include_pad") || a.has("divisor_override")) {
    return invalid_argument("{}: count_include_pad and divisor_override are average pooling's", op);
  }
  return g;
}

Expected<TensorMeta> infer_pool(const std::string& op, int dims, PoolKind kind,
                                const std::vector<TensorMeta>& in, const Attrs& a) {
  const Shape& x = in[0].shape;
  if (static_cast<int>(x.size()) != dims + 2 || in[0].dtype != DType::kF32)
    return invalid_argument("{}: needs an f32 input [N, C, {} spatial], got {}", op, dims,
                            shapes_string(in));
  TESSEL_ASSIGN_OR_RETURN(PoolGeometry g, pool_geometry(op, dims, kind, a));
  Shape out{x[0], x[1]};
  for (int i = 0; i < dims; ++i) {
    const int d = 3 - dims + i;
    const int64_t size = x[2 + i], o = g.out(d, size);
    if (o < 1)
      return invalid_argument(
          "{}: output size is too small: a window of {} (dilation {}) does not fit input {} "
          "with padding {} + {} (spatial dimension {})",
          op, g.k[d], g.dil[d], shape_string(x), g.begin[d], g.end[d], i);
    out.push_back(o);
  }
  return TensorMeta{out, kind == PoolKind::kMaxIndices ? DType::kI64 : DType::kF32};
}

// x [N, C, *spatial] as the planes [N C, D, H, W] (copied when N and C do not merge).
Expected<View> pool_planes(const Tensor& x) {
  Tensor t = x;
  if (t.size(0) > 1 && t.strides()[0] != t.size(1) * t.strides()[1]) {
    TESSEL_ASSIGN_OR_RETURN(t, contiguous_on_device(t));
  }
  const int dims = static_cast<int>(t.rank()) - 2;
  View v{t, {t.size(0) * t.size(1), 1, 1, 1}, {t.strides()[1], 0, 0, 0}};
  for (int i = 0; i < dims; ++i) {
    v.shape[4 - dims + i] = t.size(2 + i);
    v.strides[4 - dims + i] = t.strides()[2 + i];
  }
  return v;
}

// The strides are the kernels' compile-time SD, SH, SW (a constant stride turns the gradients'
// divisions into shifts), the other sizes their scalars.
KernelParams stride_params(const PoolGeometry& g, KernelParams params) {
  params["SD"] = std::to_string(g.s[0]);
  params["SH"] = std::to_string(g.s[1]);
  params["SW"] = std::to_string(g.s[2]);
  return params;
}

// max_pool's scalars (with the strides) or max_pool_grad's (without: they are its SD, SH, SW).
std::vector<KernelArg> max_args(const PoolGeometry& g, bool strides) {
  std::vector<KernelArg> args;
  for (const auto* v : {&g.k, &g.s, &g.begin, &g.dil})
    if (strides || v != &g.s)
      for (int64_t x : *v)
        args.push_back(x);
  return args;
}

// avg_pool's scalars; `planes` is the input as planes (its sizes end the padded extents).
std::vector<KernelArg> avg_args(const PoolGeometry& g, const View& planes) {
  std::vector<KernelArg> args;
  for (const auto* v : {&g.k, &g.begin})
    for (int64_t x : *v)
      args.push_back(x);
  for (int d = 0; d < 3; ++d)
    args.push_back(planes.shape[1 + d] + g.end[d]);
  args.push_back(g.mode);
  args.push_back(g.divisor);
  return args;
}

// max_pool over x into y (planes of the output's shape) and, when `indices` is defined, its
// indices.
Status launch_max_pool(const View& x, const Tensor& y, const Tensor& indices,
                       const PoolGeometry& g) {
  TESSEL_ASSIGN_OR_RETURN(View yp, pool_planes(y));
  View ip{indices, yp.shape, {0, 0, 0, 0}};
  if (indices.defined()) {
    TESSEL_ASSIGN_OR_RETURN(ip, pool_planes(indices));
  } else {  // INDEX = 0 never writes I: a stride-0 view of one element stands in for it
    TESSEL_ASSIGN_OR_RETURN(Tensor dummy, empty_like_device({1}, DType::kI64, y));
    ip.tensor = dummy;
  }
  std::vector<KernelArg> args{x, yp, ip};
  for (KernelArg& s : max_args(g, /*strides=*/true))
    args.push_back(s);
  return launch_kernel("max_pool", {{"INDEX", indices.defined() ? "1" : "0"}}, args);
}

// The plain-C++ pooling of the planes in[0] ([P, D, H, W] row-major): values or indices.
RefTensor pool_reference(const RefTensor& x, const Shape& out_shape, int dims, PoolKind kind,
                         const PoolGeometry& g) {
  std::array<int64_t, 3> in{1, 1, 1}, on{1, 1, 1};
  for (int i = 0; i < dims; ++i) {
    in[3 - dims + i] = x.shape[2 + i];
    on[3 - dims + i] = out_shape[2 + i];
  }
  const int64_t planes = x.shape[0] * x.shape[1];
  RefTensor out{out_shape, {}};
  for (int64_t p = 0; p < planes; ++p)
    for (int64_t o0 = 0; o0 < on[0]; ++o0)
      for (int64_t o1 = 0; o1 < on[1]; ++o1)
        for (int64_t o2 = 0; o2 < on[2]; ++o2) {
          const std::array<int64_t, 3> o{o0, o1, o2};
          double best = -INFINITY, sum = 0;
          int64_t arg = -1, count = 1, size = 1;
          for (int d = 0; d < 3; ++d) {
            int64_t lo = o[d] * g.s[d] - g.begin[d];
            int64_t hi = std::min(lo + g.k[d], in[d] + g.end[d]);
            size *= hi - lo;
            count *= std::max<int64_t>(0, std::min(hi, in[d]) - std::max<int64_t>(lo, 0));
          }
          for (int64_t a = 0; a < g.k[0]; ++a)
            for (int64_t b = 0; b < g.k[1]; ++b)
              for (int64_t c = 0; c < g.k[2]; ++c) {
                const std::array<int64_t, 3> t{a, b, c};
                std::array<int64_t, 3> i{};
                bool inside = true;
                for (int d = 0; d < 3; ++d) {
                  i[d] = o[d] * g.s[d] - g.begin[d] + t[d] * g.dil[d];
                  inside = inside && i[d] >= 0 && i[d] < in[d];
                }
                if (!inside) continue;
                const int64_t flat = (i[0] * in[1] + i[1]) * in[2] + i[2];
                const double v = x.values[p * in[0] * in[1] * in[2] + flat];
                sum += v;
                if (arg < 0 || v > best || std::isnan(v)) {
                  best = v;
                  arg = flat;
                }
              }
          const int64_t n = g.mode == 2 ? g.divisor : g.mode == 0 ? size : count;
          out.values.push_back(kind == PoolKind::kMax          ? best
                               : kind == PoolKind::kMaxIndices ? static_cast<double>(arg)
                               : count == 0                    ? 0.0
                                                               : sum / static_cast<double>(n));
        }
  return out;
}

// True when max pooling's windows tile the input: one depth, stride = window, no padding, no
// dilation, and every window inside the input (no ceil_mode partial window). The common case
// (2x2 / 2 in a CNN) then takes max_pool_grad_tiled, one pass instead of an index pass and a
// gather with divisions.
bool windows_tile_the_input(const PoolGeometry& g, const View& x, const View& dy) {
  const int64_t oh = dy.shape[2], ow = dy.shape[3];
  return x.shape[1] == 1 && g.k[0] == 1 && g.s[1] == g.k[1] && g.s[2] == g.k[2] &&
         g.begin == std::array<int64_t, 3>{0, 0, 0} && g.end == std::array<int64_t, 3>{0, 0, 0} &&
         g.dil == std::array<int64_t, 3>{1, 1, 1} && oh > 0 && ow > 0 &&
         oh * g.k[1] <= x.shape[2] && ow * g.k[2] <= x.shape[3];
}

// The planes [P, 1, H, W] as windows [P, OH, KH, OW, KW] (tiling windows only), and an output's
// planes [P, 1, OH, OW] as [P, OH, OW].
View tiled_view(const View& x, const PoolGeometry& g) {
  const int64_t kh = g.k[1], kw = g.k[2];
  return View{x.tensor,
              {x.shape[0], x.shape[2] / kh, kh, x.shape[3] / kw, kw},
              {x.strides[0], kh * x.strides[2], x.strides[2], kw * x.strides[3], x.strides[3]}};
}
View tiled_out_view(const View& y) {
  return View{
      y.tensor, {y.shape[0], y.shape[2], y.shape[3]}, {y.strides[0], y.strides[2], y.strides[3]}};
}

// On the CPU, tiling windows whose rows also tile the planes (H = OH KH, one plane after the
// other) run as rows of windows over every plane at once: max_pool_rows and its gradient over x
// as [P OH, KH, OW KW] (the columns past the last window dropped) and the output as [P OH, OW].
// The window's width is the kernels' compile-time KW.
bool rows_tile_the_planes(const PoolGeometry& g, const View& x, const View& out) {
  return x.tensor.device()->kind() == DeviceKind::kCpu && g.k[2] <= 4 &&
         out.shape[2] * g.k[1] == x.shape[2] && x.strides[0] == x.shape[2] * x.strides[2] &&
         out.strides[0] == out.shape[2] * out.strides[2];
}
View window_rows(const View& x, const PoolGeometry& g, int64_t ow) {
  const int64_t kh = g.k[1];
  return View{x.tensor,
              {x.shape[0] * (x.shape[2] / kh), kh, ow * g.k[2]},
              {kh * x.strides[2], x.strides[2], x.strides[3]}};
}
View output_rows(const View& y) {
  return View{y.tensor, {y.shape[0] * y.shape[2], y.shape[3]}, {y.strides[2], y.strides[3]}};
}
// Blocks of about 256 outputs, as wide as the output's rows up to 32 (7 wide: 7 columns, 36
// rows). A block exactly as wide as the rows reads and writes whole rows, so the compiler's
// loops run unmasked; a 16-wide block over 14-wide rows masked every load and store, which made
// both kernels 2-3x slower (stop 28). Each output width below 32 compiles its own kernel.
KernelParams rows_params(const PoolGeometry& g, int64_t ow) {
  const int64_t bn = std::min<int64_t>(ow, 32);
  return {{"T", "f32"},
          {"KW", std::to_string(g.k[2])},
          {"BN", std::to_string(bn)},
          {"BM", std::to_string(256 / bn)}};
}

// On the CPU, 2-d max pooling whose output rows fit one block (ResNet's 3 x 3 / stride 2 after
// the stem): max_pool_window_rows and its gradient copy the window's input rows along their
// contiguous columns, where max_pool's per-element bounds-checked reads at a stride and the
// gradient's index pass and gather ran scalar (resnet50, 1 thread: ~10% of the step). The
// output's width is the kernels' BN (each width compiles its own), W must end within the
// fragment of BN SW + 4 columns that a row copies from -pw, and KW <= 4 (one loop body's
// shuffles); no dilation, one depth, and no window wholly in the padding (ONNX pads past the
// window: their -inf / no-gradient outputs stay max_pool's). BN is the width rounded up to 8
// (fewer specialisations; the columns past the output are neither read from dY nor stored).
constexpr int64_t kWindowRowsMaxWidth = 128;
bool window_rows_fit(const PoolGeometry& g, const View& x, const View& y) {
  const int64_t h = x.shape[2], w = x.shape[3], oh = y.shape[2], ow = y.shape[3];
  return x.tensor.device()->kind() == DeviceKind::kCpu && x.shape[1] == 1 && g.k[0] == 1 &&
         g.dil[1] == 1 && g.dil[2] == 1 && g.k[2] <= 4 && ow >= 1 && ow <= kWindowRowsMaxWidth &&
         oh >= 1 && w <= ow * g.s[2] + 4 - g.begin[2] && g.begin[1] < g.k[1] &&
         g.begin[2] < g.k[2] && (oh - 1) * g.s[1] - g.begin[1] < h &&
         (ow - 1) * g.s[2] - g.begin[2] < w;
}
KernelParams window_rows_params(const PoolGeometry& g, int64_t ow) {
  return {{"T", "f32"},
          {"KW", std::to_string(g.k[2])},
          {"SW", std::to_string(g.s[2])},
          {"BN", std::to_string((ow + 7) / 8 * 8)}};
}
View plane_rows(const View& x) {  // [P, 1, H, W] as [P, H, W]
  return View{
      x.tensor, {x.shape[0], x.shape[2], x.shape[3]}, {x.strides[0], x.strides[2], x.strides[3]}};
}
std::vector<KernelArg> window_rows_args(std::vector<KernelArg> args, const PoolGeometry& g) {
  for (int64_t v : {g.k[1], g.s[1], g.begin[1], g.begin[2]})
    args.push_back(v);
  return args;
}

// max_pool's gradient over tiling windows: x and dX seen as [P, OH, KH, OW, KW].
Expected<std::vector<Tensor>> max_pool_grad_tiled(const PoolGeometry& g, const View& x,
                                                  const View& dy, const Tensor& dy_tensor) {
  const int64_t p = x.shape[0], h = x.shape[2], w = x.shape[3];
  const int64_t oh = dy.shape[2], ow = dy.shape[3], kh = g.k[1], kw = g.k[2];
  const Shape& in_shape = x.tensor.shape();
  Tensor dx;
  if (oh * kh == h && ow * kw == w) {  // every element is in a window, so every one is written
    TESSEL_ASSIGN_OR_RETURN(dx, empty_like_device(in_shape, DType::kF32, dy_tensor));
  } else {
    TESSEL_ASSIGN_OR_RETURN(dx, Tensor::zeros(in_shape, DType::kF32, dy_tensor.device()));
  }
  if (rows_tile_the_planes(g, x, dy)) {
    const View dxp{dx, {p, 1, h, w}, {h * w, 0, w, 1}};
    TESSEL_TRY(launch_kernel("max_pool_rows_grad", rows_params(g, ow),
                             {window_rows(x, g, ow), output_rows(dy), window_rows(dxp, g, ow)}));
    return std::vector<Tensor>{dx};
  }
  const View dxs{dx, {p, oh, kh, ow, kw}, {h * w, kh * w, w, kw, 1}};
  TESSEL_TRY(launch_kernel("max_pool_grad_tiled", {{"T", "f32"}},
                           {tiled_view(x, g), tiled_out_view(dy), dxs}));
  return std::vector<Tensor>{dx};
}

OpDef pool_op(int dims, PoolKind kind) {
  const std::string name = (kind == PoolKind::kAvg ? "avg_pool" : "max_pool") +
                           std::to_string(dims) + "d" +
                           (kind == PoolKind::kMaxIndices ? "_indices" : "");
  OpDef op;
  op.name = name;
  op.attrs = {"window", "stride", "padding", "pads", "dilation", "ceil_mode"};
  if (kind == PoolKind::kAvg)
    op.attrs = {"window",          "stride", "padding", "pads", "ceil_mode", "count_include_pad",
                "divisor_override"};
  op.infer = [name, dims, kind](const std::vector<TensorMeta>& in, const Attrs& a) {
    return infer_pool(name, dims, kind, in, a);
  };
  op.forward = [name, dims, kind](const std::vector<Tensor>& in, const Attrs& a,
                                  const TensorMeta& out) -> Expected<Tensor> {
    TESSEL_ASSIGN_OR_RETURN(PoolGeometry g, pool_geometry(name, dims, kind, a));
    TESSEL_ASSIGN_OR_RETURN(View x, pool_planes(in[0]));
    TESSEL_ASSIGN_OR_RETURN(Tensor y, empty_like_device(out.shape, DType::kF32, in[0]));
    if (kind == PoolKind::kAvg) {
      TESSEL_ASSIGN_OR_RETURN(View yp, pool_planes(y));
      std::vector<KernelArg> args{x, yp};
      for (KernelArg& s : avg_args(g, x))
        args.push_back(s);
      TESSEL_TRY(launch_kernel("avg_pool", stride_params(g, {}), args));
      return y;
    }
    if (kind == PoolKind::kMax) {
      TESSEL_ASSIGN_OR_RETURN(View yp, pool_planes(y));
      if (windows_tile_the_input(g, x, yp) && rows_tile_the_planes(g, x, yp)) {
        TESSEL_TRY(launch_kernel("max_pool_rows", rows_params(g, yp.shape[3]),
                                 {window_rows(x, g, yp.shape[3]), output_rows(yp)}));
        return y;
      }
      if (windows_tile_the_input(g, x, yp)) {
        TESSEL_TRY(launch_kernel("max_pool_tiled", {{"T", "f32"}},
                                 {tiled_view(x, g), tiled_out_view(yp)}));
        return y;
      }
      if (window_rows_fit(g, x, yp)) {
        TESSEL_TRY(launch_kernel("max_pool_window_rows", window_rows_params(g, yp.shape[3]),
                                 window_rows_args({plane_rows(x), plane_rows(yp)}, g)));
        return y;
      }
    }
    Tensor indices;
    if (kind == PoolKind::kMaxIndices) {
      TESSEL_ASSIGN_OR_RETURN(indices, empty_like_device(out.shape, DType::kI64, in[0]));
    }
    TESSEL_TRY(launch_max_pool(x, y, indices, g));
    return kind == PoolKind::kMaxIndices ? indices : y;
  };
  op.reference = [name, dims, kind](const std::vector<RefTensor>& in, const Attrs& a) {
    PoolGeometry g = pool_geometry(name, dims, kind, a).value();
    TensorMeta meta = infer_pool(name, dims, kind, {{in[0].shape, DType::kF32}}, a).value();
    return pool_reference(in[0], meta.shape, dims, kind, g);
  };
  if (kind == PoolKind::kMaxIndices) return op;  // integers: no gradient
  op.save_inputs = {kind == PoolKind::kMax};
  op.backward = [name, dims, kind](const BackwardArgs& b) -> Expected<std::vector<Tensor>> {
    TESSEL_ASSIGN_OR_RETURN(PoolGeometry g, pool_geometry(name, dims, kind, b.attrs));
    TESSEL_ASSIGN_OR_RETURN(Tensor dy, contiguous_on_device(b.grad_output));
    TESSEL_ASSIGN_OR_RETURN(View gp, pool_planes(dy));
    TESSEL_ASSIGN_OR_RETURN(Tensor dx, empty_like_device(b.input_meta[0].shape, DType::kF32, dy));
    TESSEL_ASSIGN_OR_RETURN(View dxp, pool_planes(dx));
    if (kind == PoolKind::kAvg) {
      std::vector<KernelArg> args{gp, dxp};
      for (KernelArg& s : avg_args(g, dxp))
        args.push_back(s);
      TESSEL_TRY(launch_kernel("avg_pool_grad", stride_params(g, {}), args));
      return std::vector<Tensor>{dx};
    }
    TESSEL_ASSIGN_OR_RETURN(View x, pool_planes(b.inputs[0]));
    if (windows_tile_the_input(g, x, gp)) return max_pool_grad_tiled(g, x, gp, dy);
    if (window_rows_fit(g, x, gp)) {  // each output's place in its window, then the gather
      const KernelParams params = window_rows_params(g, gp.shape[3]);
      TESSEL_ASSIGN_OR_RETURN(Tensor keys, empty_like_device(dy.shape(), DType::kF32, dy));
      TESSEL_ASSIGN_OR_RETURN(View kp, pool_planes(keys));
      TESSEL_TRY(launch_kernel("max_pool_window_keys", params,
                               window_rows_args({plane_rows(x), plane_rows(kp)}, g)));
      TESSEL_TRY(launch_kernel("max_pool_window_rows_grad", params,
                               {plane_rows(kp), plane_rows(gp), plane_rows(dxp), g.s[1], g.begin[1],
                                g.begin[2], g.k[1]}));
      return std::vector<Tensor>{dx};
    }
    TESSEL_ASSIGN_OR_RETURN(Tensor y, empty_like_device(dy.shape(), DType::kF32, dy));
    TESSEL_ASSIGN_OR_RETURN(Tensor indices, empty_like_device(dy.shape(), DType::kI64, dy));
    TESSEL_TRY(launch_max_pool(x, y, indices, g));
    TESSEL_ASSIGN_OR_RETURN(View ip, pool_planes(indices));
    std::vector<KernelArg> args{ip, gp, dxp};
    for (KernelArg& s : max_args(g, /*strides=*/false))
      args.push_back(s);
    // T is not I's i64
    TESSEL_TRY(launch_kernel("max_pool_grad", stride_params(g, {{"T", "f32"}}), args));
    return std::vector<Tensor>{dx};
  };
  return op;
}

}  // namespace

void add_pool_ops(std::vector<OpDef>& ops) {
  for (int dims = 1; dims <= 3; ++dims)
    for (PoolKind kind : {PoolKind::kMax, PoolKind::kAvg, PoolKind::kMaxIndices})
      ops.push_back(pool_op(dims, kind));
}

Attrs pool_attrs(std::vector<int64_t> window, const PoolOptions& o) {
  Attrs a = Attrs().set("window", std::move(window)).set("ceil_mode", o.ceil_mode ? 1 : 0);
  if (!o.stride.empty()) a.set("stride", o.stride);
  if (!o.padding.empty()) a.set("padding", o.padding);
  if (!o.pads.empty()) a.set("pads", o.pads);
  if (!o.dilation.empty()) a.set("dilation", o.dilation);
  if (!o.count_include_pad) a.set("count_include_pad", 0);
  if (o.divisor_override) a.set("divisor_override", *o.divisor_override);
  return a;
}

namespace {
std::string pool_name(const char* kind, size_t dims, const char* suffix = "") {
  return std::string(kind) + std::to_string(dims) + "d" + suffix;
}
}  // namespace

Expected<Tensor> max_pool(const Tensor& x, std::vector<int64_t> window, const PoolOptions& o) {
  const std::string name = pool_name("max_pool", window.size());
  return run(name, {x}, pool_attrs(std::move(window), o));
}
Expected<Tensor> avg_pool(const Tensor& x, std::vector<int64_t> window, const PoolOptions& o) {
  const std::string name = pool_name("avg_pool", window.size());
  return run(name, {x}, pool_attrs(std::move(window), o));
}
Expected<std::pair<Tensor, Tensor>> max_pool_with_indices(const Tensor& x,
                                                          std::vector<int64_t> window,
                                                          const PoolOptions& o) {
  const size_t dims = window.size();
  Attrs a = pool_attrs(std::move(window), o);
  TESSEL_ASSIGN_OR_RETURN(Tensor values, run(pool_name("max_pool", dims), {x}, a));
  TESSEL_ASSIGN_OR_RETURN(Tensor indices, run(pool_name("max_pool", dims, "_indices"), {x}, a));
  return std::make_pair(values, indices);
}

// The 2-d forms keep their names whatever the window's length (one integer repeats).
namespace {
Expected<Tensor> pool2d(const char* name, const Tensor& x, std::vector<int64_t> window,
                        std::vector<int64_t> stride, std::vector<int64_t> padding) {
  PoolOptions o;
  o.stride = std::move(stride);
  o.padding = std::move(padding);
  return run(name, {x}, pool_attrs(std::move(window), o));
}
}  // namespace
Expected<Tensor> max_pool2d(const Tensor& x, std::vector<int64_t> window,
                            std::vector<int64_t> stride, std::vector<int64_t> padding) {
  return pool2d("max_pool2d", x, std::move(window), std::move(stride), std::move(padding));
}
Expected<Tensor> avg_pool2d(const Tensor& x, std::vector<int64_t> window,
                            std::vector<int64_t> stride, std::vector<int64_t> padding) {
  return pool2d("avg_pool2d", x, std::move(window), std::move(stride), std::move(padding));
}

}  // namespace tessel::ops
