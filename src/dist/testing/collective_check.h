// Test-only: known inputs and independently computed expected outputs for collectives.
//
// Rank r's element i is a small whole number chosen by (type, op, r, i), so that it is exact in
// every type and sums and products of up to 8 ranks stay exact in f16 and bf16 too. The expected
// result is folded over the ranks in double (floats) or exact 64-bit integers (wrapped to the
// type's width at the end), then rounded to the type by code written here, not by tessel's
// conversions. Only avg on floats rounds, so only it gets a tolerance (one unit in the last
// place of the type).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>

#include "dist/types.h"

namespace tessel::dist::testing {

inline bool is_unsigned(DataType t) {
  return t == DataType::kUint8 || t == DataType::kUint32 || t == DataType::kUint64;
}

// ---- element access, independent of tessel's conversion code ----------------------------------

inline float bf16_bits_to_float(uint16_t b) {
  uint32_t w = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &w, 4);
  return f;
}

// The nearer of the two bfloat16 values around x; ties go to the even one.
inline uint16_t float_to_bf16_bits(float x) {
  if (std::isnan(x)) return 0x7FC0;
  uint32_t w;
  std::memcpy(&w, &x, 4);
  if (std::isinf(x)) return static_cast<uint16_t>(w >> 16);  // no neighbour to be nearer to
  uint16_t down = static_cast<uint16_t>(w >> 16), up = static_cast<uint16_t>(down + 1);
  double d_down = std::abs(static_cast<double>(bf16_bits_to_float(down)) - x);
  double d_up = std::abs(static_cast<double>(bf16_bits_to_float(up)) - x);
  if (d_down != d_up) return d_down < d_up ? down : up;
  return (down & 1) ? up : down;
}

inline void store_value(DataType type, void* base, size_t i, double v) {
  switch (type) {
    case DataType::kInt8:
      static_cast<int8_t*>(base)[i] = static_cast<int8_t>(static_cast<int64_t>(v));
      break;
    case DataType::kUint8:
      static_cast<uint8_t*>(base)[i] = static_cast<uint8_t>(static_cast<int64_t>(v));
      break;
    case DataType::kInt32:
      static_cast<int32_t*>(base)[i] = static_cast<int32_t>(static_cast<int64_t>(v));
      break;
    case DataType::kUint32:
      static_cast<uint32_t*>(base)[i] = static_cast<uint32_t>(static_cast<int64_t>(v));
      break;
    case DataType::kInt64:
      static_cast<int64_t*>(base)[i] = static_cast<int64_t>(v);
      break;
    case DataType::kUint64:
      static_cast<uint64_t*>(base)[i] = static_cast<uint64_t>(static_cast<int64_t>(v));
      break;
    case DataType::kFloat16: {
      _Float16 h = static_cast<_Float16>(v);
      std::memcpy(static_cast<uint16_t*>(base) + i, &h, 2);
      break;
    }
    case DataType::kFloat32:
      static_cast<float*>(base)[i] = static_cast<float>(v);
      break;
    case DataType::kFloat64:
      static_cast<double*>(base)[i] = v;
      break;
    case DataType::kBfloat16:
      static_cast<uint16_t*>(base)[i] = float_to_bf16_bits(static_cast<float>(v));
      break;
  }
}

inline double load_value(DataType type, const void* base, size_t i) {
  switch (type) {
    case DataType::kInt8:
      return static_cast<const int8_t*>(base)[i];
    case DataType::kUint8:
      return static_cast<const uint8_t*>(base)[i];
    case DataType::kInt32:
      return static_cast<const int32_t*>(base)[i];
    case DataType::kUint32:
      return static_cast<const uint32_t*>(base)[i];
    case DataType::kInt64:
      return static_cast<double>(static_cast<const int64_t*>(base)[i]);
    case DataType::kUint64:
      return static_cast<double>(static_cast<const uint64_t*>(base)[i]);
    case DataType::kFloat16: {
      _Float16 h;
      std::memcpy(&h, static_cast<const uint16_t*>(base) + i, 2);
      return static_cast<double>(h);
    }
    case DataType::kFloat32:
      return static_cast<const float*>(base)[i];
    case DataType::kFloat64:
      return static_cast<const double*>(base)[i];
    case DataType::kBfloat16:
      return bf16_bits_to_float(static_cast<const uint16_t*>(base)[i]);
  }
  return 0;
}

// ---- inputs ----------------------------------------------------------------------------------

