// BF16 dot-product peak-rate kernel: 16 independent chains of vdpbf16ps on zmm registers. One
// instruction multiplies 32 bf16 pairs and adds them into 16 f32 lanes: 2 pairs per lane,
// 2 flops per pair, 64 flops. Compiled with -mavx512f -mavx512bf16; run only where avx512_bf16
// was detected (see peak_kernels.h).
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
  const __m512bh va = _mm512_cvtne2ps_pbh(_mm512_set1_ps(a), _mm512_set1_ps(a));
  const __m512bh vb = _mm512_cvtne2ps_pbh(_mm512_set1_ps(b), _mm512_set1_ps(b));
  for (std::int64_t i = 0; i < iterations; ++i) {
#pragma GCC unroll 16
    for (int j = 0; j < kAccumulators; ++j)
      acc[j] = _mm512_dpbf16_ps(acc[j], va, vb);
  }
  float sum = 0.0f;
  for (int j = 0; j < kAccumulators; ++j)
    sum += _mm512_cvtss_f32(acc[j]);
  *lane0_sum = sum;
  return static_cast<double>(iterations) * kAccumulators * 16 * 4;
}

}  // namespace

extern const PeakKernel kDotBf16Avx512 = {"avx512_bf16_dot", kAccumulators, 16, 4, run};

}  // namespace tessel::hw_detail

#endif
