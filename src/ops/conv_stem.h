// A stem's convolution over row-unfolded input (the CPU): few input channels (an RGB stem: 3), a
// wide window, one group, no dilation. The input is written once as
//   U[b, r, c, j, w] = X[b, c, r - ph, w sw + j - pw]   (r over the padded rows the window reads)
// (kernels/conv_strided.tile `conv_unfold`), so that output row oh of image b reads U[b, oh sh]
// as one [C kh kw, OW] matrix whose rows are OW apart: window row i, channel c, column j is row
// (i C + c) kw + j, since row r + i of U follows row r at C kw OW elements. The forward is then
// one gemm per output row, Y[b, :, oh, :] = W' U[b, oh sh] (W' the weights as [O, kh, C, kw]),
// the whole window C kh kw deep (147 for a 7x7 RGB stem) in one accumulation, both operands read
// in place; the weight gradient dW'^T = sum over rows of U[b, oh sh] dY[b, :, oh, :]^T.
//
// The conv2d op takes it for the algorithm `unfolded` where it fits (stem_rows_fit); the earlier
// unfolded layout (conv_ops.cpp `unfold`: kw shifted copies, a kh x 1 convolution of C kw-deep
// taps) stays for what does not.
#pragma once

#include "ops/kernel_util.h"

namespace tessel::ops {

// A convolution window without dilation: kh x kw, strides (sh, sw), padding (ph, pw).
struct StemWindow {
  int64_t kh, kw, sh, sw, ph, pw;
};

// Whether a layer of `groups` groups with row and column dilations dh, dw over inputs `w` wide
// (and outputs `ow` wide) runs over row-unfolded input: one group, no dilation, and a padded row
// that conv_unfold holds in one fragment.
bool stem_rows_fit(const StemWindow& w, int64_t groups, int64_t dh, int64_t dw, int64_t width,
                   int64_t ow);

// y [N, O, OH, OW] (f32) = conv2d(x, weight) + bias for x [N, C, H, W] and weight [O, C, kh, kw]
// of the compute dtype (f32, bf16 or f16) and bias [O] (f32).
Expected<Tensor> stem_forward_rows(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                   const StemWindow& w, const Shape& y_shape);

// dW [O, C, kh, kw] (f32) of that convolution from the output gradient g [N, O, OH, OW] (of the
// compute dtype).
Expected<Tensor> stem_weight_grad_rows(const Tensor& x, const Tensor& g, const StemWindow& w);

}  // namespace tessel::ops
