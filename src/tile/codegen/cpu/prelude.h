// Included by every C++ kernel that tessel generates for the CPU: the argument ABI, the gemm
// templates (packing and micro-kernels, one variant per ISA), 16-bit float conversions, the math
// functions the tile language names, and per-thread scratch memory for tiles. Compiled by the
// system compiler at run time, so it depends only on the standard library and the templates.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <vector>

#include "tile/codegen/cpu/abi.h"

#include "tile/codegen/cpu/templates/tile_gemm.h"

namespace tessel_cpu {
// Inside the templates' ISA namespace, so variants compiled into one library never share code.
inline namespace TESSEL_CPU_ISA_NAMESPACE {

// f32 -> f16, round to nearest even (the templates only read f16).
inline f16 tile_float_to_f16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return f16{uint16_t(sign | 0x7e00u)};   // NaN
  if (a >= 0x477ff000u) return f16{uint16_t(sign | 0x7c00u)};  // overflow -> inf
  if (a < 0x38800000u) {                                       // subnormal or zero
    float f;
    uint32_t abs_bits = a;
    std::memcpy(&f, &abs_bits, sizeof f);
    return f16{uint16_t(sign | uint16_t(std::nearbyint(f * 16777216.0f)))};
  }
  const uint32_t rounded = a + 0xfffu + ((a >> 13) & 1u);
  return f16{uint16_t(sign | ((rounded - 0x38000000u) >> 13))};
}
inline bf16 tile_float_to_bf16(float x) {
  return float_to_bf16(x);
}
inline float tile_round_f16(float x) {
  return to_float(tile_float_to_f16(x));
}
inline float tile_round_bf16(float x) {
  return to_float(float_to_bf16(x));
}

// exp and tanh written out, inline and branch-free, so that the `#pragma omp simd` loops of
// element-wise kernels vectorise them: libm's expf and tanhf are scalar calls, and were most of
// the time of gelu, its gradient and softmax. The polynomials are Cephes' expf and tanhf (within
// 2 ulp over the whole float range; the tile tests compare with double references). Kernels are
// compiled with -fno-trapping-math, without which GCC does not if-convert the selects below.
inline float tile_exp(float x) {
  // e^x = 2^n e^r with n = round(x / ln 2) and |r| <= ln 2 / 2; 2^n is applied as two factors,
  // so that n from -150 (denormal results) to 128 needs no special case.
  float xc = x < -104.0f ? -104.0f : x;
  xc = xc > 88.7228394f ? 88.7228394f : xc;
  // n read from the low mantissa bits of x / ln 2 + 1.5 * 2^23: no float-to-integer conversion.
  const float shifted = xc * 1.44269504088896341f + 12582912.0f;
  const float n = shifted - 12582912.0f;
  int32_t shifted_bits;
  std::memcpy(&shifted_bits, &shifted, sizeof shifted_bits);
  const int32_t ni = shifted_bits - 0x4b400000;
  float r = xc - n * 0.693359375f;  // ln 2 in two parts, so r is exact
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const int32_t n1 = ni >> 1, n2 = ni - n1;
  const int32_t bits1 = (n1 + 127) << 23, bits2 = (n2 + 127) << 23;
  float scale1, scale2;
  std::memcpy(&scale1, &bits1, sizeof scale1);
  std::memcpy(&scale2, &bits2, sizeof scale2);
  float y = p * scale1 * scale2;
  y = x > 88.7228394f ? std::numeric_limits<float>::infinity() : y;
  y = x < -104.0f ? 0.0f : y;
  return x != x ? x : y;  // NaN stays NaN
}
inline double tile_exp(double x) {
  return std::exp(x);
}
inline float tile_tanh(float x) {
  const float a = std::fabs(x);
  // |x| < 0.625: odd polynomial; else 1 - 2 / (e^2|x| + 1) with x's sign (tanh(9) rounds to 1).
  const float z = x * x;
  float p = -5.70498872745e-3f;
  p = p * z + 2.06390887954e-2f;
  p = p * z - 5.37397155531e-2f;
  p = p * z + 1.33314422036e-1f;
  p = p * z - 3.33332819422e-1f;
  const float small = x + x * z * p;
  const float e = tile_exp(2.0f * (a < 9.0f ? a : 9.0f));
  const float large = std::copysign(1.0f - 2.0f / (e + 1.0f), x);
  const float y = a < 0.625f ? small : large;
  return x != x ? x : y;
}
inline double tile_tanh(double x) {
  return std::tanh(x);
}
// fmax/fmin (the non-NaN operand wins) as selects: std::fmax stays a libm call in GCC's output.
template <typename A, typename B>
inline auto tile_fmax(A a, B b) {
  using R = decltype(a + b);
  const R x = a, y = b;
  return (x > y || y != y) ? x : y;
}
template <typename A, typename B>
inline auto tile_fmin(A a, B b) {
  using R = decltype(a + b);
  const R x = a, y = b;
  return (x < y || y != y) ? x : y;
}
inline float tile_rsqrt(float x) {
  return 1.0f / std::sqrt(x);
}
inline double tile_rsqrt(double x) {
  return 1.0 / std::sqrt(x);
}
inline float tile_sigmoid(float x) {
  return 1.0f / (1.0f + tile_exp(-x));
}
inline double tile_sigmoid(double x) {
  return 1.0 / (1.0 + std::exp(-x));
}
inline float tile_relu(float x) {
  return x > 0.0f ? x : 0.0f;
}
inline double tile_relu(double x) {
  return x > 0.0 ? x : 0.0;
}
// tanh approximation of GELU (as GPT-2 uses), as x sigmoid(2 u) = 0.5 x (1 + tanh u): one exp
// and one division, where tile_tanh adds a polynomial and a second branch (gelu was ~3% of a
// gpt_tiny step). -inf gives NaN, as PyTorch's 0.5 x (1 + tanh u) does (-inf times 0).
inline float tile_gelu(float x) {
  const float y = x * tile_sigmoid(1.5957691216057308f * (x + 0.044715f * x * x * x));
  return x == -std::numeric_limits<float>::infinity() ? std::numeric_limits<float>::quiet_NaN() : y;
}
inline double tile_gelu(double x) {
  return 0.5 * x * (1.0 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
}

// Per-thread tile memory for a kernel with `Slots` tiles, kept across calls: tile `slot` gets at
// least `elems` elements, 64-byte aligned, or null when the allocation fails. The kernel asks for
// all its tiles, then calls take_unallocated() and returns its result if that is not 0, before
// touching any tile. No std::vector: nothing here throws.
template <size_t Slots>
class Scratch {
 public:
  ~Scratch() {
    for (void* p : ptrs_)
      std::free(p);
  }
  template <typename T>
  T* get(size_t slot, int64_t elems) {
    const size_t need = (size_t(elems) * sizeof(T) + 63) / 64 * 64;
    if (bytes_[slot] < need) {
      std::free(ptrs_[slot]);
      ptrs_[slot] = std::aligned_alloc(64, need);
      bytes_[slot] = ptrs_[slot] ? need : 0;
      if (!ptrs_[slot]) unallocated_ += int64_t(need);
    }
    return static_cast<T*>(ptrs_[slot]);
  }
  // The bytes that the gets since the last call could not allocate (0 when all succeeded).
  int64_t take_unallocated() {
    const int64_t bytes = unallocated_;
    unallocated_ = 0;
    return bytes;
  }

 private:
  void* ptrs_[Slots] = {};
  size_t bytes_[Slots] = {};
  int64_t unallocated_ = 0;
};

inline int tile_extent(int64_t size, int64_t origin, int tile) {
  return int(std::clamp<int64_t>(size - origin, 0, tile));
}

}  // namespace TESSEL_CPU_ISA_NAMESPACE
}  // namespace tessel_cpu
