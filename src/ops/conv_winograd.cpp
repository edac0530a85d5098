// Winograd convolution F(4x4, 3x3) (see conv_winograd.h; the kernels are kernels/winograd.tile).
//
// Shapes: input [N, C, H, W] (x, or the output gradient), the convolution's output [N, O, OH, OW],
// TH x TW = ceil(OH / 4) x ceil(OW / 4) tiles per image, T = N TH TW tiles; U [36, O, C],
// V [36, C, T] and M [36, O, T] = U V (one gemm per transform element e).
#include "ops/conv_winograd.h"

#include <algorithm>
#include <atomic>

#include "ops/gemm_precision.h"

namespace tessel::ops {
namespace {

std::atomic<int64_t> runs{0};

int64_t tiles_along(int64_t size) {
  return (size + 3) / 4;
}

// The transforms' blocks of tiles along a tile row on the CPU: the power of 2 from 1 to 16 that
// holds a row (the column pass of a 16-tile block over an 8-tile row would compute 66 columns for
// 34). 0 on other devices, which keep the kernels' default (kernels/gpu.txt).
int64_t cpu_tile_block(const Tensor& like, int64_t tw) {
  if (like.device()->kind() != DeviceKind::kCpu) return 0;
  int64_t bt = 1;
  while (bt < tw && bt < 16)
    bt *= 2;
  return bt;
}

KernelParams transform_params(int64_t bt, KernelParams params) {
  if (bt > 0) params["BT"] = std::to_string(bt);
  return params;
}

// The 36 gemms M[e] = U[e] V[e]: one batched_gemm launch. On the CPU a 64-row gemm keeps a
// block of 96 rows (kernels/aot.txt has it), not the default 192 rows whose accumulator the
// block clears and writes back whole.
Status transformed_products(const Tensor& u, int64_t o, int64_t c, const Tensor& v, const Tensor& m,
                            int64_t t) {
  KernelParams params = gemm_launch_blocks(u.device()->kind(), 36, o, t);
  if (u.device()->kind() == DeviceKind::kCpu && o <= 96) params = {{"BM", "96"}};
  return launch_kernel("batched_gemm", params,
                       {View{u, {36, o, c}, {o * c, c, 1}}, View{v, {36, c, t}, {c * t, t, 1}},
                        View{m, {36, o, t}, {o * t, t, 1}}, 1.0, 0.0});
}

// How many output channels go through at once: all, or equal blocks whose transformed weights
// U [36, ob, C] take at most `workspace_bytes` (a multiple of 8 rows, at least 8). Whole, U is
// 36 / 9 = 4 times the weights: 37.7 MB for 512 x 512 channels, the largest buffer of
// resnet50's step when its layer4 runs (peak RSS +36 MB over the direct paths).
int64_t output_block(int64_t o, int64_t c, int64_t workspace_bytes) {
  const int64_t whole = 36 * o * c * int64_t{sizeof(float)};
  if (whole <= workspace_bytes) return o;
  const int64_t blocks = (whole + workspace_bytes - 1) / workspace_bytes;
  const int64_t rows = (o + blocks - 1) / blocks;
  return std::min(o, std::max<int64_t>(8, (rows + 7) / 8 * 8));
}

// The convolution of `input` by the 3x3 weights `weight` ([O, C, 3, 3]; when `transposed`, its
// [C, O, 3, 3] view turned 180 degrees: the input gradient's), padded (ph, pw), into y of
// `y_shape`. The images go through in groups whose transformed input and products each take at
// most `workspace_bytes` (at least one image a group), and the outputs in blocks whose
// transformed weights do (output_block).
Expected<Tensor> winograd(const Tensor& input, const Tensor& weight, bool transposed,
                          const Tensor* bias, int64_t ph, int64_t pw, const Shape& y_shape,
                          int64_t workspace_bytes) {
  runs.fetch_add(1, std::memory_order_relaxed);
  const int64_t n = input.size(0), c = input.size(1), o = y_shape[1];
  // On the CPU a tile row is padded to whole blocks (tw 14 -> 16, 7 -> 8): the padding tiles
  // read zeros past the input and are never stored, and every transform loop runs unmasked.
  // With a ragged last block the row pass ran masked and GCC made it scalar (perf: half of the
  // input transform's samples at 56 x 56).
  const int64_t bt = cpu_tile_block(input, tiles_along(y_shape[3]));
  const int64_t th = tiles_along(y_shape[2]);
  const int64_t tw =
      bt > 0 ? (tiles_along(y_shape[3]) + bt - 1) / bt * bt : tiles_along(y_shape[3]);
  const int64_t ob = output_block(o, c, workspace_bytes);
  const int64_t image_bytes = 36 * std::max(c, ob) * th * tw * int64_t{sizeof(float)};
  // Groups of equal size: 8 images at most 7 a group ran as 7 + 1, the last gemm 16 tiles wide.
  const int64_t most =
      std::clamp<int64_t>(workspace_bytes / image_bytes, 1, std::max<int64_t>(n, 1));
  const int64_t groups = (n + most - 1) / most;
  const int64_t group = std::max<int64_t>((n + groups - 1) / std::max<int64_t>(groups, 1), 1);
  // Output block [o0, o0 + rows) of the weights as the [A, K, 3, 3] view winograd_weight reads.
  const auto weight_block = [&](int64_t o0, int64_t rows) -> Expected<View> {
    const Strides& ws = weight.strides();
    if (!transposed) {
      TESSEL_ASSIGN_OR_RETURN(Tensor w, weight.slice(0, o0, o0 + rows));
      return View{w, {rows, c, 3, 3}, ws};
    }
    TESSEL_ASSIGN_OR_RETURN(Tensor w, weight.slice(1, o0, o0 + rows));
    return View{w, {rows, c, 3, 3}, {ws[1], ws[0], ws[2], ws[3]}};
  };
  const auto transform_weights = [&](int64_t o0, int64_t rows, const Tensor& u) -> Status {
    TESSEL_ASSIGN_OR_RETURN(View w, weight_block(o0, rows));
    return launch_kernel("winograd_weight",
                         {{"T", dtype_name(weight.dtype())}, {"FLIP", transposed ? "1" : "0"}},
                         {w, View{u, {36, rows, c}, {rows * c, c, 1}}});
  };
  TESSEL_ASSIGN_OR_RETURN(Tensor u, empty_like_device({36 * ob * c}, DType::kF32, input));
  if (ob == o) TESSEL_TRY(transform_weights(0, o, u));
  TESSEL_ASSIGN_OR_RETURN(Tensor v,
                          empty_like_device({36 * c * group * th * tw}, DType::kF32, input));
  TESSEL_ASSIGN_OR_RETURN(Tensor m,
                          empty_like_device({36 * ob * group * th * tw}, DType::kF32, input));
  TESSEL_ASSIGN_OR_RETURN(Tensor y, empty_like_device(y_shape, DType::kF32, input));
  for (int64_t b0 = 0; b0 < n; b0 += group) {
    const int64_t nb = std::min(group, n - b0), t = nb * th * tw;
    Tensor in = input, out = y;
    if (nb < n) {
      TESSEL_ASSIGN_OR_RETURN(in, input.slice(0, b0, b0 + nb));
      TESSEL_ASSIGN_OR_RETURN(out, y.slice(0, b0, b0 + nb));
    }
    TESSEL_TRY(launch_kernel("winograd_input",
                             transform_params(bt, {{"T", dtype_name(input.dtype())}}),
                             {in, View{v, {c, nb * th, 36, tw}, {t, tw, c * t, 1}}, th, ph, pw}));
    for (int64_t o0 = 0; o0 < o; o0 += ob) {
      const int64_t rows = std::min(ob, o - o0);
      // With one block U was transformed once above; blocks recompute theirs for every group
      // (reading 9 weights per 36 products: next to the gemm's 2 T flops per product, cheap).
      if (ob < o) TESSEL_TRY(transform_weights(o0, rows, u));
      TESSEL_TRY(transformed_products(u, rows, c, v, m, t));
      Tensor out_block = out;
      if (rows < o) {
        TESSEL_ASSIGN_OR_RETURN(out_block, out.slice(1, o0, o0 + rows));
      }
      const View m4{m, {rows, nb * th, 36, tw}, {t, tw, rows * t, 1}};  // winograd.tile's view
      View bias_block{out, {rows}, {0}};                                // unread with BIAS = 0
      if (bias != nullptr) {
        TESSEL_ASSIGN_OR_RETURN(Tensor b, bias->slice(0, o0, o0 + rows));
        bias_block = View{b, {rows}, {b.strides()[0]}};
      }
      TESSEL_TRY(launch_kernel("winograd_output",
                               transform_params(bt, {{"BIAS", bias != nullptr ? "1" : "0"}}),
                               {m4, out_block, bias_block, th}));
    }
  }
  return y;
}

}  // namespace

Expected<Tensor> winograd_forward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                  bool has_bias, int64_t ph, int64_t pw, const Shape& y_shape,
                                  int64_t workspace_bytes) {
  TESSEL_ASSIGN_OR_RETURN(Tensor input, contiguous_on_device(x));
  return winograd(input, weight, false, has_bias ? &bias : nullptr, ph, pw, y_shape,
                  workspace_bytes);
}

