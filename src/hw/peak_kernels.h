// The inner loops of the peak-rate micro-benchmarks, one per instruction set, each in its own
// file compiled with that ISA's flags (src/hw/CMakeLists.txt) and chosen at run time from the
// detected features, so libtessel still runs on a CPU without them. Private to hw/.
//
// Contract shared by every kernel, so a test can check the arithmetic against plain C++:
//   `accumulators` independent vector registers, every lane of accumulator j starting at
//   start + j; each of `iterations` rounds updates every accumulator once:
//     f32:  acc = fma(acc, a, b)                      (2 flops per lane)
//     bf16: acc += a*b + a*b  with a, b rounded to bf16 (one vdpbf16ps: 4 flops per f32 lane)
//   *lane0_sum receives the sum over accumulators (j ascending) of lane 0; the return value is
//   the number of floating-point operations done.
// Independent accumulators hide the instruction latency: with 2 FMA pipes of latency 4, at least
// 8 chains are in flight at once.
//
// Files compiled with ISA flags include nothing but intrinsics and this header: an inline
// function from a shared header instantiated there could be picked by the linker for the whole
// library and run AVX-512 code on a CPU without it.
#pragma once

#include <cstdint>

namespace tessel::hw_detail {

using PeakKernelFn = double (*)(std::int64_t iterations, float start, float a, float b,
                                float* lane0_sum);

struct PeakKernel {
  const char* name;  // "avx512_fma", ...
  int accumulators;
  int lanes;  // f32 lanes per register
  int flops_per_lane_per_round;
  PeakKernelFn run;
};

// Defined in peak_avx512.cpp, peak_avx2.cpp, peak_avx512_bf16.cpp, peak_neon.cpp; each is only
// present (non-null kernel table entry) on its architecture.
extern const PeakKernel kFmaF32Avx512;
extern const PeakKernel kFmaF32Avx2;
extern const PeakKernel kDotBf16Avx512;
extern const PeakKernel kFmaF32Neon;
// Plain C++, any CPU.
extern const PeakKernel kFmaF32Scalar;

}  // namespace tessel::hw_detail
