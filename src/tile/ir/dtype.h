// Element types of the tile language. A DType is either a concrete scalar type (f32, bf16, i64,
// ...) or a dtype parameter of a kernel (`T` in `kernel k<T: dtype = f32>`), which the specialize
// pass replaces by a concrete type. Dtype parameters always stand for a float type, so type
// checking before specialisation gives the same answers as after it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace tessel::tile {

enum class ScalarType : uint8_t { kBool, kI8, kU8, kI32, kI64, kF16, kBF16, kF32, kF64 };

class DType {
 public:
  DType() = default;
  DType(ScalarType scalar) : scalar_(scalar) {}  // NOLINT: a scalar type is a dtype
  static DType param(std::string name) {
    DType t(ScalarType::kF32);
    t.param_ = std::move(name);
    return t;
  }

  bool is_param() const { return !param_.empty(); }
  const std::string& param_name() const { return param_; }
  // The concrete type; only meaningful when !is_param().
  ScalarType scalar() const { return scalar_; }

  bool is_bool() const { return !is_param() && scalar_ == ScalarType::kBool; }
  bool is_int() const;    // i8, u8, i32, i64
  bool is_float() const;  // f16, bf16, f32, f64 and every dtype parameter
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

// "f32" -> kF32; nullopt for anything that is not a scalar type name.
std::optional<ScalarType> scalar_type_from_name(std::string_view name);
const char* scalar_type_name(ScalarType t);

}  // namespace tessel::tile
