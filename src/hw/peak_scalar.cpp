// FP32 peak-rate kernel in plain C++ for CPUs without a vector kernel: 8 independent scalar
// chains of multiply-add (see peak_kernels.h). Compiled with the library's default flags; a plain
// `acc * a + b` rather than std::fma, which is a library call on CPUs without an FMA unit.
#include "hw/peak_kernels.h"

namespace tessel::hw_detail {
namespace {

constexpr int kAccumulators = 8;

double run(std::int64_t iterations, float start, float a, float b, float* lane0_sum) {
  float acc[kAccumulators];
  for (int j = 0; j < kAccumulators; ++j)
    acc[j] = start + static_cast<float>(j);
  for (std::int64_t i = 0; i < iterations; ++i)
    for (int j = 0; j < kAccumulators; ++j)
      acc[j] = acc[j] * a + b;
  float sum = 0.0f;
  for (int j = 0; j < kAccumulators; ++j)
    sum += acc[j];
  *lane0_sum = sum;
  return static_cast<double>(iterations) * kAccumulators * 2;
}

}  // namespace

extern const PeakKernel kFmaF32Scalar = {"scalar", kAccumulators, 1, 2, run};

}  // namespace tessel::hw_detail
