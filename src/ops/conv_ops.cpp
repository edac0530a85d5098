// NCHW convolution (kernels/conv.tile; pooling is in ops/pool_ops.cpp). On the CPU conv2d is an
// implicit gemm (conv_implicit): the input is written once, padded and split into stride phases,
// channel-major, and every tap of the window is a strided view of that buffer, so no columns are
// materialised; the input gradient is the same kernel run transposed over the output gradient (one
// output phase per grid plane for strided layers), and the weight gradient one gemm per tap over
// the same views. Other devices run im2col + one gemm launch over every (image, group) pair with
// the bias in its epilogue; their gradient recomputes the columns from the saved input rather than
// keeping them (they are kh kw times the input's size), the weight and bias gradients come from one
// kernel that sums over the batch, and the input gradient is a gemm folded back onto the input by
// col2im. Which of these a CPU pass runs is an algorithm choice (ops/conv_algorithms.h): the rule
// in pass_algorithm's callers, unless the tuning database measured another for the layer.
// Precision (ops/gemm_precision.h): x and weight are f32, f16 or bf16; in a 16-bit compute dtype
// x, weight and the output gradient are cast to it around the gemms (the relaid inputs or the
// columns are then 16-bit too, half the bytes), which accumulate in f32; results and gradients
// before their final cast are f32.
#include <algorithm>
#include <cstdlib>
#include <string_view>

#include "ops/conv_algorithms.h"
#include "ops/conv_pointwise.h"
#include "ops/conv_stem.h"
#include "ops/conv_winograd.h"
#include "ops/gemm_precision.h"
#include "ops/kernel_util.h"
#include "ops/ops.h"
#include "ops/reference_util.h"
#include "support/thread_pool.h"

