// Masks, tile-index proofs and loop limits (see infer_bounds.h).
#include "tile/passes/infer_bounds.h"

#include <map>
#include <set>

#include "tile/ir/printer.h"
#include "tile/ir/visitor.h"
#include "tile/passes/simplify.h"

namespace tessel::tile {

namespace {

// A closed range of integer values; nullopt ends mean unbounded.
struct Interval {
  std::optional<int64_t> lo, hi;
};

std::optional<int64_t> add(std::optional<int64_t> a, std::optional<int64_t> b) {
  if (!a || !b) return std::nullopt;
  int64_t r = 0;
  if (__builtin_add_overflow(*a, *b, &r)) return std::nullopt;
  return r;
}
std::optional<int64_t> mul(std::optional<int64_t> a, std::optional<int64_t> b) {
  if (!a || !b) return std::nullopt;
  int64_t r = 0;
  if (__builtin_mul_overflow(*a, *b, &r)) return std::nullopt;
  return r;
}
std::optional<int64_t> neg(std::optional<int64_t> a) {
  if (!a || *a == INT64_MIN) return std::nullopt;
  return -*a;
}

class Ranges {
 public:
  void set(const std::string& name, Interval i) { env_[name] = i; }

  Interval of(const Expr& e) const {
    if (auto c = const_int(e)) return {*c, *c};
    if (const Var* v = e->as<Var>()) {
      auto it = env_.find(v->name);
      if (it != env_.end()) return it->second;
      if (v->var_kind == VarKind::kSize) return {1, std::nullopt};
      if (v->var_kind == VarKind::kBlock) return {0, std::nullopt};
      return {};
    }
    if (const Cast* c = e->as<Cast>()) return c->type.is_int() && c->a->type.is_int() ? of(c->a) : Interval{};
    const Binary* b = e->as<Binary>();
    if (!b || !b->type.is_int()) return {};
    Interval x = of(b->a), y = of(b->b);
    auto nonneg = [](const Interval& i) { return i.lo && *i.lo >= 0; };
    switch (b->op) {
      case BinaryOp::kAdd: return {add(x.lo, y.lo), add(x.hi, y.hi)};
      case BinaryOp::kSub: return {add(x.lo, neg(y.hi)), add(x.hi, neg(y.lo))};
      case BinaryOp::kMul:
        if (nonneg(x) && nonneg(y)) return {mul(x.lo, y.lo), mul(x.hi, y.hi)};
        return {};
      case BinaryOp::kDiv:
      case BinaryOp::kCDiv:
        if (nonneg(x) && y.lo && *y.lo > 0) {
          std::optional<int64_t> hi = x.hi ? std::optional<int64_t>(b->op == BinaryOp::kDiv ? *x.hi / *y.lo : (*x.hi + *y.lo - 1) / *y.lo) : std::nullopt;
          return {0, hi};
        }
        return {};
      case BinaryOp::kMod:
        if (nonneg(x) && y.hi && y.lo && *y.lo > 0) return {0, *y.hi - 1};
        return {};
      case BinaryOp::kMin:
        return {x.lo && y.lo ? std::optional<int64_t>(std::min(*x.lo, *y.lo)) : std::nullopt,
                x.hi && y.hi ? std::optional<int64_t>(std::min(*x.hi, *y.hi)) : (x.hi ? x.hi : y.hi)};
      case BinaryOp::kMax:
        return {x.lo && y.lo ? std::optional<int64_t>(std::max(*x.lo, *y.lo)) : (x.lo ? x.lo : y.lo),
                x.hi && y.hi ? std::optional<int64_t>(std::max(*x.hi, *y.hi)) : std::nullopt};
      default: return {};
    }
  }

