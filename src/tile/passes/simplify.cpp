// Constant folding for the tile IR (see simplify.h).
#include "tile/passes/simplify.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "tile/ir/visitor.h"

namespace tessel::tile {

namespace {

std::optional<double> const_float(const Expr& e) {
  if (const FloatImm* f = e->as<FloatImm>()) return f->value;
  return std::nullopt;
}

// Folding is checked: an operation whose exact result does not fit the type (overflow,
// INT64_MIN / -1), a division by zero or a cdiv by a non-positive number is left unfolded, and
// check_integers reports it with its location instead of the compiler computing garbage.
std::optional<int64_t> fold_int(BinaryOp op, int64_t a, int64_t b) {
  int64_t r = 0;
  switch (op) {
    case BinaryOp::kAdd: return __builtin_add_overflow(a, b, &r) ? std::nullopt : std::optional(r);
    case BinaryOp::kSub: return __builtin_sub_overflow(a, b, &r) ? std::nullopt : std::optional(r);
    case BinaryOp::kMul: return __builtin_mul_overflow(a, b, &r) ? std::nullopt : std::optional(r);
    case BinaryOp::kDiv:
    case BinaryOp::kMod:
      if (b == 0 || (a == std::numeric_limits<int64_t>::min() && b == -1)) return std::nullopt;
      return op == BinaryOp::kDiv ? a / b : a % b;
    case BinaryOp::kMin: return std::min(a, b);
    case BinaryOp::kMax: return std::max(a, b);
    case BinaryOp::kCDiv:
      if (b <= 0 || __builtin_add_overflow(a, b - 1, &r)) return std::nullopt;
      return r / b;
    case BinaryOp::kLt: return a < b;
    case BinaryOp::kLe: return a <= b;
    case BinaryOp::kGt: return a > b;
    case BinaryOp::kGe: return a >= b;
    case BinaryOp::kEq: return a == b;
    case BinaryOp::kNe: return a != b;
    case BinaryOp::kAnd: return a && b;
    case BinaryOp::kOr: return a || b;
  }
  return std::nullopt;
}

std::optional<double> fold_float(BinaryOp op, double a, double b) {
  switch (op) {
    case BinaryOp::kAdd: return a + b;
    case BinaryOp::kSub: return a - b;
    case BinaryOp::kMul: return a * b;
    case BinaryOp::kDiv: return a / b;
    case BinaryOp::kMin: return std::min(a, b);
    case BinaryOp::kMax: return std::max(a, b);
    default: return std::nullopt;
  }
}

class Simplifier : public IRMutator {
 protected:
  using IRMutator::mutate_node;

  Expr mutate_node(const Binary* n, const Expr& self) override {
    Expr folded = IRMutator::mutate_node(n, self);
    const Binary* b = folded->as<Binary>();
    if (!b) return folded;
    auto ia = const_int(b->a), ib = const_int(b->b);
    if (ia && ib) {
      auto v = fold_int(b->op, *ia, *ib);
      if (v && fits_int_type(*v, b->type)) return IntImm::make(*v, b->type, b->loc);
      return folded;
    }
    auto fa = const_float(b->a), fb = const_float(b->b);
    if (fa && fb) {
      if (is_comparison(b->op)) {
        bool r = b->op == BinaryOp::kLt ? *fa < *fb : b->op == BinaryOp::kLe ? *fa <= *fb
               : b->op == BinaryOp::kGt ? *fa > *fb : b->op == BinaryOp::kGe ? *fa >= *fb
               : b->op == BinaryOp::kEq ? *fa == *fb : *fa != *fb;
        return IntImm::make(r, kBool, b->loc);
      }
      if (auto v = fold_float(b->op, *fa, *fb)) return FloatImm::make(*v, b->type, b->loc);
    }
    bool zero_a = ia == 0 || fa == 0.0, zero_b = ib == 0 || fb == 0.0;
    bool one_a = ia == 1 || fa == 1.0, one_b = ib == 1 || fb == 1.0;
    switch (b->op) {
      case BinaryOp::kAdd:
        if (zero_a) return b->b;
        if (zero_b) return b->a;
        break;
      case BinaryOp::kSub:
        if (zero_b) return b->a;
        break;
      case BinaryOp::kMul:
        if (one_a) return b->b;
        if (one_b) return b->a;
        if (b->type.is_int() && (zero_a || zero_b)) return IntImm::make(0, b->type, b->loc);
        break;
      case BinaryOp::kDiv:
        if (one_b) return b->a;
        break;
      case BinaryOp::kAnd:
        if (ia) return *ia ? b->b : b->a;
        if (ib) return *ib ? b->a : b->b;
        break;
      case BinaryOp::kOr:
        if (ia) return *ia ? b->a : b->b;
        if (ib) return *ib ? b->b : b->a;
        break;
      default: break;
    }
    return folded;
  }

