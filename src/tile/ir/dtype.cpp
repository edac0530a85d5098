// Names and sizes of the tile language's element types.
#include "tile/ir/dtype.h"

namespace tessel::tile {

namespace {
struct ScalarInfo {
  ScalarType type;
  const char* name;
  int bytes;
};
constexpr ScalarInfo kScalars[] = {
    {ScalarType::kBool, "bool", 1}, {ScalarType::kI8, "i8", 1},     {ScalarType::kU8, "u8", 1},
    {ScalarType::kI32, "i32", 4},   {ScalarType::kI64, "i64", 8},   {ScalarType::kF16, "f16", 2},
    {ScalarType::kBF16, "bf16", 2}, {ScalarType::kF32, "f32", 4},   {ScalarType::kF64, "f64", 8},
    {ScalarType::kI16, "i16", 2},
};
const ScalarInfo& info(ScalarType t) { return kScalars[static_cast<int>(t)]; }
}  // namespace

bool DType::is_int() const {
  return scalar_ == ScalarType::kI8 || scalar_ == ScalarType::kU8 || scalar_ == ScalarType::kI16 ||
         scalar_ == ScalarType::kI32 || scalar_ == ScalarType::kI64;
}

bool DType::is_float() const {
  return scalar_ == ScalarType::kF16 || scalar_ == ScalarType::kBF16 ||
         scalar_ == ScalarType::kF32 || scalar_ == ScalarType::kF64;
}

bool DType::is_half() const {
  return !is_param() && (scalar_ == ScalarType::kF16 || scalar_ == ScalarType::kBF16);
}

int DType::bytes() const { return is_param() ? 4 : info(scalar_).bytes; }

std::string DType::name() const { return is_param() ? param_ : info(scalar_).name; }

std::optional<ScalarType> scalar_type_from_name(std::string_view name) {
  for (const ScalarInfo& s : kScalars)
    if (name == s.name) return s.type;
  return std::nullopt;
}

const char* scalar_type_name(ScalarType t) { return info(t).name; }

bool same_dtype_class(const DType& a, const DType& b) {
  return (a.is_float() && b.is_float()) || (a.is_int() && b.is_int());
}

const char* dtype_class_name(const DType& t) {
  return t.is_int() ? "an integer dtype (i8, u8, i16, i32, i64)"
                    : "a float dtype (f32, f16, bf16, f64)";
}

bool fits_int_type(int64_t v, const DType& t) {
  if (t.is_param()) return false;
  switch (t.scalar()) {
    case ScalarType::kBool: return v == 0 || v == 1;
    case ScalarType::kI8: return v >= -128 && v <= 127;
    case ScalarType::kU8: return v >= 0 && v <= 255;
    case ScalarType::kI16: return v >= INT16_MIN && v <= INT16_MAX;
    case ScalarType::kI32: return v >= INT32_MIN && v <= INT32_MAX;
    case ScalarType::kI64: return true;
    default: return false;
  }
}

}  // namespace tessel::tile