 private:
  std::map<std::string, Interval> env_;
};

Expr conj(const Expr& a, const Expr& b) {
  if (!a) return b;
  return Binary::make(BinaryOp::kAnd, a, b, b->loc);
}

// The conjuncts of a predicate a && b && c.
void split_conj(const Expr& p, std::vector<Expr>* out) {
  if (const Binary* b = p->as<Binary>(); b && b->op == BinaryOp::kAnd) {
    split_conj(b->a, out);
    split_conj(b->b, out);
  } else {
    out->push_back(p);
  }
}

struct FreeVars : IRVisitor {
  std::set<std::string> names;
  void visit_node(const Var* v) override { names.insert(v->name); }
};

class BoundsInference : public IRMutator {
 public:
  Status status;

 protected:
  using IRMutator::mutate_node;

  void fail(Status s) {
    if (status.ok()) status = std::move(s);
  }

  // The in-bounds predicate of a global access, or null when it provably holds.
  Expr predicate(const Buffer& b, const std::vector<Expr>& idx, const SourceLoc& loc) {
    Expr p;
    for (size_t d = 0; d < idx.size(); ++d) {
      Interval r = ranges_.of(idx[d]);
      if (!r.lo || *r.lo < 0)
        p = conj(p, Binary::make(BinaryOp::kGe, idx[d], make_int(0), loc));
      auto size = const_int(b->shape[d]);
      if (!(size && r.hi && *r.hi < *size) && !below_by_grid(idx[d], b->shape[d]))
        p = conj(p, Binary::make(BinaryOp::kLt, idx[d], b->shape[d], loc));
    }
    return p;
  }

  // A block index of a grid dimension whose extent is exactly `size`: `grid (D0) as (z)`.
  bool below_by_grid(const Expr& idx, const Expr& size) const {
    const Var* v = idx->as<Var>();
    if (!v || v->var_kind != VarKind::kBlock) return false;
    auto it = grid_extents_.find(v->name);
    return it != grid_extents_.end() && to_string(it->second) == to_string(size);
  }

  void check_tile_access(const Buffer& b, const std::vector<Expr>& idx, const SourceLoc& loc) {
    for (size_t d = 0; d < idx.size(); ++d) {
      int64_t size = b->const_dim(static_cast<int>(d));
      Interval r = ranges_.of(idx[d]);
      if (r.lo && *r.lo >= 0 && r.hi && *r.hi < size) continue;
      std::string reach;
      if (r.lo && *r.lo < 0) reach = fmt::format("; it can be {}", *r.lo);
      else if (r.hi && *r.hi >= size) reach = fmt::format("; it can reach {}", *r.hi);
      else reach = "; its range is not known at compile time";
      fail(error_at(loc, "index {} of tile '{}' ({}) may leave [0, {}){}", d, b->name,
                    to_string(idx[d]), size, reach));
      return;
    }
  }

  Expr mutate_node(const Load* n, const Expr& self) override {
    Expr m = IRMutator::mutate_node(n, self);
    const Load* l = m->as<Load>();
    if (l->buffer->scope != Scope::kGlobal) {
      check_tile_access(l->buffer, l->indices, l->loc);
      return m;
    }
    Expr p = predicate(l->buffer, l->indices, l->loc);
    if (!p) return Load::make(l->buffer, l->indices, l->loc);
    Expr other = l->other ? l->other
                          : (l->type.is_float() ? FloatImm::make(0, l->type, l->loc) : IntImm::make(0, l->type, l->loc));
    return Load::make(l->buffer, l->indices, l->loc, p, other);
  }

  Stmt mutate_node(const Store* n, const Stmt& self) override {
    Stmt m = IRMutator::mutate_node(n, self);
    const Store* s = m->as<Store>();
    if (s->buffer->scope != Scope::kGlobal) {
      check_tile_access(s->buffer, s->indices, s->loc);
      return m;
    }
    return Store::make(s->buffer, s->indices, s->value, s->loc, predicate(s->buffer, s->indices, s->loc));
  }

  Stmt mutate_node(const Let* n, const Stmt& self) override {
    Stmt m = IRMutator::mutate_node(n, self);
    const Let* l = m->as<Let>();
    if (l->value->type.is_int()) ranges_.set(l->var->as<Var>()->name, ranges_.of(l->value));
    lets_[l->var->as<Var>()->name] = l->value;
    return m;
  }

