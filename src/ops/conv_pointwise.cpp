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

// The images go through in groups whose packed X tiles (the launch's workspace: every tile of
// every image of the launch, 256 x 256 floats each, however shallow the layer) take at most
// kPointwiseWorkspaceBytes. A CPU kernel keeps its largest workspace for later launches, and
// whole-batch launches raised resnet50's peak RSS in bench train by 26 MB (1425.6 -> 1451.3:
// 13 tiles an image at layer1.0.conv3's forward and layer1.1.conv1's input gradient, 64 deep).
// A 256-deep tile for every depth keeps one kernel (one workspace) per bias setting; a K step
// fitted to the depth made one per depth, and the peak rose further (1467 MB).
Status launch_pointwise(const View& a, const View& x, const View& y, const View& bias,
                        bool has_bias) {
  constexpr int64_t kTile = 256;
  const int64_t images = x.shape[0], k = x.shape[1], n = x.shape[2];
  const int64_t per_image = ((n + kTile - 1) / kTile) * ((k + kTile - 1) / kTile) * kTile * kTile *
                            int64_t(sizeof(float));
  const int64_t group = std::clamp<int64_t>(kPointwiseWorkspaceBytes / per_image, 1, images);
  const KernelParams params{{"BIAS", has_bias ? "1" : "0"}};
  if (group == images) return launch_kernel("conv_pointwise", params, {a, x, y, bias});
  for (int64_t z0 = 0; z0 < images; z0 += group) {
    const int64_t z1 = std::min(images, z0 + group);
    // The views' first dimension is their tensors' first (images): a slice starts at image z0.
    TESSEL_ASSIGN_OR_RETURN(Tensor xs, x.tensor.slice(0, z0, z1));
    TESSEL_ASSIGN_OR_RETURN(Tensor ys, y.tensor.slice(0, z0, z1));
    View xg = x, yg = y;
    xg.tensor = xs;
    yg.tensor = ys;
    xg.shape[0] = yg.shape[0] = z1 - z0;
    TESSEL_TRY(launch_kernel("conv_pointwise", params, {a, xg, yg, bias}));
  }
  return ok_status();
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
