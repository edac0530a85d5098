// Arithmetic operators on variables (see functional.h): each unwraps its operands, passing the
// first error on, and runs the recorded op. A scalar becomes a 0-d constant on the other operand's
// device, which broadcasting spreads and which needs no gradient, typed by PyTorch's promotion: a
// double is a float scalar (the operand's float dtype, or f32 with an integer operand: int + 2.5
// is 3.5, where the constant once took the integer dtype and 2.5 was silently truncated to 2); a
// whole number keeps an integer operand's dtype (int + 2 is int) and must fit it.
#include "autograd/functional.h"

#include <cstdint>

namespace tessel::autograd {
namespace {

Expected<Variable> constant_like(const Variable& like, double value) {
  const DType own = like.data().dtype();
  const DType dtype = is_floating_point(own) || own == DType::kBool ? own : DType::kF32;
  TESSEL_ASSIGN_OR_RETURN(Tensor t, Tensor::full({}, value, dtype, like.data().device()));
  return Variable(std::move(t));
}

using Binary = Expected<Variable> (*)(const Variable&, const Variable&);

Expected<Variable> both(Binary op, const Expected<Variable>& a, const Expected<Variable>& b) {
  if (!a.ok()) return a.status();
  if (!b.ok()) return b.status();
  return op(*a, *b);
}

Expected<Variable> with_scalar_after(Binary op, const Expected<Variable>& a, double b) {
  if (!a.ok()) return a.status();
  TESSEL_ASSIGN_OR_RETURN(Variable c, constant_like(*a, b));
  return op(*a, c);
}

Expected<Variable> with_scalar_before(Binary op, double a, const Expected<Variable>& b) {
  if (!b.ok()) return b.status();
  TESSEL_ASSIGN_OR_RETURN(Variable c, constant_like(*b, a));
  return op(c, *b);
}

// x * factor: a scale for a float variable; for an integer one a product with the f32 constant,
// which promotes as PyTorch does (int * 2.5 is f32).
Expected<Variable> scaled(const Expected<Variable>& a, double factor) {
  if (!a.ok()) return a.status();
  if (!is_floating_point(a->data().dtype())) return with_scalar_after(mul, a, factor);
  return scale(*a, factor);
}

// A whole number as a constant of an integer variable's dtype (i64 for bool), checked to fit.
Expected<Variable> whole_constant_like(const Variable& like, int64_t value) {
  const DType own = like.data().dtype();
  const DType dtype = own == DType::kBool ? DType::kI64 : own;
  int64_t lo = INT64_MIN, hi = INT64_MAX;
  switch (dtype) {
    case DType::kI8:
      lo = INT8_MIN, hi = INT8_MAX;
      break;
    case DType::kU8:
      lo = 0, hi = UINT8_MAX;
      break;
    case DType::kI16:
      lo = INT16_MIN, hi = INT16_MAX;
      break;
    case DType::kI32:
      lo = INT32_MIN, hi = INT32_MAX;
      break;
    default:
      break;
  }
  if (value < lo || value > hi)
    return invalid_argument("value {} cannot be converted to type {} without overflow", value,
                            dtype_name(dtype));
  TESSEL_ASSIGN_OR_RETURN(
      Tensor t, Tensor::full({}, static_cast<double>(value), dtype, like.data().device()));
  return Variable(std::move(t));
}

// `op` with a whole number after (or, `before`, ahead of) the variable.
Expected<Variable> with_whole(Binary op, const Expected<Variable>& a, int64_t b, bool before) {
  if (!a.ok()) return a.status();
  if (is_floating_point(a->data().dtype())) {
    TESSEL_ASSIGN_OR_RETURN(Variable c, constant_like(*a, static_cast<double>(b)));
    return before ? op(c, *a) : op(*a, c);
  }
  TESSEL_ASSIGN_OR_RETURN(Variable c, whole_constant_like(*a, b));
  return before ? op(c, *a) : op(*a, c);
}

}  // namespace

Expected<Variable> operator+(const Expected<Variable>& a, const Expected<Variable>& b) {
  return both(add, a, b);
}
Expected<Variable> operator-(const Expected<Variable>& a, const Expected<Variable>& b) {
  return both(sub, a, b);
}
Expected<Variable> operator*(const Expected<Variable>& a, const Expected<Variable>& b) {
  return both(mul, a, b);
}
Expected<Variable> operator/(const Expected<Variable>& a, const Expected<Variable>& b) {
  return both(div, a, b);
}
Expected<Variable> operator+(const Expected<Variable>& a, double b) {
  return with_scalar_after(add, a, b);
}
Expected<Variable> operator-(const Expected<Variable>& a, double b) {
  return with_scalar_after(sub, a, b);
}
Expected<Variable> operator*(const Expected<Variable>& a, double b) {
  return scaled(a, b);
}
Expected<Variable> operator/(const Expected<Variable>& a, double b) {
  return with_scalar_after(div, a, b);
}
Expected<Variable> operator+(double a, const Expected<Variable>& b) {
  return with_scalar_before(add, a, b);
}
Expected<Variable> operator-(double a, const Expected<Variable>& b) {
  return with_scalar_before(sub, a, b);
}
Expected<Variable> operator*(double a, const Expected<Variable>& b) {
  return scaled(b, a);
}
Expected<Variable> operator/(double a, const Expected<Variable>& b) {
  return with_scalar_before(div, a, b);
}
Expected<Variable> operator-(const Expected<Variable>& a) {
  if (a.ok() && !is_floating_point(a->data().dtype())) return with_whole(sub, a, 0, true);
  return scaled(a, -1.0);
}
Expected<Variable> add_whole(const Expected<Variable>& a, int64_t b) {
  return with_whole(add, a, b, false);
}
Expected<Variable> sub_whole(const Expected<Variable>& a, int64_t b) {
  return with_whole(sub, a, b, false);
}
Expected<Variable> rsub_whole(int64_t a, const Expected<Variable>& b) {
  return with_whole(sub, b, a, true);
}
Expected<Variable> mul_whole(const Expected<Variable>& a, int64_t b) {
  if (a.ok() && is_floating_point(a->data().dtype())) return scaled(a, static_cast<double>(b));
  return with_whole(mul, a, b, false);
}

}  // namespace tessel::autograd
