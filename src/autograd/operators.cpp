// Arithmetic operators on variables (see functional.h): each unwraps its operands, passing the
// first error on, and runs the recorded op. A double becomes a one-element constant of the other
// operand's dtype on its device, which broadcasting spreads and which needs no gradient.
#include "autograd/functional.h"

namespace tessel::autograd {
namespace {

Expected<Variable> constant_like(const Variable& like, double value) {
  TESSEL_ASSIGN_OR_RETURN(Tensor t,
                          Tensor::full({}, value, like.data().dtype(), like.data().device()));
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
