// DType tables (names, sizes, aliases) and the element load/store used by host code.
#include "support/dtype.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <string>

namespace tessel {
namespace {

struct DTypeInfo {
  DType dtype;
  const char* name;
  size_t size;
  bool floating;
  const char* long_name;
};

// In DType order; the static_assert keeps the table and the enum together.
constexpr DTypeInfo kDTypes[] = {
    {DType::kF32, "f32", 4, true, "float32"}, {DType::kF64, "f64", 8, true, "float64"},
    {DType::kF16, "f16", 2, true, "float16"}, {DType::kBF16, "bf16", 2, true, "bfloat16"},
    {DType::kI8, "i8", 1, false, "int8"},     {DType::kU8, "u8", 1, false, "uint8"},
    {DType::kI32, "i32", 4, false, "int32"},  {DType::kI64, "i64", 8, false, "int64"},
    {DType::kBool, "bool", 1, false, "bool"}, {DType::kI16, "i16", 2, false, "int16"},
};
static_assert(sizeof(kDTypes) / sizeof(kDTypes[0]) == kDTypeCount);

const DTypeInfo& info(DType dtype) {
  const auto i = static_cast<size_t>(dtype);
  TESSEL_CHECK(i < static_cast<size_t>(kDTypeCount) && kDTypes[i].dtype == dtype, "bad DType {}",
               i);
  return kDTypes[i];
}

template <typename Int>
Int saturate(double value) {
  if (std::isnan(value)) return 0;
  // Compare in double against the range; the bounds of i64 are not exact doubles, so go through
  // the power of two just past the top.
  constexpr double kLow = static_cast<double>(std::numeric_limits<Int>::min());
  constexpr double kPastHigh = 2.0 * static_cast<double>(std::numeric_limits<Int>::max() / 2 + 1);
  if (value <= kLow) return std::numeric_limits<Int>::min();
  if (value >= kPastHigh) return std::numeric_limits<Int>::max();
  return static_cast<Int>(value);  // truncates toward zero
}

template <typename T>
T load(const void* src) {
  T value;
  std::memcpy(&value, src, sizeof(T));
  return value;
}

template <typename T>
void store(T value, void* dst) {
  std::memcpy(dst, &value, sizeof(T));
}

}  // namespace

const char* dtype_name(DType dtype) {
  return info(dtype).name;
}
size_t dtype_size(DType dtype) {
  return info(dtype).size;
}
bool is_floating_point(DType dtype) {
  return info(dtype).floating;
}

Expected<DType> parse_dtype(std::string_view name) {
  for (const DTypeInfo& d : kDTypes) {
    if (name == d.name || name == d.long_name) return d.dtype;
  }
  if (name == "float") return DType::kF32;
  if (name == "double") return DType::kF64;
  if (name == "half") return DType::kF16;
  std::string known;
  for (const DTypeInfo& d : kDTypes)
    known += std::string(known.empty() ? "" : ", ") + d.name;
  return invalid_argument("unknown dtype '{}': expected one of {}", name, known);
}

double load_scalar(DType dtype, const void* src) {
  switch (dtype) {
    case DType::kF32:
      return load<float>(src);
    case DType::kF64:
      return load<double>(src);
    case DType::kF16:
      return half_bits_to_float(load<uint16_t>(src));
    case DType::kBF16:
      return bfloat16_bits_to_float(load<uint16_t>(src));
    case DType::kI8:
      return load<int8_t>(src);
    case DType::kU8:
      return load<uint8_t>(src);
    case DType::kI16:
      return load<int16_t>(src);
    case DType::kI32:
      return load<int32_t>(src);
    case DType::kI64:
      return static_cast<double>(load<int64_t>(src));
    case DType::kBool:
      return load<uint8_t>(src) != 0 ? 1.0 : 0.0;
  }
  TESSEL_CHECK(false, "bad DType");
  return 0;
}

void store_scalar(DType dtype, double value, void* dst) {
  switch (dtype) {
    case DType::kF32:
      return store(static_cast<float>(value), dst);
    case DType::kF64:
      return store(value, dst);
    case DType::kF16:
      return store(float_to_half_bits(static_cast<float>(value)), dst);
    case DType::kBF16:
      return store(float_to_bfloat16_bits(static_cast<float>(value)), dst);
    case DType::kI8:
      return store(saturate<int8_t>(value), dst);
    case DType::kU8:
      return store(saturate<uint8_t>(value), dst);
    case DType::kI16:
      return store(saturate<int16_t>(value), dst);
    case DType::kI32:
      return store(saturate<int32_t>(value), dst);
    case DType::kI64:
      return store(saturate<int64_t>(value), dst);
    case DType::kBool:
      return store(static_cast<uint8_t>(value != 0), dst);
  }
  TESSEL_CHECK(false, "bad DType");
}

}  // namespace tessel