Expected<Tensor> winograd_input_grad(const Tensor& g, const Tensor& weight, int64_t ph, int64_t pw,
                                     const Shape& x_shape, int64_t workspace_bytes) {
  TESSEL_ASSIGN_OR_RETURN(Tensor dy, contiguous_on_device(g));
  // The weights [O, C, 3, 3] as [C, O, 3, 3]: the input gradient's outputs are x's channels.
  return winograd(dy, weight, true, nullptr, 2 - ph, 2 - pw, x_shape, workspace_bytes);
}

// Measured (bench conv, 1 thread, CPU clock, load ~5, forced against the direct paths in one
// sitting): every 3x3 / stride 1 layer of ResNet-18 and ResNet-50 from 64 channels up, 4 x 4 to
// 56 x 56 planes, ran faster as Winograd, forward and input gradient (resnet18.layer1.0.conv1
// 36.0 -> 59.9 GFLOP/s, resnet50.layer1.0.conv2 34.7 -> 85.5, resnet18.layer4.0.conv2 61.6 ->
// 78.2); an RGB stem (3 channels, or 3 rows for its input gradient) ran 3-4x slower. At 32
// channels it lost too: the cnn workload (conv 32 -> 64 on 14 x 14, batch 128) with the rule at
// 32 instead of 64 stepped in 165-177 ms against 143-148 (1 thread, load 2.5-2.9).
bool winograd_by_default(int64_t channels, int64_t outputs) {
  return channels >= 64 && outputs >= 64;
}

int64_t winograd_runs() {
  return runs.load(std::memory_order_relaxed);
}

}  // namespace tessel::ops
