// 1x1 convolutions as one gemm per image over NCHW tensors read as they are (see the header).
#include "ops/conv_pointwise.h"

#include <algorithm>

#include "ops/kernel_util.h"

namespace tessel::ops {

// More rows than one 192-row block (conv_implicit's and conv_pointwise's on the CPU): there each
// of the image's X tiles is read by several block rows, which conv_implicit does in place each
// time (16 floats of each of up to 256 channel rows a plane apart per micro-kernel panel) and
// conv_pointwise packs once per launch. With one block row conv_implicit reads each tile once
// and the packed copy is a pass for nothing. bench conv, 1 thread, CPU clock, load 4-11, against
// conv_implicit in the same binary, two or three rounds: forwards of 256 to 2048 rows 0.56-0.73
// -> 0.67-0.85x oneDNN (resnet50.layer1.0.conv3, layer3.0.conv1, layer3.1.conv1,
// layer4.0.conv3 folded), layer3.0.downsample.0 0.59 -> 0.79-0.82, input gradients of 256 to
// 2048 rows 0.69-0.84 -> 0.77-0.88 (layer1.1.conv1, layer3.1.conv1, layer4.1.conv1 folded);
// packed over one block row (layer1.1.conv1's forward, 64 rows) 0.66-0.73 against 0.96-1.14 in
// place. f32 operands only: conv_implicit packs 16-bit tiles too (it reads only f32 ones in
// place), and those were not measured.
bool pointwise_pays(int64_t rows, DType compute) {
  return rows > 192 && compute == DType::kF32;
}

Status launch_pointwise(const View& a, const View& x, const View& y, const View& bias,
                        bool has_bias) {
  return launch_kernel("conv_pointwise", {{"BIAS", has_bias ? "1" : "0"}}, {a, x, y, bias});
}

// The gemm's [M, N L] result is stored densely, then unfolded by conv_fold read as [N, M, 1, L]
// (block: 16 rows of one image, each a run of L) into y seen as [M, N, 1, L]: conv_implicit's
// store of a folded grid computes each position's image, row and column (an index per element),
// and a fused epilogue would need that per element too.
Status launch_pointwise_folded(const View& a, const View& x, const Tensor& y, const View& bias,
                               bool has_bias) {
  const int64_t m = a.shape[0], n = y.size(0), l = y.size(2) * y.size(3), q = x.shape[2];
  TESSEL_ASSIGN_OR_RETURN(Tensor folded, empty_like_device({m, q}, DType::kF32, y));
  TESSEL_TRY(launch_pointwise(a, x, View{folded, {1, m, q}, {0, q, 1}}, bias, has_bias));
  return launch_kernel(
      "conv_fold", {{"U", dtype_name(y.dtype())}, {"BN", std::to_string(std::min<int64_t>(l, 64))}},
      {View{folded, {n, m, 1, l}, {l, q, l, 1}}, View{y, {m, n, 1, l}, {l, m * l, l, 1}}});
}

}  // namespace tessel::ops