  Expr mutate_node(const Unary* n, const Expr& self) override {
    Expr m = IRMutator::mutate_node(n, self);
    const Unary* u = m->as<Unary>();
    if (!u) return m;
    if (auto i = const_int(u->a)) {
      if (u->op == UnaryOp::kNot) return IntImm::make(!*i, kBool, u->loc);
      int64_t negated = 0;
      if (__builtin_sub_overflow(int64_t{0}, *i, &negated) || !fits_int_type(negated, u->type)) return m;
      return IntImm::make(negated, u->type, u->loc);
    }
    if (auto f = const_float(u->a)) return FloatImm::make(-*f, u->type, u->loc);
    return m;
  }

  Expr mutate_node(const Cast* n, const Expr& self) override {
    Expr m = IRMutator::mutate_node(n, self);
    const Cast* c = m->as<Cast>();
    if (!c) return m;
    if (c->a->type == c->type) return c->a;
    if (auto i = const_int(c->a)) {
      if (c->type.is_float()) return FloatImm::make(static_cast<double>(*i), c->type, c->loc);
      if (c->type.is_int() && fits_int_type(*i, c->type)) return IntImm::make(*i, c->type, c->loc);
    }
    if (auto f = const_float(c->a)) {
      if (c->type.is_float() && !c->type.is_half()) return FloatImm::make(*f, c->type, c->loc);
    }
    return m;
  }

  Expr mutate_node(const Select* n, const Expr& self) override {
    Expr m = IRMutator::mutate_node(n, self);
    const Select* s = m->as<Select>();
    if (!s) return m;
    if (auto c = const_int(s->cond)) return *c ? s->t : s->f;
    return m;
  }

  Stmt mutate_node(const IfThenElse* n, const Stmt& self) override {
    Expr cond = mutate(n->cond);
    if (auto c = const_int(cond)) {
      if (*c) return mutate(n->then_case);
      return n->else_case ? mutate(n->else_case) : Seq::make({}, n->loc);
    }
    return IRMutator::mutate_node(n, self);
  }

  Stmt mutate_node(const Seq* n, const Stmt& self) override {
    Stmt m = IRMutator::mutate_node(n, self);
    // Flatten nested sequences left behind by folded ifs.
    const Seq* s = m->as<Seq>();
    bool nested = false;
    for (const Stmt& c : s->stmts) nested |= c->as<Seq>() != nullptr;
    if (!nested) return m;
    std::vector<Stmt> flat;
    for (const Stmt& c : s->stmts) {
      if (const Seq* inner = c->as<Seq>()) flat.insert(flat.end(), inner->stmts.begin(), inner->stmts.end());
      else flat.push_back(c);
    }
    return Seq::make(std::move(flat), s->loc);
  }
};

}  // namespace

Expr simplify(const Expr& e) { return Simplifier().mutate(e); }
Stmt simplify(const Stmt& s) { return Simplifier().mutate(s); }
Kernel simplify(Kernel k) {
  k.body = simplify(k.body);
  return k;
}

}  // namespace tessel::tile
