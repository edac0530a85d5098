// Element types of tensors, and the two 16-bit float formats tessel computes with.
//
//   DType t = *parse_dtype("bf16");          // also "bfloat16"; dtype_name(t) == "bf16"
//   dtype_size(DType::kF16) == 2
//   Half h(1.5f);  float f = h;              // float <-> f16, round to nearest even
//   BFloat16 b = BFloat16::from_bits(0x3f80); float(b) == 1.0f
//
// Conversions from float round to nearest, ties to even; values too large for the format become
// ±Inf; values below the smallest subnormal round to ±0 (or up to it, past half of it). A NaN stays
// a NaN of the same sign, made quiet, keeping the top bits of its payload. They are inline and
// branch-light because host loops convert element by element.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "support/status.h"

namespace tessel {

// kI16 comes last so that the codes stored before it existed (op attrs, files) keep their meaning.
enum class DType : uint8_t { kF32, kF64, kF16, kBF16, kI8, kU8, kI32, kI64, kBool, kI16 };
inline constexpr int kDTypeCount = 10;

// "f32", "f64", "f16", "bf16", "i8", "u8", "i32", "i64", "bool", "i16".
const char* dtype_name(DType dtype);
size_t dtype_size(DType dtype);
bool is_floating_point(DType dtype);
// Accepts the names above and the long ones ("float32", "bfloat16", "int64", ...).
Expected<DType> parse_dtype(std::string_view name);

// ---- 16-bit floats as bits ----

inline uint16_t float_to_half_bits(float value) {
  const uint32_t x = std::bit_cast<uint32_t>(value);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000);
  const uint32_t a = x & 0x7fffffff;
  if (a >= 0x7f800000) {  // Inf, or NaN: quiet bit set, top 9 payload bits kept
    return a == 0x7f800000 ? (sign | 0x7c00)
                           : static_cast<uint16_t>(sign | 0x7e00 | ((a >> 13) & 0x3ff));
  }
  if (a >= 0x477ff000) return sign | 0x7c00;    // >= 65520, half-way past 65504: Inf
  if (a >= 0x38800000) {                        // a normal half (>= 2^-14)
    const uint32_t h = (a - 0x38000000) >> 13;  // rebias the exponent by 127 - 15
    const uint32_t rest = a & 0x1fff;           // the 13 bits rounded away
    const uint32_t up = rest > 0x1000 || (rest == 0x1000 && (h & 1));
    return static_cast<uint16_t>(sign | (h + up));  // a carry rolls into the exponent, correctly
  }
  if (a <= 0x33000000) return sign;  // <= 2^-25: zero (2^-25 itself ties to the even zero)
  // A subnormal half: value = m * 2^-24, m = significand >> (126 - exponent).
  const uint32_t exponent = a >> 23;  // 102 .. 112
  const uint32_t significand = (a & 0x7fffff) | 0x800000;
  const uint32_t shift = 126 - exponent;  // 14 .. 24
  const uint32_t m = significand >> shift;
  const uint32_t rest = significand & ((1u << shift) - 1);
  const uint32_t halfway = 1u << (shift - 1);
  const uint32_t up = rest > halfway || (rest == halfway && (m & 1));
  return static_cast<uint16_t>(sign | (m + up));  // m + 1 == 0x400 is the smallest normal
}

inline float half_bits_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t exponent = (h >> 10) & 0x1f;
  const uint32_t mantissa = h & 0x3ff;
  if (exponent == 0x1f) {  // Inf, or NaN made quiet
    return std::bit_cast<float>(sign | 0x7f800000 | (mantissa ? 0x400000 | (mantissa << 13) : 0));
  }
  if (exponent != 0)
    return std::bit_cast<float>(sign | ((exponent + 112) << 23) | (mantissa << 13));
  // Zero or subnormal: mantissa * 2^-24, exact in float.
  const float magnitude = static_cast<float>(mantissa) * 0x1p-24f;
  return std::bit_cast<float>(sign | std::bit_cast<uint32_t>(magnitude));
}

inline uint16_t float_to_bfloat16_bits(float value) {
  const uint32_t x = std::bit_cast<uint32_t>(value);
  if ((x & 0x7fffffff) > 0x7f800000) return static_cast<uint16_t>((x >> 16) | 0x40);  // quiet NaN
  // Round to nearest even on the 16 bits dropped; a carry into the exponent is the right result,
  // up to and including Inf.
  return static_cast<uint16_t>((x + 0x7fff + ((x >> 16) & 1)) >> 16);
}

inline float bfloat16_bits_to_float(uint16_t b) {
  uint32_t x = static_cast<uint32_t>(b) << 16;
  if ((x & 0x7fffffff) > 0x7f800000) x |= 0x400000;  // NaN made quiet
  return std::bit_cast<float>(x);
}

// ---- 16-bit floats as types (storage only: arithmetic happens in float) ----

struct Half {
  uint16_t bits = 0;
  Half() = default;
  explicit Half(float value) : bits(float_to_half_bits(value)) {}
  static Half from_bits(uint16_t b) {
    Half h;
    h.bits = b;
    return h;
  }
  operator float() const { return half_bits_to_float(bits); }  // NOLINT: implicit by design
};

struct BFloat16 {
  uint16_t bits = 0;
  BFloat16() = default;
  explicit BFloat16(float value) : bits(float_to_bfloat16_bits(value)) {}
  static BFloat16 from_bits(uint16_t b) {
    BFloat16 h;
    h.bits = b;
    return h;
  }
  operator float() const { return bfloat16_bits_to_float(bits); }  // NOLINT: implicit by design
};

static_assert(sizeof(Half) == 2 && sizeof(BFloat16) == 2);

// ---- C++ type <-> DType ----

template <typename T>
struct DTypeOf;
template <>
struct DTypeOf<float> {
  static constexpr DType value = DType::kF32;
};
template <>
struct DTypeOf<double> {
  static constexpr DType value = DType::kF64;
};
template <>
struct DTypeOf<Half> {
  static constexpr DType value = DType::kF16;
};
template <>
struct DTypeOf<BFloat16> {
  static constexpr DType value = DType::kBF16;
};
template <>
struct DTypeOf<int8_t> {
  static constexpr DType value = DType::kI8;
};
template <>
struct DTypeOf<uint8_t> {
  static constexpr DType value = DType::kU8;
};
template <>
struct DTypeOf<int16_t> {
  static constexpr DType value = DType::kI16;
};
template <>
struct DTypeOf<int32_t> {
  static constexpr DType value = DType::kI32;
};
template <>
struct DTypeOf<int64_t> {
  static constexpr DType value = DType::kI64;
};
template <>
struct DTypeOf<bool> {
  static constexpr DType value = DType::kBool;
};

// dtype_of<float> == DType::kF32; a type with no DType does not compile.
template <typename T>
inline constexpr DType dtype_of = DTypeOf<T>::value;

// ---- One element as a double, for fill, printing and tests (not for kernels) ----

// Reads the element of type `dtype` at `src`. i64 values beyond 2^53 lose their low bits.
double load_scalar(DType dtype, const void* src);
// Writes `value` as an element of type `dtype` at `dst`: floats round to nearest (f16/bf16 by way
// of f32), integers truncate toward zero and saturate at their range (NaN gives 0), bool is
// value != 0.
void store_scalar(DType dtype, double value, void* dst);

}  // namespace tessel
