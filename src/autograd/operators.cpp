// Arithmetic operators on variables (see functional.h): each unwraps its operands, passing the
// first error on, and runs the recorded op. A double becomes a 0-d constant on the other
// operand's device, which broadcasting spreads and which needs no gradient: of the operand's
// dtype, or f32 with an integer operand, since a double is a float scalar in PyTorch's promotion
// (int + 2.5 and int + 2.0 are floats; before, the constant took the integer dtype and 2.5 was
// silently truncated to 2).
#include "autograd/functional.h"

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

Expected<Variable> scaled(const Expected<Variable>& a, double factor) {
  if (!a.ok()) return a.status();
  return scale(*a, factor);
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
  return scaled(a, -1.0);
}

}  // namespace tessel::autograd
