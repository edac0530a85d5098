// FP32 peak-rate kernel for AVX2: 12 independent chains of vfmadd on ymm registers (12 of the 16
// registers, leaving room for the two operands). Compiled with -mavx2 -mfma; run only where
// avx2 and fma were detected (see peak_kernels.h).
#if defined(__x86_64__)

#include <immintrin.h>

#include "hw/peak_kernels.h"

namespace tessel::hw_detail {
namespace {

constexpr int kAccumulators = 12;

double run(std::int64_t iterations, float start, float a, float b, float* lane0_sum) {
  __m256 acc[kAccumulators];
  for (int j = 0; j < kAccumulators; ++j)
    acc[j] = _mm256_set1_ps(start + static_cast<float>(j));
  const __m256 va = _mm256_set1_ps(a);
  const __m256 vb = _mm256_set1_ps(b);
  for (std::int64_t i = 0; i < iterations; ++i) {
#pragma GCC unroll 12
    for (int j = 0; j < kAccumulators; ++j)
      acc[j] = _mm256_fmadd_ps(acc[j], va, vb);
  }
  float sum = 0.0f;
  for (int j = 0; j < kAccumulators; ++j)
    sum += _mm256_cvtss_f32(acc[j]);
  *lane0_sum = sum;
  return static_cast<double>(iterations) * kAccumulators * 8 * 2;
}

}  // namespace

extern const PeakKernel kFmaF32Avx2 = {"avx2_fma", kAccumulators, 8, 2, run};

}  // namespace tessel::hw_detail

#endif
