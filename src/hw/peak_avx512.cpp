// FP32 peak-rate kernel for AVX-512: 16 independent chains of vfmadd on zmm registers.
// Compiled with -mavx512f -mfma; run only where avx512f was detected (see peak_kernels.h).
#if defined(__x86_64__)

#include <immintrin.h>

#include "hw/peak_kernels.h"

namespace tessel::hw_detail {
namespace {

constexpr int kAccumulators = 16;

double run(std::int64_t iterations, float start, float a, float b, float* lane0_sum) {
  __m512 acc[kAccumulators];
  for (int j = 0; j < kAccumulators; ++j)
    acc[j] = _mm512_set1_ps(start + static_cast<float>(j));
  const __m512 va = _mm512_set1_ps(a);
  const __m512 vb = _mm512_set1_ps(b);
  for (std::int64_t i = 0; i < iterations; ++i) {
#pragma GCC unroll 16
    for (int j = 0; j < kAccumulators; ++j)
      acc[j] = _mm512_fmadd_ps(acc[j], va, vb);
  }
  float sum = 0.0f;
  for (int j = 0; j < kAccumulators; ++j)
    sum += _mm512_cvtss_f32(acc[j]);
  *lane0_sum = sum;
  return static_cast<double>(iterations) * kAccumulators * 16 * 2;
}

}  // namespace

extern const PeakKernel kFmaF32Avx512 = {"avx512_fma", kAccumulators, 16, 2, run};

}  // namespace tessel::hw_detail

#endif
