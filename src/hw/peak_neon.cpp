// FP32 peak-rate kernel for arm64 NEON (Advanced SIMD, present on every arm64 CPU): 16
// independent chains of fmla on 128-bit registers (see peak_kernels.h).
#if defined(__aarch64__)

#include <arm_neon.h>

#include "hw/peak_kernels.h"

namespace tessel::hw_detail {
namespace {

constexpr int kAccumulators = 16;

double run(std::int64_t iterations, float start, float a, float b, float* lane0_sum) {
  float32x4_t acc[kAccumulators];
  for (int j = 0; j < kAccumulators; ++j)
    acc[j] = vdupq_n_f32(start + static_cast<float>(j));
  const float32x4_t va = vdupq_n_f32(a);
  const float32x4_t vb = vdupq_n_f32(b);
  for (std::int64_t i = 0; i < iterations; ++i) {
#pragma GCC unroll 16
    for (int j = 0; j < kAccumulators; ++j)
      acc[j] = vfmaq_f32(vb, acc[j], va);  // b + acc*a
  }
  float sum = 0.0f;
  for (int j = 0; j < kAccumulators; ++j)
    sum += vgetq_lane_f32(acc[j], 0);
  *lane0_sum = sum;
  return static_cast<double>(iterations) * kAccumulators * 4 * 2;
}

}  // namespace

extern const PeakKernel kFmaF32Neon = {"neon_fma", kAccumulators, 4, 2, run};

}  // namespace tessel::hw_detail

#endif