  Stmt mutate_node(const Grid* n, const Stmt& self) override {
    for (size_t d = 0; d < n->vars.size(); ++d) grid_extents_[n->vars[d]->as<Var>()->name] = n->extents[d];
    for (size_t d = 0; d < n->vars.size(); ++d) {
      Interval r{0, std::nullopt};
      if (auto e = const_int(n->extents[d])) r.hi = *e - 1;
      ranges_.set(n->vars[d]->as<Var>()->name, r);
    }
    return IRMutator::mutate_node(n, self);
  }

  Stmt mutate_node(const For* n, const Stmt& self) override {
    Interval r{0, std::nullopt};
    if (auto e = const_int(n->extent)) r.hi = *e - 1;
    ranges_.set(n->var->as<Var>()->name, r);
    return IRMutator::mutate_node(n, self);
  }

  Stmt mutate_node(const Parallel* n, const Stmt& self) override {
    for (size_t d = 0; d < n->vars.size(); ++d) {
      Interval r{0, std::nullopt};
      if (auto e = const_int(n->extents[d])) r.hi = *e - 1;
      ranges_.set(n->vars[d]->as<Var>()->name, r);
    }
    Stmt m = IRMutator::mutate_node(n, self);
    if (!status.ok()) return m;
    return clip(m);
  }

  // ----- loop limits

  // `e` with the lets defined inside the loop replaced by their values.
  Expr expand(const Expr& e, const std::set<std::string>& inner_lets) {
    struct Expander : IRMutator {
      BoundsInference* self;
      const std::set<std::string>* inner;
      using IRMutator::mutate_node;
      Expr mutate_node(const Var* v, const Expr& e) override {
        if (inner->count(v->name)) return mutate(self->lets_.at(v->name));
        return e;
      }
    } ex;
    ex.self = this;
    ex.inner = &inner_lets;
    return ex.mutate(e);
  }

  // If `e` is `base + v` (or `v`) with base free of the loop's own variables, its base.
  static std::optional<Expr> base_of(const Expr& e, const std::string& v, const std::set<std::string>& loop_vars) {
    auto independent = [&](const Expr& x) {
      FreeVars f;
      f.visit(x);
      for (const std::string& n : f.names)
        if (loop_vars.count(n)) return false;
      return true;
    };
    if (const Var* var = e->as<Var>(); var && var->name == v) return make_int(0);
    const Binary* b = e->as<Binary>();
    if (!b || b->op != BinaryOp::kAdd) return std::nullopt;
    if (const Var* x = b->b->as<Var>(); x && x->name == v && independent(b->a)) return b->a;
    if (const Var* x = b->a->as<Var>(); x && x->name == v && independent(b->b)) return b->b;
    return std::nullopt;
  }

  struct Effects : IRVisitor {
    std::vector<const Store*> global_stores;
    bool tile_store = false;
    std::set<std::string> lets, loop_vars;
    void visit_node(const Store* s) override {
      if (s->buffer->scope == Scope::kGlobal) global_stores.push_back(s);
      else tile_store = true;
      IRVisitor::visit_node(s);
    }
    void visit_node(const Let* l) override {
      lets.insert(l->var->as<Var>()->name);
      IRVisitor::visit_node(l);
    }
    void visit_node(const For* f) override {
      loop_vars.insert(f->var->as<Var>()->name);
      IRVisitor::visit_node(f);
    }
  };

  // For a conjunct `x < D` with x = base + v: the text "base < D" that identifies the bound.
  std::optional<std::pair<std::string, Expr>> bound_key(const Expr& c, const std::string& v,
                                                        const Effects& fx,
                                                        const std::set<std::string>& loop_vars) {
    const Binary* b = c->as<Binary>();
    if (!b || b->op != BinaryOp::kLt) return std::nullopt;
    auto base = base_of(expand(b->a, fx.lets), v, loop_vars);
    if (!base) return std::nullopt;
    Expr room = simplify(Binary::make(BinaryOp::kSub, b->b, *base, c->loc));
    return std::make_pair(to_string(*base) + " < " + to_string(b->b), room);
  }

