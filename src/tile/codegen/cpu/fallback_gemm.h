// A plain-C++ stand-in for the CPU gemm templates (templates/tile_gemm.h), used only while that
// header is absent from the tree: the same contract and types, none of the speed. prelude.h picks
// the real templates whenever they are present.
#pragma once

#include <cstdint>
#include <cstring>

#define TESSEL_CPU_ISA_NAMESPACE isa_fallback
#define TESSEL_CPU_ISA_NAME "fallback"

namespace tessel_cpu {

struct bf16 {
  uint16_t bits;
};
struct f16 {
  uint16_t bits;
};

inline namespace TESSEL_CPU_ISA_NAMESPACE {

inline constexpr const char* kIsaName = TESSEL_CPU_ISA_NAME;

inline float bits_to_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
inline uint32_t float_to_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
inline float to_float(float x) { return x; }
inline float to_float(bf16 x) { return bits_to_float(uint32_t(x.bits) << 16); }
inline float to_float(f16 x) {
  const uint32_t sign = uint32_t(x.bits & 0x8000u) << 16;
  const uint32_t exponent = (x.bits >> 10) & 0x1fu;
  uint32_t mantissa = x.bits & 0x3ffu;
  if (exponent == 0x1f) return bits_to_float(sign | 0x7f800000u | (mantissa << 13));
  if (exponent != 0) return bits_to_float(sign | ((exponent + 112) << 23) | (mantissa << 13));
  if (mantissa == 0) return bits_to_float(sign);
  int shift = 0;
  while (!(mantissa & 0x400u)) {
    mantissa <<= 1;
    ++shift;
  }
  return bits_to_float(sign | uint32_t(113 - shift) << 23 | ((mantissa & 0x3ffu) << 13));
}
inline bf16 float_to_bf16(float f) {
  const uint32_t u = float_to_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return bf16{uint16_t((u >> 16) | 0x40u)};
  return bf16{uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16)};
}

// Packed layout: the whole tile row-major, zero padded (A: BM x BK; B: BK x BN).
template <typename TPack>
constexpr int64_t packed_a_elems(int BM, int BK) { return int64_t(BM) * BK; }
template <typename TPack>
constexpr int64_t packed_b_elems(int BK, int BN) { return int64_t(BK) * BN; }

template <typename TPack, typename TSrc>
inline TPack fallback_convert(TSrc x) {
  if constexpr (sizeof(TPack) == 2) return float_to_bf16(to_float(x));
  else return to_float(x);
}

template <typename TSrc, typename TPack>
inline void pack_a(const TSrc* src, int64_t row_stride, int64_t col_stride, int rows, int cols,
                   int BM, int BK, TPack* dst) {
  for (int i = 0; i < BM; ++i)
    for (int k = 0; k < BK; ++k)
      dst[i * BK + k] = i < rows && k < cols ? fallback_convert<TPack>(src[i * row_stride + k * col_stride]) : TPack{};
}

template <typename TSrc, typename TPack>
inline void pack_b(const TSrc* src, int64_t row_stride, int64_t col_stride, int rows, int cols,
                   int BK, int BN, TPack* dst) {
  for (int k = 0; k < BK; ++k)
    for (int n = 0; n < BN; ++n)
      dst[k * BN + n] = k < rows && n < cols ? fallback_convert<TPack>(src[k * row_stride + n * col_stride]) : TPack{};
}

template <typename TPack>
inline void gemm_packed(const TPack* a, const TPack* b, float* acc, int64_t ldacc, int BM, int BN, int BK) {
  for (int i = 0; i < BM; ++i)
    for (int k = 0; k < BK; ++k) {
      const float x = to_float(a[i * BK + k]);
      for (int n = 0; n < BN; ++n) acc[i * ldacc + n] += x * to_float(b[k * BN + n]);
    }
}

}  // namespace TESSEL_CPU_ISA_NAMESPACE
}  // namespace tessel_cpu
