// Element types of the tile language. A DType is either a concrete scalar type (f32, bf16, i64,
// ...) or a dtype parameter of a kernel (`T` in `kernel k<T: dtype = f32>`), which the specialize
// pass replaces by a concrete type. A dtype parameter stands for a type of its default's class,
// float (f16, bf16, f32, f64) or integer (i8, u8, i16, i32, i64), and may only be specialised
// within that class, so type checking before specialisation gives the same answers as after it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace tessel::tile {

// kI16 comes last so that the older numbers stay as they were.
enum class ScalarType : uint8_t { kBool, kI8, kU8, kI32, kI64, kF16, kBF16, kF32, kF64, kI16 };

class DType {
 public:
  DType() = default;
  DType(ScalarType scalar) : scalar_(scalar) {}  // NOLINT: a scalar type is a dtype
  // A parameter of the class of `like` (its default): float or integer.
  static DType param(std::string name, ScalarType like = ScalarType::kF32) {
    DType t(like);
    t.param_ = std::move(name);
    return t;
  }

  bool is_param() const { return !param_.empty(); }
  const std::string& param_name() const { return param_; }
  // The concrete type; for a parameter, its default (which only says the class).
  ScalarType scalar() const { return scalar_; }

  bool is_bool() const { return !is_param() && scalar_ == ScalarType::kBool; }
  bool is_int() const;    // i8, u8, i16, i32, i64 and the integer dtype parameters
  bool is_float() const;  // f16, bf16, f32, f64 and the float dtype parameters
  // f16 and bf16: stored in 16 bits, computed in f32 by every code generator.
  bool is_half() const;
  int bytes() const;  // storage size; a dtype parameter counts as 4 until specialised

  bool operator==(const DType& o) const { return scalar_ == o.scalar_ && param_ == o.param_; }
  bool operator!=(const DType& o) const { return !(*this == o); }

  std::string name() const;

 private:
  ScalarType scalar_ = ScalarType::kF32;
  std::string param_;
};

inline const DType kBool{ScalarType::kBool};
inline const DType kI32{ScalarType::kI32};
inline const DType kI64{ScalarType::kI64};
inline const DType kF16{ScalarType::kF16};
inline const DType kBF16{ScalarType::kBF16};
inline const DType kF32{ScalarType::kF32};

// Whether `v` is a value of the integer (or bool) type `t`: i32 holds [-2^31, 2^31), u8 [0, 256).
bool fits_int_type(int64_t v, const DType& t);

// Whether `a` may stand where a dtype parameter defaulting to `b` is declared: both float or
// both integer types.
bool same_dtype_class(const DType& a, const DType& b);
// "an integer dtype (i8, u8, i16, i32, i64)" or "a float dtype (f32, f16, bf16, f64)", for errors.
const char* dtype_class_name(const DType& t);

// "f32" -> kF32; nullopt for anything that is not a scalar type name.
std::optional<ScalarType> scalar_type_from_name(std::string_view name);
const char* scalar_type_name(ScalarType t);

}  // namespace tessel::tile