  // Limits for a parallel loop whose only effects are masked global stores (see the header).
  Stmt clip(const Stmt& m) {
    const Parallel* p = m->as<Parallel>();
    Effects fx;
    fx.visit(p->body);
    if (fx.tile_store || fx.global_stores.empty()) return m;
    std::set<std::string> loop_vars = fx.loop_vars;
    for (const Expr& v : p->vars) loop_vars.insert(v->as<Var>()->name);
    std::vector<Expr> limits = p->extents;
    std::vector<std::string> keys(p->vars.size());
    bool any = false;
    for (size_t d = 0; d < p->vars.size(); ++d) {
      const std::string& v = p->vars[d]->as<Var>()->name;
      std::optional<std::pair<std::string, Expr>> chosen;
      bool all = true;
      for (const Store* s : fx.global_stores) {
        bool found = false;
        std::vector<Expr> cs;
        if (s->predicate) split_conj(s->predicate, &cs);
        for (const Expr& c : cs) {
          auto k = bound_key(c, v, fx, loop_vars);
          if (!k || (chosen && k->first != chosen->first)) continue;
          if (!chosen) chosen = k;
          found = true;
          break;
        }
        if (!found) {
          all = false;
          break;
        }
      }
      if (!all || !chosen) continue;
      limits[d] = simplify(Binary::make(BinaryOp::kMin, p->extents[d], chosen->second, p->loc));
      keys[d] = chosen->first;
      any = true;
    }
    if (!any) return m;
    // The limits imply those conjuncts; drop them from the stores, and from loads at the same
    // places.
    struct DropImplied : IRMutator {
      BoundsInference* self;
      const Parallel* p;
      const Effects* fx;
      const std::set<std::string>* loop_vars;
      const std::vector<std::string>* keys;
      using IRMutator::mutate_node;
      Expr kept(const Expr& predicate) {
        std::vector<Expr> cs;
        split_conj(predicate, &cs);
        Expr out;
        for (const Expr& c : cs) {
          bool implied = false;
          for (size_t d = 0; d < p->vars.size() && !implied; ++d) {
            if ((*keys)[d].empty()) continue;
            auto k = self->bound_key(c, p->vars[d]->as<Var>()->name, *fx, *loop_vars);
            implied = k && k->first == (*keys)[d];
          }
          if (!implied) out = conj(out, c);
        }
        return out;
      }
      Stmt mutate_node(const Store* s, const Stmt& st) override {
        Stmt m = IRMutator::mutate_node(s, st);
        const Store* n = m->as<Store>();
        if (n->buffer->scope != Scope::kGlobal || !n->predicate) return m;
        return Store::make(n->buffer, n->indices, n->value, n->loc, kept(n->predicate));
      }
      Expr mutate_node(const Load* l, const Expr& e) override {
        Expr m = IRMutator::mutate_node(l, e);
        const Load* n = m->as<Load>();
        if (n->buffer->scope != Scope::kGlobal || !n->predicate) return m;
        Expr p = kept(n->predicate);
        return p ? Load::make(n->buffer, n->indices, n->loc, p, n->other) : Load::make(n->buffer, n->indices, n->loc);
      }
    } drop;
    drop.self = this;
    drop.p = p;
    drop.fx = &fx;
    drop.loop_vars = &loop_vars;
    drop.keys = &keys;
    return Parallel::make(p->vars, p->extents, drop.mutate(p->body), p->loc, limits);
  }

 private:
  Ranges ranges_;
  std::map<std::string, Expr> lets_;
  std::map<std::string, Expr> grid_extents_;
};

}  // namespace

Expected<Kernel> infer_bounds(const Kernel& kernel) {
  BoundsInference b;
  Kernel out = kernel;
  out.body = b.mutate(kernel.body);
  if (!b.status.ok()) return b.status;
  return out;
}

}  // namespace tessel::tile
