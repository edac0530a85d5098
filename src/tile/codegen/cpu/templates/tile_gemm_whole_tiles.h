// Edge micro-tiles for an ISA that has none (AVX-512, portable; included by their headers): a
// micro-tile of fewer rows runs the whole tile on a copy, and a last panel of few columns the
// whole tile (tile_gemm.h). AVX2 has both (tile_gemm_avx2.h).
#pragma once

namespace tessel_cpu {
inline namespace TESSEL_CPU_ISA_NAMESPACE {

template <bool kAccumulate, typename AOperand, typename BOperand>
inline bool micro_kernel_short(int, const AOperand&, const BOperand&, float*, int64_t, int) {
  return false;
}

template <typename TPack>
inline constexpr int kNarrowNR = 0;
template <bool kAccumulate, typename AOperand, typename TPack>
inline void micro_kernel_narrow(const AOperand&, const TPack*, float*, int64_t, int) {}

}  // namespace TESSEL_CPU_ISA_NAMESPACE
}  // namespace tessel_cpu
