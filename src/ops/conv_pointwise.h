// 1x1 convolutions as one gemm per image over NCHW tensors read as they are
// (kernels/conv_pointwise.tile), for conv2d's CPU passes whose gemm has more rows than one block
// holds (ops/conv_ops.cpp): the forward of a 1x1 / stride 1 layer without padding, of a strided
// one over its subsampled input, and the input gradient of a 1x1 / stride 1 layer; over small
// images, the same passes over the images folded into the positions. Both operand
// tiles are packed once per launch and shared by the blocks; conv_implicit, which runs these
// passes otherwise, reads the image's tiles in place, once per block row.
#pragma once

#include "ops/kernel_cache.h"

namespace tessel::ops {

// The most bytes of packed input tiles one conv_pointwise launch holds (its workspace): the
// images go through in groups that fit, at least one a group.
inline constexpr int64_t kPointwiseWorkspaceBytes = int64_t{8} << 20;

// Whether a 1x1 pass whose gemm has `rows` rows per image (the forward: output channels; the
// input gradient: input channels) runs as conv_pointwise, its operands in `compute`.
bool pointwise_pays(int64_t rows, DType compute);

// Y[z] = A X[z] (+ bias) for z < Z: `a` the weights as [M, K] (any strides: the input gradient
// passes them transposed), `x` [Z, K, N], `y` [Z, M, N] with contiguous rows, `bias` [M] read
// only when `has_bias`. Where Z > 1, x's and y's first dimension is their tensors' first (the
// images go through in groups, as slices).
Status launch_pointwise(const View& a, const View& x, const View& y, const View& bias,
                        bool has_bias);

// The same over the images folded into the positions (conv_fold: x [K, N L], image b's
// positions at b L ... b L + L - 1, any row stride), for images of fewer than 196 positions:
// one gemm over every image's positions into a [M, N L] buffer, then copied (conv_fold) to
// y [N, M, L] (contiguous f32).
Status launch_pointwise_folded(const View& a, const View& x, const Tensor& y, const View& bias,
                               bool has_bias);

}  // namespace tessel::ops
