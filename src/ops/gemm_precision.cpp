// The precision of gemm ops (see gemm_precision.h).
#include "ops/gemm_precision.h"

#include <algorithm>

#include "ops/ops.h"
#include "support/thread_pool.h"

namespace tessel::ops {

bool is_float_operand(DType t) {
  return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16;
}

Expected<DType> gemm_compute_dtype(const std::string& op, const std::vector<TensorMeta>& operands,
                                   const Attrs& attrs) {
  DType half = DType::kF32;
  for (const TensorMeta& m : operands) {
    if (!is_float_operand(m.dtype))
      return invalid_argument("{}: operands are f32, f16 or bf16, got {}", op,
                              shapes_string(operands));
    if (m.dtype == DType::kF32) continue;
    if (half != DType::kF32 && half != m.dtype && !attrs.has("compute"))
      return invalid_argument(
          "{}: operands of two 16-bit dtypes ({}); cast one, or say which to compute in with the "
          "'compute' attr",
          op, shapes_string(operands));
    half = m.dtype;
  }
  if (!attrs.has("compute")) return half;
  const int64_t code = attrs.get_int("compute", 0);
  if (code < 0 || code >= kDTypeCount || !is_float_operand(static_cast<DType>(code)))
    return invalid_argument("{}: 'compute' must be the code of f32, f16 or bf16, got {}", op, code);
  return static_cast<DType>(code);
}

Expected<Tensor> gemm_operand(const Tensor& t, DType compute) {
  if (compute != DType::kF16) return t;
  return cast(t, DType::kF16);
}

std::pair<std::string, KernelParams> gemm_kernel(bool batched, const Tensor& a, const Tensor& b,
                                                 DType compute, KernelParams params) {
  std::string name = batched ? "batched_gemm" : "gemm";
  if (a.dtype() == DType::kF32 && b.dtype() == DType::kF32 && compute == DType::kF32)
    return {name, std::move(params)};
  params["T"] = dtype_name(a.dtype());
  params["TB"] = dtype_name(b.dtype());
  // f16 operands (cast by gemm_operand) are staged exactly as f32: the CPU has no f16 multiply.
  params["P"] = compute == DType::kBF16 ? "bf16" : "f32";
  return {name + "_rounded", std::move(params)};
}

// Why: a linear layer's weight gradient dW = dY^T X is [out, in] with K = the tokens, so in
// gpt_tiny (width 128, 768 tokens) 128 x 128 x 768 was one 192 x 256 block: one thread worked
// and the other waited. Two threads, fastest turn, one run at load ~5.5 (A transposed, as dW
// reads dY): 128x128x768 31 GFLOP/s at 192x256 blocks, 45 at 96x128, 79 at 48x128, 84 at 48x64;
// 128x65x768 (the tied head's) 58 -> 100 at 48x64; 512x128x768 106 -> 147; 128x512x768 112 ->
// 152. Smaller blocks cost nothing measurable where the grid stays wide: B's tiles are packed once
// per launch whatever BM is, and A is read in place or packed per tile either way.
KernelParams cpu_gemm_blocks(int64_t batch, int64_t m, int64_t n, int threads) {
  constexpr int64_t kDefaultBM = 192, kDefaultBN = 256;  // kernels/gemm.tile's CPU defaults
  constexpr int64_t kMinBM = 48, kMinBN = 64;  // multiples of every CPU micro-tile (12x32, 6x16)
  auto blocks = [&](int64_t bm, int64_t bn) {
    return batch * ((m + bm - 1) / bm) * ((n + bn - 1) / bn);
  };
  // The largest halving of `block`, down to `least`, that cuts `size` into more blocks; 0 if none.
  auto smaller = [](int64_t size, int64_t block, int64_t least) -> int64_t {
    const int64_t count = (size + block - 1) / block;
    for (int64_t b = block / 2; b >= least; b /= 2)
      if ((size + b - 1) / b > count) return b;
    return 0;
  };
  const int64_t wanted = 2 * int64_t(std::max(threads, 1));
  int64_t bm = kDefaultBM, bn = kDefaultBN;
  while (blocks(bm, bn) < wanted) {
    if (const int64_t b = smaller(m, bm, kMinBM))
      bm = b;
    else if (const int64_t b2 = smaller(n, bn, kMinBN))
      bn = b2;
    else
      break;
  }
  KernelParams params;
  if (bm != kDefaultBM) params["BM"] = std::to_string(bm);
  if (bn != kDefaultBN) params["BN"] = std::to_string(bn);
  return params;
}

KernelParams gemm_launch_blocks(DeviceKind kind, int64_t batch, int64_t m, int64_t n) {
  if (kind == DeviceKind::kCpu)
    return cpu_gemm_blocks(batch, m, n, ThreadPool::global().num_threads());
  if (kind != DeviceKind::kCuda) return {};
  return {{"BM", "32"}, {"BN", "32"}, {"BK", "8"}};
}

double round_to(double v, DType compute) {
  const float f = static_cast<float>(v);
  if (compute == DType::kBF16) return static_cast<float>(BFloat16(f));
  if (compute == DType::kF16) return static_cast<float>(Half(f));
  return v;
}

}  // namespace tessel::ops