// Rank r's element i for a reduction `op`. Sums of 8 ranks stay within [-40, 80], products
// within 2^8, and extremes within [-100, 200]: exact in every type (integers may wrap, and the
// expectation wraps the same way).
inline double reduce_input(DataType type, RedOp op, int r, size_t i) {
  const uint64_t k = i;
  switch (op) {
    case RedOp::kSum:
    case RedOp::kAvg: {
      double v = static_cast<double>((k * 7 + r * 13) % 11);
      return is_unsigned(type) ? v : v - 5;
    }
    case RedOp::kProd: {
      double v = (k + 3 * r) % 4 == 0 ? 2 : 1;
      return !is_unsigned(type) && (k + r) % 5 == 0 ? -v : v;
    }
    case RedOp::kMax:
    case RedOp::kMin: {
      double v = static_cast<double>((k * 31 + r * 17) % 201);
      return is_unsigned(type) ? v : v - 100;
    }
  }
  return 0;
}

// Inputs repeat along i with this period (the expectations are tabulated over one period).
inline size_t input_period(RedOp op) {
  switch (op) {
    case RedOp::kProd:
      return 20;
    case RedOp::kMax:
    case RedOp::kMin:
      return 201;
    default:
      return 11;
  }
}

// Rank r's element i for broadcast, all_gather and send/recv: fits every type.
inline double copy_input(int r, size_t i) {
  return static_cast<double>((i * 3 + r * 7) % 100);
}

inline void fill(DataType type, void* base, size_t count, size_t first_index,
                 double (*value)(DataType, RedOp, int, size_t), RedOp op, int r) {
  for (size_t i = 0; i < count; ++i)
    store_value(type, base, i, value(type, op, r, first_index + i));
}

// ---- expectations ----------------------------------------------------------------------------

// acc op v for one pair of elements (avg folds as a sum; the caller divides).
template <typename T>
T combine(RedOp op, T acc, T v) {
  switch (op) {
    case RedOp::kSum:
    case RedOp::kAvg:
      return acc + v;
    case RedOp::kProd:
      return acc * v;
    case RedOp::kMax:
      return std::max(acc, v);
    case RedOp::kMin:
      return std::min(acc, v);
  }
  return acc;
}

// The exact result of reducing element i over ranks 0..n-1.
inline double exact_reduction(DataType type, RedOp op, int n, size_t i) {
  if (!is_floating(type)) {
    int64_t acc = static_cast<int64_t>(reduce_input(type, op, 0, i));
    for (int r = 1; r < n; ++r)
      acc = combine(op, acc, static_cast<int64_t>(reduce_input(type, op, r, i)));
    if (op == RedOp::kAvg) acc /= n;  // truncates toward zero
    return static_cast<double>(acc);
  }
  double acc = reduce_input(type, op, 0, i);
  for (int r = 1; r < n; ++r) acc = combine(op, acc, reduce_input(type, op, r, i));
  return op == RedOp::kAvg ? acc / n : acc;
}

// What the type holds once `exact` is stored: integers wrap to their width, floats round.
inline double as_stored(DataType type, double exact) {
  unsigned char cell[8];
  if (!is_floating(type)) {
    uint64_t bits = static_cast<uint64_t>(static_cast<int64_t>(exact));
    switch (type) {
      case DataType::kInt8:
        return static_cast<int8_t>(static_cast<uint8_t>(bits));
      case DataType::kUint8:
        return static_cast<uint8_t>(bits);
      case DataType::kInt32:
        return static_cast<int32_t>(static_cast<uint32_t>(bits));
      case DataType::kUint32:
        return static_cast<uint32_t>(bits);
      case DataType::kInt64:
        return static_cast<double>(static_cast<int64_t>(bits));
      default:
        return static_cast<double>(bits);
    }
  }
  store_value(type, cell, 0, exact);
  return load_value(type, cell, 0);
}

// Allowed distance from the expectation: one unit in the last place for avg on floats.
inline double tolerance(DataType type, RedOp op, double expected) {
  if (!is_floating(type) || op != RedOp::kAvg) return 0;
  double ulp = type == DataType::kFloat16    ? 0x1.0p-10
               : type == DataType::kBfloat16 ? 0x1.0p-7
               : type == DataType::kFloat32  ? 0x1.0p-23
                                             : 0x1.0p-52;
  return ulp * std::max(1.0, std::abs(expected));
}

// Counts elements of `got` that differ from `want(i)`; describes the first in `first`.
template <typename Want, typename Tol>
size_t count_mismatches(DataType type, const void* got, size_t count, Want want, Tol tol,
                        std::string* first) {
  size_t bad = 0;
  for (size_t i = 0; i < count; ++i) {
    double w = want(i), g = load_value(type, got, i);
    if (std::abs(g - w) <= tol(w)) continue;
    if (bad++ == 0 && first)
      *first = "element " + std::to_string(i) + ": got " + std::to_string(g) + ", expected " +
               std::to_string(w);
  }
  return bad;
}

}  // namespace tessel::dist::testing