namespace tessel::ops {
namespace {

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

struct Window {
  int64_t kh, kw, sh, sw, ph, pw, dh, dw;
  int64_t out_h(int64_t h) const { return (h + 2 * ph - dh * (kh - 1) - 1) / sh + 1; }
  int64_t out_w(int64_t w) const { return (w + 2 * pw - dw * (kw - 1) - 1) / sw + 1; }
  // Whether the (dilated) window fits the padded input: out_h/out_w round a negative span
  // towards zero, so a window one larger than the input would otherwise give one output.
  bool fits(int64_t h, int64_t w) const {
    return h + 2 * ph >= dh * (kh - 1) + 1 && w + 2 * pw >= dw * (kw - 1) + 1;
  }
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
//
// Shapes: x [N, C, H, W], weight [O, C / G, KH, KW], bias [O], G groups; K = (C / G) KH KW rows
// of columns per group, L = OH OW output positions. The columns of all groups are one im2col
// tensor [N, G, K, L] (a group's rows are its channels' rows), and every gemm runs over the
// (image, group) pairs in one launch.

struct ConvShape {
  int64_t n, c, o, groups, oh, ow;
  int64_t k;  // rows of columns per group: (c / groups) kh kw
  int64_t l() const { return oh * ow; }
};

ConvShape conv_shape(const Tensor& x, const Tensor& weight, int64_t groups, const Window& w) {
  return ConvShape{x.size(0),
                   x.size(1),
                   weight.size(0),
                   groups,
                   w.out_h(x.size(2)),
                   w.out_w(x.size(3)),
                   weight.size(1) * w.kh * w.kw};
}

int64_t groups_of(const Attrs& a) {
  return a.get_int("groups", 1);
}

Expected<TensorMeta> infer_conv(const std::vector<TensorMeta>& in, const Attrs& a) {
  const Shape &x = in[0].shape, &w = in[1].shape, &b = in[2].shape;
  const bool floats = is_float_operand(in[2].dtype);
  const int64_t g = groups_of(a);
  if (g < 1) return invalid_argument("conv2d: groups must be >= 1, got {}", g);
  if (x.size() != 4 || w.size() != 4 || b != Shape{w[0]} || !floats || x[1] != w[1] * g ||
      w[0] % g != 0)
    return invalid_argument(
        "conv2d: needs x [N, C, H, W], weight [O, C / groups, KH, KW], bias [O] with C and O "
        "multiples of groups = {}, got {}",
        g, shapes_string(in));
  TESSEL_TRY(gemm_compute_dtype("conv2d", {in[0], in[1]}, a));
  TESSEL_ASSIGN_OR_RETURN(Window win, window_of("conv2d", a, w[2], w[3]));
  int64_t oh = win.out_h(x[2]), ow = win.out_w(x[3]);
  if (!win.fits(x[2], x[3]) || oh < 1 || ow < 1)
    return invalid_argument(
        "conv2d: a {}x{} window (dilation {}x{}) does not fit input {} with padding {}x{}", w[2],
        w[3], win.dh, win.dw, shape_string(x), win.ph, win.pw);
  return TensorMeta{{x[0], w[0], oh, ow}, DType::kF32};
}

bool unit_strides(const Window& w) {
  return w.sh == 1 && w.sw == 1;
}

// TESSEL_CONV=im2col: every conv2d pass runs as im2col + gemm (for comparisons), whatever the rule
// or the tuning database say.
bool im2col_forced() {
  static const bool forced = [] {
    const char* v = std::getenv("TESSEL_CONV");
    return v != nullptr && std::string_view(v) == "im2col";
  }();
  return forced;
}

// The rule for whether a conv2d pass runs as an implicit gemm (the CPU) or as im2col + gemm
// (other devices). `depth` is the K of each tap's gemm (C / G forward and for the weight
// gradient, O / G for the input gradient): below 16, as in an RGB stem (3) or a depthwise layer
// (1), a tap's gemm is too shallow to keep the micro-kernel busy, and im2col's columns, kh kw taps
// deep, are the better operand. A tuned choice may overrule it per layer (pass_algorithm).
bool implicit_gemm(const Tensor& like, int64_t depth) {
  return like.device()->kind() == DeviceKind::kCpu && !im2col_forced() && depth >= 16;
}

// TESSEL_CONV=winograd: the forward and input gradient of every layer Winograd fits run as
// Winograd (for comparisons), whatever the rule says; TESSEL_CONV=direct: none does.
std::string_view conv_env() {
  static const std::string value = [] {
    const char* v = std::getenv("TESSEL_CONV");
    return std::string(v != nullptr ? v : "");
  }();
  return value;
}

// The rule for Winograd (conv_winograd.h): a 3x3 / stride 1 layer of one group on the CPU in f32,
// where winograd_by_default measured it faster; `channels` deep into `outputs` channels (C and O
// forward, O and C for the input gradient).
bool winograd_rule(const Tensor& like, const Window& w, const ConvShape& s, int64_t channels,
                   int64_t outputs, DType compute) {
  const bool fits = w.kh == 3 && w.kw == 3 && unit_strides(w) && w.dh == 1 && w.dw == 1 &&
                    s.groups == 1 && !im2col_forced() && conv_env() != "direct";
  if (fits && conv_env() == "winograd") return true;
  return fits && like.device()->kind() == DeviceKind::kCpu && compute == DType::kF32 &&
         winograd_by_default(channels, outputs);
}

// The columns of x: [N, G, K, L] (as [N, G K, OH, OW] for the kernel).
Expected<Tensor> im2col(const Tensor& x, const Window& w, const ConvShape& s) {
  TESSEL_ASSIGN_OR_RETURN(Tensor cols,
                          empty_like_device({s.n, s.groups, s.k, s.l()}, x.dtype(), x));
  const int64_t rows = s.groups * s.k;
  View out{cols, {s.n, rows, s.oh, s.ow}, {rows * s.l(), s.l(), s.ow, 1}};
  std::vector<KernelArg> args{x, out};
  for (KernelArg& a : window_args(w, true))
    args.push_back(a);
  TESSEL_TRY(launch_kernel("im2col", {{"STRIDED", unit_strides(w) ? "0" : "1"}}, args));
  return cols;
}

// [N, O, OH, OW] (or any [N, O, L] layout) as [N, G, O / G, L].
View grouped(const Tensor& t, const ConvShape& s) {
  const Strides& st = t.strides();
  const int64_t og = s.o / s.groups;
  int64_t l_stride = t.rank() == 4 ? st[3] : st[2];
  return View{t, {s.n, s.groups, og, s.l()}, {st[0], og * st[1], st[1], l_stride}};
}

// Block sizes per device kind, as for matmul: the CPU keeps the kernels' defaults.
KernelParams conv_gemm_params(const Tensor& t) {
  if (t.device()->kind() == DeviceKind::kCpu) return {};
  return {{"BM", "32"}, {"BN", "32"}, {"BK", "8"}};
}

// The dtype conv2d's gemms multiply in (gemm_precision.h).
Expected<DType> conv_compute(const Tensor& x, const Tensor& weight, const Attrs& a) {
  return gemm_compute_dtype("conv2d", {{x.shape(), x.dtype()}, {weight.shape(), weight.dtype()}},
                            a);
}

// ---- implicit gemm (CPU) ----
//
// The position grid conv_implicit runs over (kernels/conv.tile): per image hh x ww positions, of
// which the first rows x cols are outputs, and the input relaid as [C, phases_y, phases_x, N + 1,
// hh, ww] (or, `direct`, the NCHW input as it is: 1x1, stride 1, no padding). taps_y x taps_x are
// the offsets a tap can add. Positions outside the outputs read up to (taps_y - 1) ww + taps_x - 1
// elements (less than an image) past their image: the relaid buffer has one image of zeros after
// the last, so that those reads stay inside it and read finite values (the weight gradient
// multiplies them by the output gradient's zeros there).
struct TapGrid {
  bool direct = false;
  int64_t phases_y = 1, phases_x = 1, taps_y = 1, taps_x = 1, hh = 0, ww = 0;
  int64_t plane() const { return hh * ww; }
};

// Whether a gemm per image (a 1x1 read in place, or over a subsampled input) beats folding the
// images into the positions (relayout, which for a 1x1 layer is fold_images: a copy of the
// input channel-major) and running one gemm over all of them. A gemm per image rounds its
// positions up to whole micro-tile columns (196 -> 208, 6%; 49 -> 64, 31%) and, as the weight
// gradient's depth, runs K steps as short as an image (16 over 4 x 4); the fold is one pass over
// the operand. `rows` = 0: the weight gradient, where positions are the gemm's depth and both
// operands are folded. bench conv, 1 thread, CPU clock, per image against folded (conv_fold),
// load ~5, two or three rounds: 14 x 14 forward and input gradient 0.84-0.96 against 0.70-0.83x
// oneDNN (resnet50.layer3.0.conv3, layer3.1.conv1); 7 x 7 resnet50.layer4.1.conv1 forward
// 0.61-0.70 -> 0.85-0.86x, layer4.0.conv3 input gradient 0.81 -> 0.90-0.92x; 8 x 8
// resnet18.layer3.0.downsample.0 input gradient 0.48-0.54 -> 0.65-0.71x. Weight gradients:
// 4 x 4 resnet18.layer4.0.downsample.0 31-32 -> 48-50 GFLOP/s, 7 x 7 and 8 x 8 level. (Before
// conv_fold the relayout cost per flop as 1 / rows, and small images kept a gemm per image under
// 512 rows or fewer.)
bool gemm_per_image_pays(int64_t positions, int64_t rows) {
  return rows == 0 ? positions >= 32 : positions >= 196;
}

// Whether a 1x1 / stride 1 layer reads its NCHW input in place, one grid plane per image.
bool reads_in_place(const Window& w, int64_t positions, int64_t rows) {
  return w.kh == 1 && w.kw == 1 && unit_strides(w) && w.ph == 0 && w.pw == 0 &&
         gemm_per_image_pays(positions, rows);
}

// The grid of the forward pass (and, `weight_grad`, of the weight gradient, which reads the same
// views).
TapGrid forward_grid(const Window& w, const ConvShape& s, bool weight_grad = false) {
  TapGrid g;
  g.direct = reads_in_place(w, s.l(), weight_grad ? 0 : s.o / s.groups);
  const int64_t reach_y = (w.kh - 1) * w.dh, reach_x = (w.kw - 1) * w.dw;
  g.phases_y = std::min(w.sh, reach_y + 1);
  g.phases_x = std::min(w.sw, reach_x + 1);
  g.taps_y = reach_y / w.sh + 1;
  g.taps_x = reach_x / w.sw + 1;
  g.hh = s.oh + g.taps_y - 1;
  g.ww = s.ow + g.taps_x - 1;
  return g;
}

// The grid of the input gradient over the output gradient, padded by top x left: output phase
// (py, px) of dX has ceil(H / sh) x ceil(W / sw) positions, and tap (i, j) reads the output
// gradient (py + ph - i dh) / sh rows below (where that divides).
struct TransposedGrid {
  TapGrid grid;
  int64_t top = 0, left = 0;
};

TransposedGrid input_grad_grid(const Window& w, int64_t h, int64_t wd, int64_t rows) {
  auto offsets = [](int64_t stride, int64_t pad, int64_t k, int64_t dil) {
    int64_t lo = INT64_MAX, hi = INT64_MIN;
    for (int64_t p = 0; p < stride; ++p)
      for (int64_t i = 0; i < k; ++i)
        if ((p + pad - i * dil) % stride == 0) {
          lo = std::min(lo, (p + pad - i * dil) / stride);
          hi = std::max(hi, (p + pad - i * dil) / stride);
        }
    if (lo > hi) lo = hi = 0;
    return std::make_pair(lo, hi);
  };
  auto [lo_y, hi_y] = offsets(w.sh, w.ph, w.kh, w.dh);
  auto [lo_x, hi_x] = offsets(w.sw, w.pw, w.kw, w.dw);
  TransposedGrid t;
  t.top = std::max<int64_t>(0, -lo_y);
  t.left = std::max<int64_t>(0, -lo_x);
  t.grid.direct = reads_in_place(w, h * wd, rows);
  t.grid.taps_y = hi_y + t.top + 1;
  t.grid.taps_x = hi_x + t.left + 1;
  t.grid.hh = ceil_div(h, w.sh) + hi_y + t.top;
  t.grid.ww = ceil_div(wd, w.sw) + hi_x + t.left;
  return t;
}

// Elements from one channel to the next in a relaid buffer of n images. Channels a multiple of
// 1 KiB apart would all fall in the same L1 sets when a pack reads 16 of them at once (the
// transposing packs of the weight gradient), so such a stride gets 64 bytes more.
int64_t relaid_channel_stride(const TapGrid& g, int64_t n) {
  const int64_t stride = g.phases_y * g.phases_x * (n + 1) * g.plane();
  return stride % 256 == 0 ? stride + 16 : stride;
}

// Whether relaying x for grid g is a fold (below): one phase, no taps, no padding, the grid the
// positions (oh sh, ow sw) of x and nothing more. A 1x1 layer's input, and an output gradient
// relaid onto its own positions (a 1x1's input gradient and weight gradient, the columns').
bool folds_images(const Tensor& x, const TapGrid& g, int64_t sh, int64_t sw, int64_t ph, int64_t pw,
                  int64_t unfold) {
  return unfold == 1 && g.phases_y == 1 && g.phases_x == 1 && g.taps_y == 1 && g.taps_x == 1 &&
         ph == 0 && pw == 0 && g.hh == ceil_div(x.size(2), sh) && g.ww == ceil_div(x.size(3), sw);
}

// A relayout without taps (folds_images): buf[c per_channel + b plane + q] = x[b, c, (q / ww) sh,
// (q % ww) sw], the images folded into the positions channel-major. The zero image after the
// last and a channel's padding are left unwritten: without taps no view reads a position past
// the last image (tap_view's Q is n plane), and zeroing them (a strided fill on the host) was
// a pass over C short runs for nothing. conv_fold copies rows of many channels per block, where
// conv_relayout_unit and conv_relayout gave each block at most 8 rows of one plane and over
// 4 x 4 or 7 x 7 images spent most of their time starting blocks (26% of
// resnet18.layer4.0.downsample.0's input gradient, 16% of its forward; perf).
Status fold_images(const Tensor& x, const Tensor& buf, const TapGrid& g, int64_t sh, int64_t sw,
                   int64_t per_channel) {
  const int64_t n = x.size(0), c = x.size(1), h = x.size(2), wd = x.size(3), plane = g.plane();
  TESSEL_ASSIGN_OR_RETURN(Tensor xc, contiguous_on_device(x));
  // Unit strides: an image's positions are one contiguous row.
  const bool flat = sh == 1 && sw == 1;
  const int64_t rows = flat ? 1 : g.hh, cols = flat ? plane : g.ww;
  const View src{xc, {n, c, rows, cols}, {c * h * wd, h * wd, flat ? plane : sh * wd, sw}};
  const View dst{buf, {c, n, rows, cols}, {per_channel, plane, cols, 1}};
  TESSEL_TRY(launch_kernel(
      "conv_fold",
      {{"U", dtype_name(buf.dtype())}, {"BN", std::to_string(std::min<int64_t>(cols, 64))}},
      {src, dst}));
  return ok_status();
}

// x [N, C, H, W] relaid for the grid g by conv_relayout, as `to`, with an image of zeros after
// the last in every channel and phase (conv_relayout reads image N as zeros: it is outside x).
//
// `unfold` > 1 (a stem, below; g then has one column phase): each input channel becomes
// `unfold` channels, channel c unfold + j holding the input shifted by j columns, as
// P[c unfold + j, py, b, hh, ww] = X[b, c, hh sh + py - ph, ww sw + j - pw]: conv_relayout's
// column phases with the phase index j and the channel strides that make c unfold + j one index.
Expected<Tensor> relayout(const Tensor& x, DType to, const TapGrid& g, int64_t sh, int64_t sw,
                          int64_t ph, int64_t pw, int64_t unfold = 1) {
  const int64_t n = x.size(0) + 1, c = x.size(1) * unfold;
  const int64_t per_channel = relaid_channel_stride(g, x.size(0));
  // conv_relayout writes every element of every image, the zero image and the padding
  // included; only the elements that pad a channel's stride are left, and those are zeroed
  // here: the kernels multiply what they read past an image by zeros, and 0 x a stale NaN left
  // in a reused buffer is NaN (seen as NaN weight gradients in ResNet parity runs).
  TESSEL_ASSIGN_OR_RETURN(Tensor buf, empty_like_device({c * per_channel}, to, x));
  if (folds_images(x, g, sh, sw, ph, pw, unfold)) {
    TESSEL_TRY(fold_images(x, buf, g, sh, sw, per_channel));
    return buf;
  }
  const int64_t written = g.phases_y * g.phases_x * n * g.plane();
  if (written < per_channel) {
    TESSEL_ASSIGN_OR_RETURN(Tensor rows, buf.reshape({c, per_channel}));
    TESSEL_ASSIGN_OR_RETURN(Tensor tail, rows.slice(1, written, per_channel));
    TESSEL_TRY(tail.fill(0.0));
  }
  const int64_t px = g.phases_x * unfold, plane_stride = n * g.plane();
  if (sh == 1 && sw == 1 && unfold == 1 && g.phases_y == 1 && g.phases_x == 1 && pw <= g.ww) {
    // One phase: whole rows, their padding columns apart (conv_relayout_unit). A block as wide
    // as the rows (up to 64), so that a row inside x is one unmasked copy.
    const int64_t width = x.size(3), bn = width <= 64 ? width : 32;
    View whole{buf, {x.size(1), n, g.hh, g.ww}, {per_channel, g.plane(), g.ww, 1}};
    View inner = whole;
    inner.shape[3] = g.ww - pw;
    TESSEL_ASSIGN_OR_RETURN(inner.tensor, buf.slice(0, pw, buf.size(0)));
    TESSEL_TRY(launch_kernel("conv_relayout_unit",
                             {{"U", dtype_name(to)}, {"BN", std::to_string(bn)}},
                             {x, whole, inner, ph, pw}));
    return buf;
  }
  // Column phases (strided layers) or a stem's shifted copies, row by row through a fragment
  // (conv_unfold, kernels/conv_strided.tile): copy j of a row is X's row from column j - pw on,
  // sw apart, so a stride's column phase px is copy px. conv_relayout loaded every element
  // under a mask, sw apart (13% of resnet50.conv1's forward, perf). A block is one row, so
  // small images keep conv_relayout: bench conv, 1 thread, CPU clock, two rounds, forward
  // against it: resnet18.layer2.0.conv1 (32 x 32) 0.46-0.56 -> 0.60x oneDNN, resnet50's
  // stride-2 3x3 layers level (0.69-1.06), resnet18.layer3.0.conv1 (16 x 16) 0.86-0.87 ->
  // 0.71-0.84.
  const int64_t row_width = x.size(3) + 2 * pw, bw = row_width <= 64 ? 64 : 256;
  if ((unfold > 1 || x.size(3) >= 28) && px <= 8 && row_width <= bw && g.ww <= (bw - px) / sw + 1) {
    View pu{buf,
            {x.size(1), px, g.phases_y, n, g.hh, g.ww},
            {unfold * per_channel, unfold > 1 ? per_channel : plane_stride,
             g.phases_x * plane_stride, g.plane(), g.ww, 1}};
    TESSEL_TRY(launch_kernel("conv_unfold",
                             {{"U", dtype_name(to)},
                              {"BW", std::to_string(bw)},
                              {"SW", std::to_string(sw)},
                              {"KW", std::to_string(px)}},
                             {x, pu, sh, ph, pw}));
    return buf;
  }
  View p{buf,
         {x.size(1), g.phases_y, px, n, g.hh, g.ww},
         {unfold * per_channel, g.phases_x * plane_stride, unfold > 1 ? per_channel : plane_stride,
          g.plane(), g.ww, 1}};
  TESSEL_TRY(launch_kernel("conv_relayout", {{"U", dtype_name(to)}}, {x, p, sh, sw, ph, pw}));
  return buf;
}

// The [Z, G, PY, PX, TY, TX, K, Q] view conv_implicit reads (Q, K swapped when `qk`, for the
// weight gradient) of `buf`, the relaid input of `channels` channels in `groups` groups, or of
// the NCHW tensor itself when g.direct.
View tap_view(const Tensor& buf, const TapGrid& g, int64_t n, int64_t channels, int64_t groups,
              bool qk) {
  const int64_t cg = channels / groups;
  Shape shape;
  Strides strides;
  if (g.direct) {
    const Strides& st = buf.strides();
    shape = {n, groups, 1, 1, 1, 1, cg, g.plane()};
    strides = {st[0], cg * st[1], 0, 0, 0, 0, st[1], 1};
  } else {
    const int64_t plane_stride = (n + 1) * g.plane();
    const int64_t channel_stride = relaid_channel_stride(g, n);
    shape = {1, groups, g.phases_y, g.phases_x, g.taps_y, g.taps_x, cg, n * g.plane()};
    strides = {
        0, cg * channel_stride, g.phases_x * plane_stride, plane_stride, g.ww, 1, channel_stride,
        1};
  }
  if (qk) {
    std::swap(shape[6], shape[7]);
    std::swap(strides[6], strides[7]);
  }
  return View{buf, shape, strides};
}

// The weights tap by tap, [G, R, M, K]: M = O / G, K = C / G (or, `transposed`, for the input
// gradient, M = C / G and K = O / G), as a view of the contiguous weight [O, C / G, kh, kw]
// itself. conv_implicit packs each weight tile once per launch, so reading it strided costs one
// gather per element; a transposed copy first (the old conv_weight_taps) cost a pass with a
// large stride on one side, up to half the time of a 1x1 layer's input gradient.
View weight_taps(const Tensor& wc, int64_t groups, bool transposed) {
  const int64_t o = wc.size(0), cg = wc.size(1), r = wc.size(2) * wc.size(3), og = o / groups;
  const int64_t m = transposed ? cg : og, k = transposed ? og : cg;
  return View{
      wc, {groups, r, m, k}, {og * cg * r, 1, transposed ? r : cg * r, transposed ? cg * r : r}};
}

// Where conv_implicit stores: `view` is its [Z, G, M, E]; `dense` says E is the grid's own
// positions (DENSE = 1), else position q of the grid goes to image q / plane, row and column
// (q % plane / wq, q % wq) of a yh x yw image, images `ostride` elements apart.
struct StoreTarget {
  View view;
  bool dense = false;
  int64_t yh = 1, yw = 1, ostride = 1;
};

// The output phases an input-gradient launch runs (one grid plane each), `every_tap` when each
// tap contributes to every one of them (conv_implicit's UNIT_STRIDE).
struct Phases {
  int64_t y = 1, x = 1;
  bool every_tap = false;
};

// Y [N, M G, yh, yw] as the store target of grid g over its n images.
StoreTarget store_target(const Tensor& y, const TapGrid& g, int64_t groups) {
  const int64_t n = y.size(0), m = y.size(1) / groups, yh = y.size(2), yw = y.size(3), l = yh * yw;
  if (g.direct) return {View{y, {n, groups, m, l}, {y.size(1) * l, m * l, l, 1}}, true};
  return {View{y, {1, groups, m, n * y.size(1) * l}, {0, m * l, l, 1}}, false, yh, yw,
          y.size(1) * l};
}

// conv_implicit's block rows for a gemm of m rows per group: 64 or 128 where one such block
// holds them all (m <= 64, <= 128: ResNet's narrow layers), else 192. A block clears the rows of
// its accumulator past m before its epilogue (clear_outside, a memset of 128 x 256 floats per
// block at m = 64: 14% of resnet50.layer1.0.conv1's forward, perf). Not for more rows: 128-row
// blocks over m = 256 end in a 2-row micro-tile each (AVX2 tiles are 6 rows), and 1x1 forwards
// of 256 rows ran slower with them (bench conv, 1 thread, CPU clock: layer3.0.conv1 0.81-0.83
// -> 0.74-0.77x oneDNN).
// 64 or 128 where one such block holds m, else `largest` (also the transposed weight
// gradient's block columns over the output channels, weight_grad_gemms).
int64_t block_fitted_to(int64_t m, int64_t largest) {
  return m <= 64 ? 64 : m <= 128 ? 128 : largest;
}
int64_t implicit_block_rows(int64_t m) {
  return block_fitted_to(m, 192);
}

// One conv_implicit launch: the convolution of `input` (already viewed) by `taps` into `out`.
Status launch_implicit(const View& taps, const View& input, const StoreTarget& out,
                       const View& bias, bool has_bias, bool transposed, const Window& w,
                       const TapGrid& g, int64_t ty0, int64_t tx0, Phases phases = {}) {
  // One phase stored at unit strides (the forward, a unit-stride input gradient): each grid
  // row's outputs are a contiguous run of the output, stored as one (ROWS = 1). Over images of
  // fewer than 256 grid positions the element-wise store stays: a 7 x 7 layer's runs are short
  // and unaligned, and its input gradient was slower with them (resnet50.layer4.1.conv1).
  const int64_t oy = transposed ? w.sh : 1, ox = transposed ? w.sw : 1;
  const bool rows =
      !out.dense && phases.y == 1 && phases.x == 1 && oy == 1 && ox == 1 && g.plane() >= 256;
  KernelParams params{{"BIAS", has_bias ? "1" : "0"},
                      {"TRANSPOSED", transposed ? "1" : "0"},
                      {"UNIT_STRIDE", transposed && phases.every_tap ? "1" : "0"},
                      {"DENSE", out.dense ? "1" : "0"},
                      {"ROWS", rows ? "1" : "0"}};
  if (taps.tensor.device()->kind() == DeviceKind::kCpu)
    params.emplace("BM", std::to_string(implicit_block_rows(taps.shape[2])));
  std::vector<KernelArg> args{taps, input, out.view,  bias,   w.kw,   w.dh,       w.dw,     w.sh,
                              w.sw, w.ph,  w.pw,      ty0,    tx0,    phases.y,   phases.x, oy,
                              ox,   g.ww,  g.plane(), out.yh, out.yw, out.ostride};
  return launch_kernel("conv_implicit", params, args);
}

// ---- columns over every image's positions (the CPU, small images) ----
//
// Over small images the implicit grid computes, per image, rows and columns of padding that
// it then drops: a 3x3 over 7 x 7 images runs 81 positions for 49 outputs, over 14 x 14 256 for
// 196. There the columns are cheaper: im2col writes [G K, N L] (row (c kh + i) kw + j of a
// group, column b L + l: every image's positions in one row, so the gemm runs over N L of them
// at once, not L per image) and conv_implicit runs it as a 1x1 convolution over them; the
// columns cost a pass over kh kw times the input, small next to a gemm of 64 or more rows. The
// input gradient of a strided layer keeps the implicit grid: its phase planes waste less, and
// col2im's stride tests cost more.

// Whether the implicit grid of a layer computes over a quarter more positions than it has
// outputs (a window over images of 14 x 14 and less) and the layer has 32 or more output
// channels per group (the forward's gemm rows and the input gradient's depth, over which the
// columns' pass is spread).
bool columns_pay(const Window& w, const ConvShape& s) {
  return w.kh * w.kw > 1 && s.o / s.groups >= 32 && forward_grid(w, s).plane() * 4 > s.l() * 5;
}

// The window of a gemm over columns, which hold every tap already.
constexpr Window kPointwise{1, 1, 1, 1, 0, 0, 1, 1};

// A grid of one image of oh x ow positions per plane, no taps: the columns' (and a relaid
// output gradient's) positions.
TapGrid column_grid(const ConvShape& s) {
  TapGrid g;
  g.hh = s.oh;
  g.ww = s.ow;
  return g;
}

// The weights [O, C / G, kh, kw] as the taps of a 1x1 convolution over the columns.
Expected<View> column_taps(const Tensor& weight, const ConvShape& s, bool transposed) {
  TESSEL_ASSIGN_OR_RETURN(Tensor wc, contiguous_on_device(weight));
  TESSEL_ASSIGN_OR_RETURN(Tensor flat, wc.reshape({s.o, s.k, 1, 1}));
  return weight_taps(flat, s.groups, transposed);
}

// The columns [G K, N L] of x.
Expected<Tensor> columns(const Tensor& x, const Window& w, const ConvShape& s) {
  const int64_t q = s.n * s.l();
  TESSEL_ASSIGN_OR_RETURN(Tensor cols, empty_like_device({s.groups * s.k, q}, x.dtype(), x));
  std::vector<KernelArg> args{x, View{cols, {s.groups * s.k, s.n * s.oh, s.ow}, {q, s.ow, 1}},
                              s.oh};
  for (KernelArg& a : window_args(w, true))
    args.push_back(a);
  // A block as wide as the rows (up to 32): a 16-wide one over 14-wide rows stored every
  // element under a mask.
  TESSEL_TRY(launch_kernel("im2col_rows",
                           {{"STRIDED", unit_strides(w) ? "0" : "1"},
                            {"BN", std::to_string(std::min<int64_t>(s.ow, 32))}},
                           args));
  return cols;
}

Expected<Tensor> conv_forward_columns(const Tensor& x, const Tensor& weight, const View& bias,
                                      const Window& w, const ConvShape& s, const TensorMeta& out) {
  const int64_t q = s.n * s.l();
  TESSEL_ASSIGN_OR_RETURN(Tensor cols, columns(x, w, s));
  TESSEL_ASSIGN_OR_RETURN(View taps, column_taps(weight, s, false));
  TESSEL_ASSIGN_OR_RETURN(Tensor y, empty_like_device(out.shape, out.dtype, x));
  const TapGrid g = column_grid(s);
  View input{cols, {1, s.groups, 1, 1, 1, 1, s.k, q}, {0, s.k * q, 0, 0, 0, 0, q, 1}};
  TESSEL_TRY(launch_implicit(taps, input, store_target(y, g, s.groups), bias, true, false,
                             kPointwise, g, 0, 0));
  return y;
}

// The input gradient over columns: dcols [G K, N L] = W^T dY (dY relaid channel-major, images
// along the positions), folded back onto the input by col2im_rows (unit strides) or
// col2im_strided_rows (a strided stem, input_grad_few_rows).
Expected<Tensor> input_grad_columns(const Tensor& g, const Tensor& weight, const Window& w,
                                    const ConvShape& s, const Shape& x_shape, DType compute) {
  TapGrid grid = column_grid(s);
  const int64_t q = s.n * s.l();
  // dY read in place, one gemm per image, where that pays (gemm_per_image_pays; the relayout
  // was 10% of resnet50.conv1's input gradient), else relaid with the images along the positions.
  grid.direct = gemm_per_image_pays(s.l(), s.k);
  Tensor dy = g;
  if (!grid.direct) {
    TESSEL_ASSIGN_OR_RETURN(dy, relayout(g, compute, grid, 1, 1, 0, 0));
  }
  TESSEL_ASSIGN_OR_RETURN(View taps, column_taps(weight, s, true));
  TESSEL_ASSIGN_OR_RETURN(Tensor dcols, empty_like_device({s.groups * s.k, q}, DType::kF32, g));
  const StoreTarget out{grid.direct
                            ? View{dcols, {s.n, s.groups, s.k, s.l()}, {s.l(), s.k * q, q, 1}}
                            : View{dcols, {1, s.groups, s.k, q}, {0, s.k * q, q, 1}},
                        true};
  View no_bias{dcols, {s.groups, s.k}, {0, 0}};  // unread with BIAS = 0
  TESSEL_TRY(launch_implicit(taps, tap_view(dy, grid, s.n, s.o, s.groups, false), out, no_bias,
                             false, false, kPointwise, grid, 0, 0));
  TESSEL_ASSIGN_OR_RETURN(Tensor dx, empty_like_device(x_shape, DType::kF32, g));
  const View dcols4{dcols, {s.groups * s.k, s.n, s.oh, s.ow}, {q, s.l(), s.ow, 1}};
  if (unit_strides(w)) {
    TESSEL_TRY(launch_kernel("col2im_rows",
                             {{"BN", std::to_string(std::min<int64_t>(x_shape[3], 32))}},
                             {dcols4, dx, w.kh, w.kw, w.ph, w.pw, w.dh, w.dw}));
  } else {
    // A block as wide as the rows (up to 128 columns per phase): each tap then reads whole
    // rows of its columns, where 16-column blocks read one line in each of kh kw planes
    // megabytes apart per row (resnet50.conv1: 49 planes of 3 MiB), a cache miss each.
    const int64_t bn = std::min<int64_t>(ceil_div(x_shape[3], w.sw), 128);
    TESSEL_TRY(launch_kernel("col2im_strided_rows",
                             {{"SW", std::to_string(w.sw)}, {"BN", std::to_string(bn)}},
                             {dcols4, dx, w.kh, w.kw, w.sh, w.ph, w.pw, w.dh, w.dw}));
  }
  return dx;
}

// Whether an input gradient runs over columns because the implicit gemm would have few rows:
// fewer than 16 input channels per group (an RGB stem's 3) fill a fraction of each 6- or
// 12-row micro-tile and make every packed tile of the output gradient serve 3 rows, while the
// columns' gemm has C / G kh kw rows (147 for a 7x7 stem).
bool input_grad_few_rows(const Window& w, const ConvShape& s) {
  return s.c / s.groups < 16 && w.kh * w.kw > 1;
}

// ---- strided 1x1 without padding (the CPU: ResNet's downsampling layers) ----
//
// Such a layer reads only the positions (oh sh, ow sw) of its input. conv_subsample writes them
// once, densely, as [N, C, OH, OW], and the layer becomes a stride-1 1x1 over that, read in
// place: one gemm per image with dense stores forward, and for the weight gradient the output
// gradient read as it is. The implicit grid held the same positions, but channel-major with the
// images along the positions, so its forward stored element by element (image, row and column
// of each position) and its weight gradient relaid the output gradient onto the grid first.
// The weight gradient gained over images of 32 or more outputs (bench conv, 1 thread, CPU
// clock: ResNet-50's three downsampling layers 0.70-0.80 -> 0.81-0.97x oneDNN, ResNet-18's
// 0.25-0.37 -> 0.34-0.78x); the forward only where an image's outputs fill most of a 256-wide
// tile (14 x 14 and more): over 7 x 7 outputs a gemm per image of 49 columns lost to the grid's
// images along the positions. The input gradient reads the output gradient in place too, one
// gemm per image stored at the positions the layer reads (input_grad_subsampled). Below those
// sizes (gemm_per_image_pays) each pass runs on the implicit grid, whose relayout of a 1x1
// layer's operand is fold_images; the input gradient runs the one output phase such a layer
// reaches.
bool subsamples(const Window& w) {
  return w.kh == 1 && w.kw == 1 && w.ph == 0 && w.pw == 0 && !unit_strides(w);
}
bool subsamples_forward(const Window& w, const ConvShape& s) {
  return subsamples(w) && gemm_per_image_pays(s.l(), s.o / s.groups);
}

// x [N, C, H, W] at the positions a strided 1x1 without padding reads: [N, C, OH, OW] in `to`.
Expected<Tensor> subsample(const Tensor& x, const Window& w, const ConvShape& s, DType to) {
  TESSEL_ASSIGN_OR_RETURN(Tensor xs, empty_like_device({s.n, s.c, s.oh, s.ow}, to, x));
  TESSEL_TRY(launch_kernel("conv_subsample", {{"U", dtype_name(to)}}, {x, xs, w.sh, w.sw}));
  return xs;
}

// The grid of a 1x1 over the subsampled input: one plane per image, read in place.
TapGrid subsampled_grid(const ConvShape& s) {
  TapGrid g = forward_grid(kPointwise, s);
  g.direct = true;
  return g;
}

// A 1x1 forward as conv_pointwise (ops/conv_pointwise.h): x [N, C, OH, OW] contiguous (the
// input, or the positions a strided layer reads), wc [O, C, 1, 1], into y [N, O, OH, OW].
Status pointwise_forward(const Tensor& x, const Tensor& wc, const View& bias, const ConvShape& s,
                         const Tensor& y) {
  const int64_t l = s.l();
  return launch_pointwise(View{wc, {s.o, s.c}, {s.c, 1}}, View{x, {s.n, s.c, l}, {s.c * l, l, 1}},
                          View{y, {s.n, s.o, l}, {s.o * l, l, 1}},
                          View{bias.tensor, {s.o}, {bias.strides[1]}}, true);
}

Expected<Tensor> conv_forward_subsampled(const Tensor& x, const Tensor& weight, const View& bias,
                                         const Window& w, const ConvShape& s, DType compute,
                                         const TensorMeta& out) {
  TESSEL_ASSIGN_OR_RETURN(Tensor xs, subsample(x, w, s, compute));
  const TapGrid g = subsampled_grid(s);
  TESSEL_ASSIGN_OR_RETURN(Tensor wc, contiguous_on_device(weight));
  TESSEL_ASSIGN_OR_RETURN(Tensor y, empty_like_device(out.shape, out.dtype, x));
  if (s.groups == 1 && pointwise_pays(s.o, compute)) {
    TESSEL_TRY(pointwise_forward(xs, wc, bias, s, y));
    return y;
  }
  TESSEL_TRY(launch_implicit(weight_taps(wc, s.groups, false),
                             tap_view(xs, g, s.n, s.c, s.groups, false),
                             store_target(y, g, s.groups), bias, true, false, kPointwise, g, 0, 0));
  return y;
}

Expected<Tensor> conv_forward_implicit(const Tensor& x, const Tensor& weight, const View& bias,
                                       const Window& w, const ConvShape& s, DType compute,
                                       const TensorMeta& out) {
  if (subsamples_forward(w, s)) return conv_forward_subsampled(x, weight, bias, w, s, compute, out);
  if (columns_pay(w, s)) return conv_forward_columns(x, weight, bias, w, s, out);
  const TapGrid g = forward_grid(w, s);
  Tensor input = x;
  if (!g.direct) {
    TESSEL_ASSIGN_OR_RETURN(input, relayout(x, compute, g, w.sh, w.sw, w.ph, w.pw));
  } else {
    TESSEL_ASSIGN_OR_RETURN(input, contiguous_on_device(x));
  }
  TESSEL_ASSIGN_OR_RETURN(Tensor wc, contiguous_on_device(weight));
  const View taps = weight_taps(wc, s.groups, false);
  TESSEL_ASSIGN_OR_RETURN(Tensor y, empty_like_device(out.shape, out.dtype, x));
  if (s.groups == 1 && pointwise_pays(s.o, compute)) {
    if (g.direct) {
      TESSEL_TRY(pointwise_forward(input, wc, bias, s, y));
      return y;
    }
    if (folds_images(x, g, w.sh, w.sw, w.ph, w.pw, 1)) {
      const View folded{input, {1, s.c, s.n * s.l()}, {0, relaid_channel_stride(g, s.n), 1}};
      TESSEL_TRY(launch_pointwise_folded(View{wc, {s.o, s.c}, {s.c, 1}}, folded, y,
                                         View{bias.tensor, {s.o}, {bias.strides[1]}}, true));
      return y;
    }
  }
  TESSEL_TRY(launch_implicit(taps, tap_view(input, g, s.n, s.c, s.groups, false),
                             store_target(y, g, s.groups), bias, true, false, w, g, 0, 0));
  return y;
}

// Whether the weight gradient is computed transposed (dW^T = cols G^T): when the columns have
// fewer rows than the output has channels, as in a first layer (9 rows for 32 channels), whose
// dW rows would fill a quarter of a 12 x 32 CPU micro-tile.
bool weight_grad_swapped(const ConvShape& s) {
  return s.k < s.o / s.groups;
}

// How many splits of the batch the weight-gradient kernel sums separately: enough blocks for
// every thread (about four each), never more splits than images.
int64_t weight_grad_splits(const ConvShape& s, const Tensor& like, bool swapped) {
  const bool cpu = like.device()->kind() == DeviceKind::kCpu;
  const int64_t bm = cpu ? 192 : 32, bn = cpu ? 256 : 32;
  const int64_t rows = swapped ? s.k : s.o / s.groups, cols = swapped ? s.o / s.groups : s.k;
  const int64_t blocks = ceil_div(rows, bm) * ceil_div(cols, bn) * s.groups;
  const int64_t want = cpu ? 4 * ThreadPool::global().num_threads() : 64;
  // A divisor of the batch: the kernel's copies bound only the tile dimensions, so a last split
  // running past the batch would read images that do not exist.
  int64_t splits = std::clamp<int64_t>(ceil_div(want, blocks), 1, s.n);
  while (s.n % splits != 0)
    --splits;
  return splits;
}

// The output gradient g at the positions of the forward's grid, zeros at those it computes and
// drops: the [1, G, O / G, N plane] operand of the weight gradient's gemms.
struct GradOnGrid {
  Tensor buf;
  View view;
};
Expected<GradOnGrid> grad_on_grid(const Tensor& g, const TapGrid& grid, const ConvShape& s,
                                  DType compute) {
  TapGrid on_grid;
  on_grid.hh = grid.hh;
  on_grid.ww = grid.ww;
  TESSEL_ASSIGN_OR_RETURN(Tensor dy, relayout(g, compute, on_grid, 1, 1, 0, 0));
  const int64_t og = s.o / s.groups, stride = relaid_channel_stride(on_grid, s.n);
  return GradOnGrid{dy,
                    View{dy, {1, s.groups, og, s.n * grid.plane()}, {0, og * stride, stride, 1}}};
}

// conv_implicit_weight_grad: dW(t) = sum over positions of a [Z, G, og, positions] times the
// input's transposed tap views x_qk, split along the positions only as far as needed to keep
// every thread busy. The result is flat, [O, cg, taps].
Expected<Tensor> weight_grad_gemms(const View& a, const View& x_qk, int64_t positions,
                                   const Window& w, int64_t groups, int64_t og, int64_t cg,
                                   const Tensor& like, bool columns = false) {
  const int64_t taps = w.kh * w.kw, o = og * groups;
  const bool cpu = like.device()->kind() == DeviceKind::kCpu;
  // Windows of several taps on the CPU run transposed (conv_implicit_weight_grad_t: the input's
  // tap views read in place, the output gradient packed once for every tap instead of the input
  // transposed once per tap; `columns`: kh kw taps deep), with blocks fitted to the channels.
  // One tap keeps the plain form:
  // resnet50.layer4.1.conv1 (1x1, 2048 -> 512 over 7 x 7) ran 0.67 -> 0.56x oneDNN transposed
  // (bench conv, 1 thread, CPU clock).
  const bool transposed = cpu && (taps > 1 || columns);
  int64_t bm = cpu ? 192 : 64, bn = cpu ? 256 : 64;
  const int64_t bk = cpu ? 256 : 16;
  if (transposed) {
    bm = implicit_block_rows(cg);
    bn = block_fitted_to(og, 256);
  }
  const int64_t blocks = transposed ? ceil_div(cg, bm) * ceil_div(og, bn) * groups * taps
                                    : ceil_div(og, bm) * ceil_div(cg, bn) * groups * taps;
  const int64_t k_tiles = ceil_div(positions, bk);
  const int64_t want = cpu ? 4 * ThreadPool::global().num_threads() : 64;
  const int64_t per = ceil_div(k_tiles, std::clamp<int64_t>(ceil_div(want, blocks), 1, k_tiles));
  const int64_t splits = ceil_div(k_tiles, per);
  const int64_t m = o * cg * taps;
  TESSEL_ASSIGN_OR_RETURN(Tensor parts, empty_like_device({splits, m}, DType::kF32, like));
  if (transposed) {
    View x_nq = x_qk, a_qm = a;
    std::swap(x_nq.shape[6], x_nq.shape[7]);
    std::swap(x_nq.strides[6], x_nq.strides[7]);
    std::swap(a_qm.shape[2], a_qm.shape[3]);
    std::swap(a_qm.strides[2], a_qm.strides[3]);
    View out{parts, {splits, groups, taps, cg, og}, {m, og * cg * taps, 1, taps, cg * taps}};
    TESSEL_TRY(launch_kernel("conv_implicit_weight_grad_t",
                             {{"BM", std::to_string(bm)}, {"BN", std::to_string(bn)}},
                             {x_nq, a_qm, out, w.kw, w.dh, w.dw, w.sh, w.sw, per}));
  } else {
    View out{parts, {splits, groups, taps, og, cg}, {m, og * cg * taps, 1, cg * taps, taps}};
    TESSEL_TRY(launch_kernel("conv_implicit_weight_grad", {},
                             {a, x_qk, out, w.kw, w.dh, w.dw, w.sh, w.sw, per}));
  }
  if (splits == 1) return parts;
  TESSEL_ASSIGN_OR_RETURN(Tensor dw, empty_like_device({m}, DType::kF32, like));
  TESSEL_TRY(launch_kernel("sum_splits", {}, {View{parts, {splits, m}, {m, 1}}, dw}));
  return dw;
}

// The weight gradient [O, C / G, kh, kw] (f32, flat) of an implicit-gemm convolution: one gemm
// per tap over the forward's views of x and the output gradient g on the same position grid.
Expected<Tensor> weight_grad_implicit(const Tensor& x, const Tensor& g, const Window& w,
                                      const ConvShape& s, DType compute) {
  // Over small images (gemm_per_image_pays) a strided 1x1 runs on the implicit grid, whose
  // relayout of x and the output gradient folds the images into the positions (fold_images).
  const bool subsampled = subsamples(w) && gemm_per_image_pays(s.l(), 0);
  const TapGrid grid = subsampled ? subsampled_grid(s) : forward_grid(w, s, true);
  const int64_t og = s.o / s.groups, cg = s.c / s.groups;
  if (subsampled) {  // the forward's dense view of x (above), the output gradient as it is
    TESSEL_ASSIGN_OR_RETURN(Tensor xs, subsample(x, w, s, compute));
    TESSEL_ASSIGN_OR_RETURN(Tensor dy, contiguous_on_device(g));
    const int64_t positions = s.l();
    View a{dy, {s.n, s.groups, og, positions}, {s.o * positions, og * positions, positions, 1}};
    return weight_grad_gemms(a, tap_view(xs, grid, s.n, s.c, s.groups, true), positions, kPointwise,
                             s.groups, og, cg, x);
  }
  if (columns_pay(w, s)) {
    // Over small images, as the forward: one gemm dW [O, C / G kh kw] = dY cols^T over every
    // image's positions, not one per tap over the grid's (36 positions per 16 outputs for a
    // 3x3 over 4 x 4 images).
    const int64_t q = s.n * s.l();
    TESSEL_ASSIGN_OR_RETURN(Tensor cols, columns(x, w, s));
    TESSEL_ASSIGN_OR_RETURN(GradOnGrid dy, grad_on_grid(g, column_grid(s), s, compute));
    const View cols_qk{cols, {1, s.groups, 1, 1, 1, 1, q, s.k}, {0, s.k * q, 0, 0, 0, 0, 1, q}};
    // Transposed (weight_grad_gemms) over 1,024 or more positions: bench conv, 1 thread, CPU
    // clock, two rounds, tessel GFLOP/s against the plain form: resnet50.layer3.1.conv2 (1,568
    // positions) 67-71 / 59-62, resnet18.layer3.0.conv2 (2,048) 67-68 / 55-56; fewer were
    // slower, resnet50.layer4.1.conv2 (392) 51-52 / 57-58, resnet18.layer4.0.conv2 (512) 50-57 /
    // 60-61.
    return weight_grad_gemms(dy.view, cols_qk, q, kPointwise, s.groups, og, s.k, x, q >= 1024);
  }
  if (grid.direct) {
    TESSEL_ASSIGN_OR_RETURN(Tensor input, contiguous_on_device(x));
    TESSEL_ASSIGN_OR_RETURN(Tensor dy, contiguous_on_device(g));
    const int64_t positions = s.l();
    View a{dy, {s.n, s.groups, og, positions}, {s.o * positions, og * positions, positions, 1}};
    return weight_grad_gemms(a, tap_view(input, grid, s.n, s.c, s.groups, true), positions, w,
                             s.groups, og, cg, x);
  }
  TESSEL_ASSIGN_OR_RETURN(Tensor input, relayout(x, compute, grid, w.sh, w.sw, w.ph, w.pw));
  TESSEL_ASSIGN_OR_RETURN(GradOnGrid dy, grad_on_grid(g, grid, s, compute));
  return weight_grad_gemms(dy.view, tap_view(input, grid, s.n, s.c, s.groups, true),
                           s.n * grid.plane(), w, s.groups, og, cg, x);
}

// ---- stems: few input channels, a wide window (the CPU) ----
//
// With fewer than 16 input channels (an RGB stem: 3) each tap's gemm is too shallow for the
// micro-kernel. Unfolding the window's columns into channels (relayout's `unfold`) makes the
// layer a kh x 1 convolution over C kw channels (21 for a 7x7 RGB stem), deep enough, without
// writing im2col's kh kw shifted copies of the input: the relaid buffer holds kw of them. The
// weights go as [O, kh, C, kw] (a small permuted copy), so that tap i's [O, C kw] matrix has
// unit stride; the weight gradient reads the same planes (weight_grad_unfolded). Without
// dilation, and where a padded row fits conv_unfold, the algorithm runs over row-unfolded input
// instead (ops/conv_stem.h: the whole window in one gemm per output row; stem_rows below). The
// input gradient runs over columns (input_grad_few_rows; a network's stem needs none, but a stem
// elsewhere may).

// Whether a layer runs unfolded on this device.
bool runs_unfolded(const Tensor& like, const Window& w, const ConvShape& s) {
  return conv_can_unfold(s.groups, w.kw, w.dw) && s.c < 16 && implicit_gemm(like, s.c * w.kw);
}

// The unfolded layer: its kh x 1 window, shape, grid and relaid input.
struct Unfolded {
  Window w;
  ConvShape s;
  TapGrid grid;
  Tensor input;
};
Expected<Unfolded> unfold(const Tensor& x, const Window& w, const ConvShape& s, DType compute) {
  Unfolded u{Window{w.kh, 1, w.sh, 1, w.ph, 0, w.dh, 1}, s, {}, {}};
  u.s.c = s.c * w.kw;
  u.grid = forward_grid(u.w, u.s);
  TESSEL_ASSIGN_OR_RETURN(u.input, relayout(x, compute, u.grid, w.sh, w.sw, w.ph, w.pw, w.kw));
  return u;
}

Expected<Tensor> conv_forward_unfolded(const Tensor& x, const Tensor& weight, const View& bias,
                                       const Window& w, const ConvShape& s, DType compute,
                                       const TensorMeta& out) {
  TESSEL_ASSIGN_OR_RETURN(Unfolded u, unfold(x, w, s, compute));
  TESSEL_ASSIGN_OR_RETURN(Tensor permuted, weight.permute({0, 2, 1, 3}));
  TESSEL_ASSIGN_OR_RETURN(Tensor wp, contiguous_on_device(permuted));  // [O, kh, C, kw]
  View taps{wp, {1, w.kh, s.o, u.s.c}, {0, u.s.c, w.kh * u.s.c, 1}};
  TESSEL_ASSIGN_OR_RETURN(Tensor y, empty_like_device(out.shape, out.dtype, x));
  // The grid is as wide as the output (no column taps), so one image's outputs are the first L
  // positions of its plane: the launch runs per image over those alone (one grid plane each, the
  // last rows of the plane only read) and stores them densely, not element by element.
  View input = tap_view(u.input, u.grid, s.n, u.s.c, 1, false);
  input.shape[0] = s.n;
  input.strides[0] = u.grid.plane();
  input.shape[7] = s.l();
  const StoreTarget dense{View{y, {s.n, 1, s.o, s.l()}, {s.o * s.l(), 0, s.l(), 1}}, true};
  TESSEL_TRY(launch_implicit(taps, input, dense, bias, true, false, u.w, u.grid, 0, 0));
  return y;
}

// The weight gradient of a stem over the forward's unfolded input: one gemm per row tap i,
// dW(i) [O, C kw] = dY U(i)^T over each image's L output positions (dY read in place, the unfolded
// planes per image as the forward reads them), run transposed by weight_grad_gemms (U(i)'s rows
// read in place, dY^T packed once for every tap). im2col's columns, kh kw copies of the strided
// input (59 MB for resnet50.conv1), were written and read back: a third of the pass (perf).
Expected<Tensor> weight_grad_unfolded(const Tensor& x, const Tensor& g, const Window& w,
                                      const ConvShape& s, DType compute) {
  TESSEL_ASSIGN_OR_RETURN(Unfolded u, unfold(x, w, s, compute));
  View x_qk = tap_view(u.input, u.grid, s.n, u.s.c, 1, true);
  x_qk.shape[0] = s.n;
  x_qk.strides[0] = u.grid.plane();
  x_qk.shape[6] = s.l();
  TESSEL_ASSIGN_OR_RETURN(Tensor dy, contiguous_on_device(g));
  const View a{dy, {s.n, 1, s.o, s.l()}, {s.o * s.l(), 0, s.l(), 1}};
  // [O, C kw, kh] = [O, C, kw, kh], turned to [O, C, kh, kw].
  TESSEL_ASSIGN_OR_RETURN(Tensor flat, weight_grad_gemms(a, x_qk, s.l(), u.w, 1, s.o, u.s.c, x));
  TESSEL_ASSIGN_OR_RETURN(Tensor dw, flat.reshape({s.o, s.c, w.kw, w.kh}));
  TESSEL_ASSIGN_OR_RETURN(Tensor turned, dw.permute({0, 1, 3, 2}));
  return contiguous_on_device(turned);
}

// Whether an unfolded layer runs over row-unfolded input (ops/conv_stem.h: the whole window in
// one gemm per output row) rather than as the kh x 1 convolution above: without dilation, rows
// conv_unfold holds. bench conv, 1 thread, CPU clock: see docs/CONV.md.
StemWindow stem_window(const Window& w) {
  return StemWindow{w.kh, w.kw, w.sh, w.sw, w.ph, w.pw};
}
bool stem_rows(const Window& w, const ConvShape& s, int64_t width) {
  return stem_rows_fit(stem_window(w), s.groups, w.dh, w.dw, width, s.ow);
}

// The input gradient of a strided 1x1 without padding, one gemm per image over the output
// gradient read in place (a grid plane per image, as the forward's subsampled input), each
// image's dX = W^T dY stored at the positions (oh sh, ow sw) of a zeroed dX. The implicit grid
// relaid the output gradient channel-major first (7.5% of resnet50.layer2.0.downsample.0's
// input gradient, perf, 1 thread). Small images keep it where gemm_per_image_pays says so.
bool input_grad_subsamples(const Window& w, const ConvShape& s) {
  return subsamples(w) && gemm_per_image_pays(s.l(), s.c / s.groups);
}

Expected<Tensor> input_grad_subsampled(const Tensor& g, const Tensor& weight, const ConvShape& s,
                                       const Window& w, const Shape& x_shape) {
  TapGrid grid;
  grid.direct = true;
  grid.hh = s.oh;
  grid.ww = s.ow;
  TESSEL_ASSIGN_OR_RETURN(Tensor dy, contiguous_on_device(g));
  TESSEL_ASSIGN_OR_RETURN(Tensor wc, contiguous_on_device(weight));
  TESSEL_ASSIGN_OR_RETURN(Tensor dx, Tensor::zeros(x_shape, DType::kF32, g.device()));
  const int64_t cg = s.c / s.groups, hw = x_shape[2] * x_shape[3];
  // Grid position q of image z is output (q / ow, q % ow), stored at dX[z, c, q / ow sh,
  // q % ow sw] (launch_implicit's oy = sh, ox = sw for a transposed launch).
  const StoreTarget out{View{dx, {s.n, s.groups, cg, hw}, {s.c * hw, cg * hw, hw, 1}}, false,
                        x_shape[2], x_shape[3], s.c * hw};
  View no_bias{dx, {s.groups, cg}, {0, 0}};  // unread with BIAS = 0
  TESSEL_TRY(launch_implicit(weight_taps(wc, s.groups, true),
                             tap_view(dy, grid, s.n, s.o, s.groups, false), out, no_bias, false,
                             true, w, grid, 0, 0, Phases{1, 1, true}));
  return dx;
}

// Whether a strided input gradient runs both column phases of dX in one block
// (conv_input_grad_pairs, kernels/conv_strided.tile): column stride 2, rows of 16 and more, so
// that a grid row's run of dX is stored in whole unmasked pieces (16 or 32 elements). bench conv,
// 1 thread, CPU clock, two rounds against main at load ~5: 56 x 56 and 32 x 32 inputs 0.52-0.61
// -> 0.68-0.75x oneDNN, 28 x 28 0.71-0.75 -> 0.73-0.76, 16 x 16 level (0.61-0.66); over 14 x 14
// and 8 x 8 (masked pieces) it was slower (0.73-0.74 against 0.78-0.80x at 14 x 14).
bool input_grad_pairs(const Window& w, const Shape& x_shape, bool one_phase) {
  return w.sw == 2 && !one_phase && x_shape[3] >= 16;
}

// The input gradient [N, C, H, W] (f32) of an implicit-gemm convolution: conv_implicit run
// transposed over the output gradient g, padded so that every tap reads inside it.
Expected<Tensor> input_grad_implicit(const Tensor& g, const Tensor& weight, const Window& w,
                                     const ConvShape& s, const Shape& x_shape, DType compute) {
  if ((columns_pay(w, s) && unit_strides(w)) || input_grad_few_rows(w, s))
    return input_grad_columns(g, weight, w, s, x_shape, compute);
  if (input_grad_subsamples(w, s)) return input_grad_subsampled(g, weight, s, w, x_shape);
  const TransposedGrid t = input_grad_grid(w, x_shape[2], x_shape[3], s.c / s.groups);
  Tensor dy = g;
  if (t.grid.direct) {
    TESSEL_ASSIGN_OR_RETURN(dy, contiguous_on_device(g));
  } else {
    TESSEL_ASSIGN_OR_RETURN(dy, relayout(g, compute, t.grid, 1, 1, t.top, t.left));
  }
  TESSEL_ASSIGN_OR_RETURN(Tensor wc, contiguous_on_device(weight));
  if (unit_strides(w) && w.kh == 1 && w.kw == 1 && w.ph == 0 && w.pw == 0 && s.groups == 1 &&
      pointwise_pays(s.c, compute)) {
    // dX = W^T dY per image, or over the images folded (ops/conv_pointwise.h), the weights read
    // transposed.
    TESSEL_ASSIGN_OR_RETURN(Tensor dx, empty_like_device(x_shape, DType::kF32, g));
    const View wt{wc, {s.c, s.o}, {1, s.c}}, no_bias{dx, {s.c}, {0}};
    const int64_t l = s.l();
    if (t.grid.direct) {
      TESSEL_TRY(launch_pointwise(wt, View{dy, {s.n, s.o, l}, {s.o * l, l, 1}},
                                  View{dx, {s.n, s.c, l}, {s.c * l, l, 1}}, no_bias, false));
    } else {
      const View folded{dy, {1, s.o, s.n * l}, {0, relaid_channel_stride(t.grid, s.n), 1}};
      TESSEL_TRY(launch_pointwise_folded(wt, folded, dx, no_bias, false));
    }
    return dx;
  }
  // A strided 1x1 without padding reaches output phase (0, 0) alone: that one plane runs, with
  // the weight tiles shared among blocks, into a zeroed dX (the other phases' planes would
  // store zeros element by element, and make every block pack its own weight tiles).
  const bool one_phase = !unit_strides(w) && w.kh == 1 && w.kw == 1 && w.ph == 0 && w.pw == 0;
  View taps = weight_taps(wc, s.groups, true);
  if (!unit_strides(w) && !one_phase) {
    // Where every block packs its own weight tiles (the taps are tested per output phase), they
    // are copied to [G, R, C / G, O / G] first, rows of K = O / G contiguous, which
    // conv_implicit reads in place (gemm_direct_a) and packs none of. Packing them per block,
    // gathered O / G rows apart, was a third of a stride-2 3x3 input gradient's time (perf:
    // resnet50.layer4.0.conv2); the copy is one pass over the weights.
    const int64_t og = s.o / s.groups, cr = s.c / s.groups * w.kh * w.kw, r = w.kh * w.kw;
    TESSEL_ASSIGN_OR_RETURN(Tensor copy, empty_like_device({s.groups, cr, og}, wc.dtype(), wc));
    TESSEL_TRY(launch_kernel("conv_weight_transpose", {{"T", dtype_name(wc.dtype())}},
                             {View{wc, {s.groups, og, cr}, {og * cr, cr, 1}}, copy}));
    taps = View{copy, {s.groups, r, s.c / s.groups, og}, {cr * og, og, r * og, 1}};
  }
  if (input_grad_pairs(w, x_shape, one_phase)) {
    TESSEL_ASSIGN_OR_RETURN(Tensor dx, empty_like_device(x_shape, DType::kF32, g));
    const StoreTarget out = store_target(dx, t.grid, s.groups);
    TESSEL_TRY(launch_kernel(
        "conv_input_grad_pairs",
        {{"BM", std::to_string(implicit_block_rows(s.c / s.groups))},
         {"RW", x_shape[3] >= 32 ? "16" : "8"}},
        {taps, tap_view(dy, t.grid, s.n, s.o, s.groups, false), out.view, w.kw, w.dh, w.dw, w.sh,
         w.ph, w.pw, t.top, t.left, w.sh, t.grid.ww, t.grid.plane(), out.yh, out.yw, out.ostride}));
    return dx;
  }
  Phases phases{w.sh, w.sw, unit_strides(w)};
  Tensor dx;
  if (one_phase) {
    phases = Phases{1, 1, true};
    TESSEL_ASSIGN_OR_RETURN(dx, Tensor::zeros(x_shape, DType::kF32, g.device()));
  } else {
    TESSEL_ASSIGN_OR_RETURN(dx, empty_like_device(x_shape, DType::kF32, g));
  }
  View no_bias{dx, {s.groups, s.c / s.groups}, {0, 0}};  // unread with BIAS = 0
  TESSEL_TRY(launch_implicit(taps, tap_view(dy, t.grid, s.n, s.o, s.groups, false),
                             store_target(dx, t.grid, s.groups), no_bias, false, true, w, t.grid,
                             t.top, t.left, phases));
  return dx;
}

// The algorithm of one conv2d pass at `point` (ops/conv_algorithms.h): the op's `rule` unless a
// forced choice or the tuning database says otherwise (where it applies: off the CPU im2col, or
// Winograd); im2col under TESSEL_CONV=im2col.
Expected<std::string> pass_algorithm(const AlgorithmPoint& point, const Tensor& like,
                                     const Window& w, const ConvShape& s, int64_t h, int64_t wd,
                                     const std::string& rule) {
  if (im2col_forced()) return std::string("im2col");
  const std::vector<int64_t> sizes{s.n,  s.c,  h,    wd,   s.o,  w.kh, w.kw,
                                   w.sh, w.sw, w.ph, w.pw, w.dh, w.dw, s.groups};
  return choose_algorithm(point, like.device(), like.dtype(), sizes, rule);
}

Expected<Tensor> conv_forward(const std::vector<Tensor>& in, const Attrs& a,
                              const TensorMeta& out) {
  TESSEL_ASSIGN_OR_RETURN(DType compute, conv_compute(in[0], in[1], a));
  TESSEL_ASSIGN_OR_RETURN(Tensor x, cast(in[0], compute));
  TESSEL_ASSIGN_OR_RETURN(Tensor weight, cast(in[1], compute));
  TESSEL_ASSIGN_OR_RETURN(Tensor bias_f32, cast(in[2], DType::kF32));
  TESSEL_ASSIGN_OR_RETURN(Window w, window_of("conv2d", a, weight.size(2), weight.size(3)));
  const ConvShape s = conv_shape(x, weight, groups_of(a), w);
  const int64_t og = s.o / s.groups;
  View bias{bias_f32, {s.groups, og}, {og * bias_f32.strides()[0], bias_f32.strides()[0]}};
  const std::string rule = runs_unfolded(x, w, s)                      ? "unfolded"
                           : winograd_rule(x, w, s, s.c, s.o, compute) ? "winograd"
                           : implicit_gemm(x, s.c / s.groups)          ? "implicit"
                                                                       : "im2col";
  TESSEL_ASSIGN_OR_RETURN(std::string algorithm, pass_algorithm(conv_forward_point(), x, w, s,
                                                                x.size(2), x.size(3), rule));
  if (algorithm == "winograd")
    return winograd_forward(x, weight, bias_f32, true, w.ph, w.pw, out.shape);
  if (algorithm == "unfolded" && stem_rows(w, s, x.size(3)))
    return stem_forward_rows(x, weight, bias_f32, stem_window(w), out.shape);
  if (algorithm == "unfolded") return conv_forward_unfolded(x, weight, bias, w, s, compute, out);
  if (algorithm == "implicit") return conv_forward_implicit(x, weight, bias, w, s, compute, out);
  TESSEL_ASSIGN_OR_RETURN(Tensor cols, im2col(x, w, s));
  TESSEL_ASSIGN_OR_RETURN(Tensor y, empty_like_device(out.shape, out.dtype, x));
  TESSEL_ASSIGN_OR_RETURN(Tensor wc, contiguous_on_device(weight));
  View a_view{wc, {s.groups, og, s.k}, {og * s.k, s.k, 1}};
  View b_view{cols, {s.n, s.groups, s.k, s.l()}, {s.groups * s.k * s.l(), s.k * s.l(), s.l(), 1}};
  KernelParams params = conv_gemm_params(y);
  params.emplace("BIAS", "1");
  TESSEL_TRY(launch_kernel("conv_gemm", params, {a_view, b_view, grouped(y, s), bias}));
  return y;
}

Expected<std::vector<Tensor>> conv_backward(const BackwardArgs& b) {
  TESSEL_ASSIGN_OR_RETURN(DType compute, conv_compute(b.inputs[0], b.inputs[1], b.attrs));
  TESSEL_ASSIGN_OR_RETURN(Tensor x, cast(b.inputs[0], compute));
  TESSEL_ASSIGN_OR_RETURN(Tensor weight, cast(b.inputs[1], compute));
  TESSEL_ASSIGN_OR_RETURN(Window w, window_of("conv2d", b.attrs, weight.size(2), weight.size(3)));
  const ConvShape s = conv_shape(x, weight, groups_of(b.attrs), w);
  const int64_t og = s.o / s.groups;
  TESSEL_ASSIGN_OR_RETURN(Tensor g_compute, cast(b.grad_output, compute));
  TESSEL_ASSIGN_OR_RETURN(Tensor g, contiguous_on_device(g_compute));
  const View g_view = grouped(g, s);
  std::vector<Tensor> grads(3);
  std::string weight_algorithm, input_algorithm;
  if (b.needs_grad[1]) {
    TESSEL_ASSIGN_OR_RETURN(weight_algorithm,
                            pass_algorithm(conv_weight_grad_point(), x, w, s, x.size(2), x.size(3),
                                           runs_unfolded(x, w, s)             ? "unfolded"
                                           : implicit_gemm(x, s.c / s.groups) ? "implicit"
                                                                              : "im2col"));
  }
  if (b.needs_grad[0]) {
    const std::string rule = winograd_rule(x, w, s, s.o, s.c, compute) ? "winograd"
                             : implicit_gemm(x, og)                    ? "implicit"
                                                                       : "im2col";
    TESSEL_ASSIGN_OR_RETURN(input_algorithm, pass_algorithm(conv_input_grad_point(), x, w, s,
                                                            x.size(2), x.size(3), rule));
  }
  if (weight_algorithm == "implicit" || weight_algorithm == "unfolded") {
    TESSEL_ASSIGN_OR_RETURN(
        Tensor dw, weight_algorithm != "unfolded" ? weight_grad_implicit(x, g, w, s, compute)
                   : stem_rows(w, s, x.size(3))   ? stem_weight_grad_rows(x, g, stem_window(w))
                                                  : weight_grad_unfolded(x, g, w, s, compute));
    TESSEL_ASSIGN_OR_RETURN(Tensor dw4, reshape(dw, weight.shape()));
    TESSEL_ASSIGN_OR_RETURN(grads[1], cast(dw4, b.input_meta[1].dtype));
  } else if (b.needs_grad[1]) {
    // dW[g] = sum_n G[n, g] cols[n, g]^T over S splits of the batch (or dW^T = sum_n cols[n, g]
    // G[n, g]^T, see conv_weight_grad).
    TESSEL_ASSIGN_OR_RETURN(Tensor cols, im2col(x, w, s));
    const bool swap = weight_grad_swapped(s);
    const int64_t splits = weight_grad_splits(s, x, swap), per = s.n / splits;
    const int64_t cs = s.groups * s.k * s.l();  // image stride of the columns
    View cols_t{cols, {s.n, s.groups, s.l(), s.k}, {cs, s.k * s.l(), 1, s.l()}};
    View cols_v{cols, {s.n, s.groups, s.k, s.l()}, {cs, s.k * s.l(), s.l(), 1}};
    const Strides& gs = g.strides();
    View g_t{g, {s.n, s.groups, s.l(), og}, {gs[0], og * gs[1], gs[3], gs[1]}};
    TESSEL_ASSIGN_OR_RETURN(Tensor parts,
                            empty_like_device({splits, s.groups, og, s.k}, DType::kF32, x));
    View out =
        swap ? View{parts, {splits, s.groups, s.k, og}, {s.groups * og * s.k, og * s.k, 1, s.k}}
             : View{parts, parts.shape(), parts.strides()};
    TESSEL_TRY(launch_kernel("conv_weight_grad", conv_gemm_params(x),
                             {swap ? cols_v : g_view, swap ? g_t : cols_t, out, per}));
    Tensor dw = parts;
    if (splits > 1) {
      const int64_t m = s.groups * og * s.k;
      TESSEL_ASSIGN_OR_RETURN(dw, empty_like_device({m}, DType::kF32, x));
      TESSEL_TRY(launch_kernel("sum_splits", {}, {View{parts, {splits, m}, {m, 1}}, dw}));
    }
    TESSEL_ASSIGN_OR_RETURN(Tensor dw4, reshape(dw, weight.shape()));
    TESSEL_ASSIGN_OR_RETURN(grads[1], cast(dw4, b.input_meta[1].dtype));
  }
  if (b.needs_grad[2]) {
    TESSEL_ASSIGN_OR_RETURN(Tensor db, empty_like_device({s.o}, DType::kF32, x));
    View g3{g, {s.n, s.o, s.l()}, {g.strides()[0], g.strides()[1], 1}};
    TESSEL_TRY(launch_kernel("conv_bias_grad", {}, {g3, db}));
    TESSEL_ASSIGN_OR_RETURN(grads[2], cast(db, b.input_meta[2].dtype));
  }
  if (input_algorithm == "winograd") {
    TESSEL_ASSIGN_OR_RETURN(Tensor dx, winograd_input_grad(g, weight, w.ph, w.pw, x.shape()));
    TESSEL_ASSIGN_OR_RETURN(grads[0], cast(dx, b.input_meta[0].dtype));
  } else if (input_algorithm == "implicit") {
    TESSEL_ASSIGN_OR_RETURN(Tensor dx, input_grad_implicit(g, weight, w, s, x.shape(), compute));
    TESSEL_ASSIGN_OR_RETURN(grads[0], cast(dx, b.input_meta[0].dtype));
  } else if (b.needs_grad[0]) {  // dcols[n, g] = W[g]^T G[n, g], folded back onto the input
    TESSEL_ASSIGN_OR_RETURN(Tensor wc, contiguous_on_device(weight));
    View wt{wc, {s.groups, s.k, og}, {og * s.k, 1, s.k}};
    TESSEL_ASSIGN_OR_RETURN(Tensor dcols,
                            empty_like_device({s.n, s.groups, s.k, s.l()}, DType::kF32, x));
    View dcols_view{
        dcols, {s.n, s.groups, s.k, s.l()}, {s.groups * s.k * s.l(), s.k * s.l(), s.l(), 1}};
    View no_bias{dcols, {s.groups, s.k}, {0, 0}};  // unread with BIAS = 0
    TESSEL_TRY(launch_kernel("conv_gemm", conv_gemm_params(x), {wt, g_view, dcols_view, no_bias}));
    TESSEL_ASSIGN_OR_RETURN(Tensor dx, empty_like_device(x.shape(), DType::kF32, x));
    const int64_t rows = s.groups * s.k;
    View dcols4{dcols, {s.n, rows, s.oh, s.ow}, {rows * s.l(), s.l(), s.ow, 1}};
    std::vector<KernelArg> args{dcols4, dx};
    for (KernelArg& a : window_args(w, true))
      args.push_back(a);
    TESSEL_TRY(launch_kernel("col2im", {{"STRIDED", unit_strides(w) ? "0" : "1"}}, args));
    TESSEL_ASSIGN_OR_RETURN(grads[0], cast(dx, b.input_meta[0].dtype));
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
                ow = w.out_w(wd), groups = groups_of(a), cg = c / groups, og = o / groups;
  RefTensor out{{n, o, oh, ow}, std::vector<double>(n * o * oh * ow)};
  for (int64_t b = 0; b < n; ++b)
    for (int64_t f = 0; f < o; ++f)
      for (int64_t y = 0; y < oh; ++y)
        for (int64_t x = 0; x < ow; ++x) {
          double s = in[2].values[f];
          for (int64_t cl = 0; cl < cg; ++cl)
            for (int64_t i = 0; i < w.kh; ++i)
              for (int64_t j = 0; j < w.kw; ++j) {
                int64_t iy = y * w.sh - w.ph + i * w.dh, ix = x * w.sw - w.pw + j * w.dw;
                if (iy < 0 || iy >= h || ix < 0 || ix >= wd) continue;
                const int64_t ch = f / og * cg + cl;
                s += in[0].values[((b * c + ch) * h + iy) * wd + ix] *
                     in[1].values[((f * cg + cl) * w.kh + i) * w.kw + j];
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

}  // namespace

void add_conv_ops(std::vector<OpDef>& ops) {
  ops.push_back(conv2d_op());
}

Expected<Tensor> conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias,
                        std::vector<int64_t> stride, std::vector<int64_t> padding,
                        std::vector<int64_t> dilation, int64_t groups) {
  return run("conv2d", {x, weight, bias},
             conv_attrs(std::move(stride), std::move(padding), std::move(dilation), groups));
}

Attrs conv_attrs(std::vector<int64_t> stride, std::vector<int64_t> padding,
                 std::vector<int64_t> dilation, int64_t groups) {
  return Attrs()
      .set("stride", std::move(stride))
      .set("padding", std::move(padding))
      .set("dilation", std::move(dilation))
      .set("groups", groups);
}
}  // namespace tessel::ops
