// Winograd convolution F(4x4, 3x3) for conv2d's 3x3 / stride 1 / dilation 1 layers of one group
// (kernels/winograd.tile): the weights and 6 x 6 input tiles are transformed, 36 batched gemms
// multiply them over the channels, and each 4 x 4 output tile is transformed back. 16 outputs
// cost 36 products per channel pair instead of 144 multiply-adds; the price is the transformed
// input and products in memory (2.25 times the input and the output) and an error of a few 1e-6
// of the output's scale in f32 (transform coefficients up to 8). conv2d runs it where its
// algorithm choice says "winograd" (ops/conv_algorithms.h): the forward, and the input
// gradient, which is the same convolution of the output gradient by the weights turned 180
// degrees and transposed, padded 2 - p. Operands may be f32, f16 or bf16; transforms and gemms
// run in f32.
#pragma once

#include "ops/kernel_util.h"

namespace tessel::ops {

// The most bytes the transformed input, the products and the transformed weights each take at
// once: the images go through in groups that fit (at least one image a group), the outputs in
// blocks (at least 8 channels a block). Whole-batch buffers were 2.25 times a layer's
// input and output on top of the activations (resnet50's peak RSS +53 MB, bench memory); 8 MiB
// groups also stay in L3 between the transform that writes them and the gemm that reads them.
inline constexpr int64_t kWinogradWorkspaceBytes = int64_t{8} << 20;

// y [N, O, OH, OW] (f32) = conv2d(x, weight, padding (ph, pw)) + bias, for x [N, C, H, W] and
// weight [O, C, 3, 3]; `bias` [O] is read only when `has_bias`.
Expected<Tensor> winograd_forward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                  bool has_bias, int64_t ph, int64_t pw, const Shape& y_shape,
                                  int64_t workspace_bytes = kWinogradWorkspaceBytes);

// dX [N, C, H, W] (f32) of that convolution from the output gradient g [N, O, OH, OW].
Expected<Tensor> winograd_input_grad(const Tensor& g, const Tensor& weight, int64_t ph, int64_t pw,
                                     const Shape& x_shape,
                                     int64_t workspace_bytes = kWinogradWorkspaceBytes);

// Whether conv2d runs a 3x3 / stride 1 pass as Winograd by default on the CPU in f32 (the
// algorithm choice's rule): `channels` deep (forward: C; input gradient: O) into `outputs`
// channels (O; C).
bool winograd_by_default(int64_t channels, int64_t outputs);

// How many convolutions (forwards or input gradients) this process has run as Winograd: `tessel
// bench conv` marks the rows that did, whose GFLOP/s count a direct convolution's work.
int64_t winograd_runs();

}  // namespace tessel::ops
