// A stem's convolution over row-unfolded input (see conv_stem.h). Kernels: conv_strided.tile's
// conv_unfold (the layout) and conv_stem_weight_grad, conv.tile's conv_gemm (the forward).
//
// Shapes: x [N, C, H, W], weight [O, C, kh, kw], y [N, O, OH, OW]; CK = C kw, K = kh CK (the
// gemm's depth: window row, channel, window column), R = (OH - 1) sh + kh rows of U per image.
#include "ops/conv_stem.h"

#include <algorithm>

#include "support/thread_pool.h"

namespace tessel::ops {
namespace {

// The widest padded input row conv_unfold holds in its fragment, for rows `row` wide.
int64_t unfold_block(int64_t row) {
  return row <= 64 ? 64 : 256;
}

// U [N, R, CK, OW] of x, in x's dtype: U[b, r, c kw + j, w] = X[b, c, r - ph, w sw + j - pw], 0
// in the padding. conv_unfold writes every element (image b's rows, each channel's kw copies).
Expected<Tensor> unfold_rows(const Tensor& x, const StemWindow& w, int64_t oh, int64_t ow) {
  const int64_t n = x.size(0), c = x.size(1), rows = (oh - 1) * w.sh + w.kh, ck = c * w.kw;
  TESSEL_ASSIGN_OR_RETURN(Tensor u, empty_like_device({n, rows, ck, ow}, x.dtype(), x));
  // conv_unfold's P[c, j, py, b, hh, ww] with one row phase (its sh = 1: row hh of U is padded
  // row hh) and hh running over U's rows.
  const View p{u, {c, w.kw, 1, n, rows, ow}, {w.kw * ow, ow, 0, rows * ck * ow, ck * ow, 1}};
  TESSEL_TRY(launch_kernel("conv_unfold",
                           {{"U", dtype_name(x.dtype())},
                            {"BW", std::to_string(unfold_block(x.size(3) + 2 * w.pw))},
                            {"SW", std::to_string(w.sw)},
                            {"KW", std::to_string(w.kw)}},
                           {x, p, int64_t{1}, w.ph, w.pw}));
  return u;
}

// Block sizes fitted to a gemm's rows (64 or 128 where one block holds them, as conv_ops.cpp's
// implicit_block_rows) and to its columns (a row's OW, in whole 16-column panels).
std::string rows_block(int64_t m) {
  return m <= 64 ? "64" : m <= 128 ? "128" : "192";
}
std::string columns_block(int64_t n) {
  return std::to_string(std::min<int64_t>((n + 15) / 16 * 16, 256));
}

}  // namespace

bool stem_rows_fit(const StemWindow& w, int64_t groups, int64_t dh, int64_t dw, int64_t width,
                   int64_t ow) {
  const int64_t row = width + 2 * w.pw, bw = unfold_block(row);
  // conv_unfold: the padded row in its fragment, every copy's last read inside it.
  return groups == 1 && dh == 1 && dw == 1 && w.kw <= 8 && row <= bw &&
         (ow - 1) * w.sw + w.kw <= bw;
}

Expected<Tensor> stem_forward_rows(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                   const StemWindow& w, const Shape& y_shape) {
  const int64_t n = x.size(0), c = x.size(1), o = weight.size(0), oh = y_shape[2], ow = y_shape[3];
  const int64_t ck = c * w.kw, k = w.kh * ck, rows = (oh - 1) * w.sh + w.kh;
  TESSEL_ASSIGN_OR_RETURN(Tensor u, unfold_rows(x, w, oh, ow));
  TESSEL_ASSIGN_OR_RETURN(Tensor permuted, weight.permute({0, 2, 1, 3}));
  TESSEL_ASSIGN_OR_RETURN(Tensor wp, contiguous_on_device(permuted));  // [O, kh, C, kw]
  TESSEL_ASSIGN_OR_RETURN(Tensor y, empty_like_device(y_shape, DType::kF32, x));
  // conv_gemm's groups are the output rows: the weights the same for each (stride 0), row oh
  // of image b reading U from row oh sh on and storing Y[b, :, oh, :].
  const View a{wp, {oh, o, k}, {0, k, 1}};
  const View b{u, {n, oh, k, ow}, {rows * ck * ow, w.sh * ck * ow, ow, 1}};
  const View out{y, {n, oh, o, ow}, {o * oh * ow, ow, oh * ow, 1}};
  const View bias_rows{bias, {oh, o}, {0, bias.strides()[0]}};
  TESSEL_TRY(launch_kernel("conv_gemm",
                           {{"BIAS", "1"}, {"BM", rows_block(o)}, {"BN", columns_block(ow)}},
                           {a, b, out, bias_rows}));
  return y;
}

Expected<Tensor> stem_weight_grad_rows(const Tensor& x, const Tensor& g, const StemWindow& w) {
  const int64_t n = x.size(0), c = x.size(1), o = g.size(1), oh = g.size(2), ow = g.size(3);
  const int64_t ck = c * w.kw, k = w.kh * ck, rows = (oh - 1) * w.sh + w.kh;
  TESSEL_ASSIGN_OR_RETURN(Tensor u, unfold_rows(x, w, oh, ow));
  TESSEL_ASSIGN_OR_RETURN(Tensor dy, contiguous_on_device(g));
  // The N OH output rows split among about four blocks per thread (one block holds every
  // output: K = 147 by O = 64), a divisor of them so that no split reads past the last row.
  const int64_t total = n * oh;
  int64_t splits = std::clamp<int64_t>(4 * ThreadPool::global().num_threads(), 1, total);
  while (total % splits != 0)
    --splits;
  TESSEL_ASSIGN_OR_RETURN(Tensor parts, empty_like_device({splits, k, o}, DType::kF32, x));
  const View xs{u, {n, oh, k, ow}, {rows * ck * ow, w.sh * ck * ow, ow, 1}};
  const View dyt{dy, {n, oh, ow, o}, {o * oh * ow, ow, 1, oh * ow}};
  TESSEL_TRY(launch_kernel("conv_stem_weight_grad", {{"BM", rows_block(k)}, {"BN", rows_block(o)}},
                           {xs, dyt, parts, total / splits}));
  Tensor sum = parts;
  if (splits > 1) {
    TESSEL_ASSIGN_OR_RETURN(sum, empty_like_device({k * o}, DType::kF32, x));
    TESSEL_TRY(launch_kernel("sum_splits", {}, {View{parts, {splits, k * o}, {k * o, 1}}, sum}));
  }
  // dW'^T [kh, C, kw, O] turned to [O, C, kh, kw].
  TESSEL_ASSIGN_OR_RETURN(Tensor flat, sum.reshape({w.kh, c, w.kw, o}));
  TESSEL_ASSIGN_OR_RETURN(Tensor turned, flat.permute({3, 1, 0, 2}));
  return copy_on_device(turned);
}

}  // namespace tessel::ops
