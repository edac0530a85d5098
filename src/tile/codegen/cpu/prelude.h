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
  if (a > 0x7f800000u) return f16{uint16_t(sign | 0x7e00u)};  // NaN
  if (a >= 0x477ff000u) return f16{uint16_t(sign | 0x7c00u)};  // overflow -> inf
  if (a < 0x38800000u) {  // subnormal or zero
    float f;
    uint32_t abs_bits = a;
    std::memcpy(&f, &abs_bits, sizeof f);
    return f16{uint16_t(sign | uint16_t(std::nearbyint(f * 16777216.0f)))};
  }
  const uint32_t rounded = a + 0xfffu + ((a >> 13) & 1u);
  return f16{uint16_t(sign | ((rounded - 0x38000000u) >> 13))};
}
inline bf16 tile_float_to_bf16(float x) { return float_to_bf16(x); }
inline float tile_round_f16(float x) { return to_float(tile_float_to_f16(x)); }
inline float tile_round_bf16(float x) { return to_float(float_to_bf16(x)); }

inline float tile_rsqrt(float x) { return 1.0f / std::sqrt(x); }
inline double tile_rsqrt(double x) { return 1.0 / std::sqrt(x); }
inline float tile_sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
inline double tile_sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
inline float tile_relu(float x) { return x > 0.0f ? x : 0.0f; }
inline double tile_relu(double x) { return x > 0.0 ? x : 0.0; }
// tanh approximation of GELU (as GPT-2 uses).
inline float tile_gelu(float x) {
  return 0.5f * x * (1.0f + std::tanh(0.7978845608028654f * (x + 0.044715f * x * x * x)));
}
inline double tile_gelu(double x) {
  return 0.5 * x * (1.0 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
}

// Per-thread tile memory, kept across calls: tile `slot` of the running kernel gets at least
// `elems` elements, 64-byte aligned.
class Scratch {
 public:
  ~Scratch() {
    for (void* p : ptrs_) std::free(p);
  }
  template <typename T>
  T* get(size_t slot, int64_t elems) {
    if (slot >= ptrs_.size()) {
      ptrs_.resize(slot + 1, nullptr);
      bytes_.resize(slot + 1, 0);
    }
    const size_t need = (size_t(elems) * sizeof(T) + 63) / 64 * 64;
    if (bytes_[slot] < need) {
      std::free(ptrs_[slot]);
      ptrs_[slot] = std::aligned_alloc(64, need);
      bytes_[slot] = need;
    }
    return static_cast<T*>(ptrs_[slot]);
  }

 private:
  std::vector<void*> ptrs_;
  std::vector<size_t> bytes_;
};

inline int tile_extent(int64_t size, int64_t origin, int tile) {
  return int(std::clamp<int64_t>(size - origin, 0, tile));
}

}  // namespace TESSEL_CPU_ISA_NAMESPACE
}  // namespace tessel_cpu
