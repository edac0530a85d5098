// Default traversals of IRVisitor and IRMutator: every child, in source order.
#include "tile/ir/visitor.h"

namespace tessel::tile {

// ----- IRVisitor --------------------------------------------------------------------------------

void IRVisitor::visit(const Expr& e) {
  if (!e) return;
  switch (e->kind) {
#define TESSEL_TILE_VISIT_CASE(name) \
  case NodeKind::k##name:            \
    return visit_node(static_cast<const name*>(e.get()));
    TESSEL_TILE_EXPR_KINDS(TESSEL_TILE_VISIT_CASE)
#undef TESSEL_TILE_VISIT_CASE
    default:
      TESSEL_CHECK(false, "statement kind in an expression");
  }
}

void IRVisitor::visit(const Stmt& s) {
  if (!s) return;
  switch (s->kind) {
#define TESSEL_TILE_VISIT_CASE(name) \
  case NodeKind::k##name:            \
    return visit_node(static_cast<const name*>(s.get()));
    TESSEL_TILE_STMT_KINDS(TESSEL_TILE_VISIT_CASE)
#undef TESSEL_TILE_VISIT_CASE
    default:
      TESSEL_CHECK(false, "expression kind in a statement");
  }
}

void IRVisitor::visit_tile(const TileRef& t) {
  for (const Expr& e : t.origin)
    visit(e);
}

void IRVisitor::visit_node(const IntImm*) {}
void IRVisitor::visit_node(const FloatImm*) {}
void IRVisitor::visit_node(const Var*) {}
void IRVisitor::visit_node(const Binary* n) {
  visit(n->a);
  visit(n->b);
}
void IRVisitor::visit_node(const Unary* n) {
  visit(n->a);
}
void IRVisitor::visit_node(const Call* n) {
  for (const Expr& a : n->args)
    visit(a);
}
void IRVisitor::visit_node(const Cast* n) {
  visit(n->a);
}
void IRVisitor::visit_node(const Select* n) {
  visit(n->cond);
  visit(n->t);
  visit(n->f);
}
void IRVisitor::visit_node(const Load* n) {
  for (const Expr& i : n->indices)
    visit(i);
  visit(n->predicate);
  visit(n->other);
}

void IRVisitor::visit_node(const Seq* n) {
  for (const Stmt& s : n->stmts)
    visit(s);
}
void IRVisitor::visit_node(const Grid* n) {
  for (const Expr& e : n->extents)
    visit(e);
  for (const Expr& e : n->threads)
    visit(e);
  visit(n->body);
}
void IRVisitor::visit_node(const Alloc*) {}
void IRVisitor::visit_node(const Let* n) {
  visit(n->value);
}
void IRVisitor::visit_node(const For* n) {
  visit(n->extent);
  visit(n->stages);
  visit(n->body);
}
void IRVisitor::visit_node(const Parallel* n) {
  for (const Expr& e : n->extents)
    visit(e);
  for (const Expr& e : n->limits)
    visit(e);
  visit(n->body);
}
void IRVisitor::visit_node(const IfThenElse* n) {
  visit(n->cond);
  visit(n->then_case);
  visit(n->else_case);
}
void IRVisitor::visit_node(const Store* n) {
  for (const Expr& i : n->indices)
    visit(i);
  visit(n->value);
  visit(n->predicate);
}
void IRVisitor::visit_node(const Copy* n) {
  visit_tile(n->src);
  visit_tile(n->dst);
  visit(n->pad);
}
void IRVisitor::visit_node(const Gemm* n) {
  visit_tile(n->a);
  visit_tile(n->b);
  visit_tile(n->c);
}
void IRVisitor::visit_node(const Fill* n) {
  visit(n->value);
}
void IRVisitor::visit_node(const Reduce*) {}
void IRVisitor::visit_node(const Barrier*) {}

// ----- IRMutator --------------------------------------------------------------------------------

Expr IRMutator::mutate(const Expr& e) {
  if (!e) return e;
  switch (e->kind) {
#define TESSEL_TILE_MUTATE_CASE(name) \
  case NodeKind::k##name:             \
    return mutate_node(static_cast<const name*>(e.get()), e);
    TESSEL_TILE_EXPR_KINDS(TESSEL_TILE_MUTATE_CASE)
#undef TESSEL_TILE_MUTATE_CASE
    default:
      TESSEL_CHECK(false, "statement kind in an expression");
  }
  return e;
}

Stmt IRMutator::mutate(const Stmt& s) {
  if (!s) return s;
  switch (s->kind) {
#define TESSEL_TILE_MUTATE_CASE(name) \
  case NodeKind::k##name:             \
    return mutate_node(static_cast<const name*>(s.get()), s);
    TESSEL_TILE_STMT_KINDS(TESSEL_TILE_MUTATE_CASE)
#undef TESSEL_TILE_MUTATE_CASE
    default:
      TESSEL_CHECK(false, "expression kind in a statement");
  }
  return s;
}

std::vector<Expr> IRMutator::mutate(const std::vector<Expr>& es) {
  std::vector<Expr> out;
  out.reserve(es.size());
  for (const Expr& e : es)
    out.push_back(mutate(e));
  return out;
}

TileRef IRMutator::mutate_tile(const TileRef& t) {
  TileRef out = t;
  out.buffer = mutate_buffer(t.buffer);
  out.origin = mutate(t.origin);
  return out;
}

namespace {
bool same(const std::vector<Expr>& a, const std::vector<Expr>& b) {
  return a == b;
}
bool same(const TileRef& a, const TileRef& b) {
  return a.buffer == b.buffer && a.origin == b.origin && a.transposed == b.transposed;
}
}  // namespace

Expr IRMutator::mutate_node(const IntImm*, const Expr& self) {
  return self;
}
Expr IRMutator::mutate_node(const FloatImm*, const Expr& self) {
  return self;
}
Expr IRMutator::mutate_node(const Var*, const Expr& self) {
  return self;
}

Expr IRMutator::mutate_node(const Binary* n, const Expr& self) {
  Expr a = mutate(n->a), b = mutate(n->b);
  if (a == n->a && b == n->b) return self;
  return Binary::make(n->op, a, b, n->loc);
}

Expr IRMutator::mutate_node(const Unary* n, const Expr& self) {
  Expr a = mutate(n->a);
  return a == n->a ? self : Unary::make(n->op, a, n->loc);
}

Expr IRMutator::mutate_node(const Call* n, const Expr& self) {
  std::vector<Expr> args = mutate(n->args);
  return same(args, n->args) ? self : Call::make(n->fn, args, n->loc);
}

Expr IRMutator::mutate_node(const Cast* n, const Expr& self) {
  Expr a = mutate(n->a);
  return a == n->a ? self : Cast::make(n->type, a, n->loc);
}

Expr IRMutator::mutate_node(const Select* n, const Expr& self) {
  Expr c = mutate(n->cond), t = mutate(n->t), f = mutate(n->f);
  if (c == n->cond && t == n->t && f == n->f) return self;
  return Select::make(c, t, f, n->loc);
}

Expr IRMutator::mutate_node(const Load* n, const Expr& self) {
  Buffer b = mutate_buffer(n->buffer);
  std::vector<Expr> idx = mutate(n->indices);
  Expr p = mutate(n->predicate), o = mutate(n->other);
  if (b == n->buffer && same(idx, n->indices) && p == n->predicate && o == n->other) return self;
  return Load::make(b, idx, n->loc, p, o);
}

Stmt IRMutator::mutate_node(const Seq* n, const Stmt& self) {
  std::vector<Stmt> stmts;
  bool changed = false;
  for (const Stmt& s : n->stmts) {
    Stmt m = mutate(s);
    changed |= m != s;
    if (m) stmts.push_back(m);  // a mutator may drop a statement by returning null
  }
  return changed ? Seq::make(stmts, n->loc) : self;
}

Stmt IRMutator::mutate_node(const Grid* n, const Stmt& self) {
  std::vector<Expr> ext = mutate(n->extents);
  std::vector<Expr> threads = mutate(n->threads);
  Stmt body = mutate(n->body);
  if (same(ext, n->extents) && same(threads, n->threads) && body == n->body) return self;
  return Grid::make(ext, n->vars, body, n->loc, threads);
}

Stmt IRMutator::mutate_node(const Alloc* n, const Stmt& self) {
  Buffer b = mutate_buffer(n->buffer);
  return b == n->buffer ? self : Alloc::make(b, n->loc);
}

Stmt IRMutator::mutate_node(const Let* n, const Stmt& self) {
  Expr v = mutate(n->var), x = mutate(n->value);
  return v == n->var && x == n->value ? self : Let::make(v, x, n->loc);
}

Stmt IRMutator::mutate_node(const For* n, const Stmt& self) {
  Expr ext = mutate(n->extent), stages = mutate(n->stages);
  Stmt body = mutate(n->body);
  if (ext == n->extent && stages == n->stages && body == n->body) return self;
  return For::make(n->var, ext, n->for_kind, stages, body, n->loc);
}

Stmt IRMutator::mutate_node(const Parallel* n, const Stmt& self) {
  std::vector<Expr> ext = mutate(n->extents), lim = mutate(n->limits);
  Stmt body = mutate(n->body);
  if (same(ext, n->extents) && same(lim, n->limits) && body == n->body) return self;
  return Parallel::make(n->vars, ext, body, n->loc, lim);
}

Stmt IRMutator::mutate_node(const IfThenElse* n, const Stmt& self) {
  Expr c = mutate(n->cond);
  Stmt t = mutate(n->then_case), e = mutate(n->else_case);
  if (c == n->cond && t == n->then_case && e == n->else_case) return self;
  if (!t) t = Seq::make({}, n->loc);
  return IfThenElse::make(c, t, e, n->loc);
}

Stmt IRMutator::mutate_node(const Store* n, const Stmt& self) {
  Buffer b = mutate_buffer(n->buffer);
  std::vector<Expr> idx = mutate(n->indices);
  Expr v = mutate(n->value), p = mutate(n->predicate);
  if (b == n->buffer && same(idx, n->indices) && v == n->value && p == n->predicate) return self;
  return Store::make(b, idx, v, n->loc, p);
}

Stmt IRMutator::mutate_node(const Copy* n, const Stmt& self) {
  TileRef s = mutate_tile(n->src), d = mutate_tile(n->dst);
  Expr pad = mutate(n->pad);
  if (same(s, n->src) && same(d, n->dst) && pad == n->pad) return self;
  return Copy::make(s, d, pad, n->loc);
}

Stmt IRMutator::mutate_node(const Gemm* n, const Stmt& self) {
  TileRef a = mutate_tile(n->a), b = mutate_tile(n->b), c = mutate_tile(n->c);
  if (same(a, n->a) && same(b, n->b) && same(c, n->c)) return self;
  return Gemm::make(a, b, c, n->loc);
}

Stmt IRMutator::mutate_node(const Fill* n, const Stmt& self) {
  Buffer d = mutate_buffer(n->dst);
  Expr v = mutate(n->value);
  return d == n->dst && v == n->value ? self : Fill::make(d, v, n->loc);
}

Stmt IRMutator::mutate_node(const Reduce* n, const Stmt& self) {
  Buffer s = mutate_buffer(n->src), d = mutate_buffer(n->dst);
  return s == n->src && d == n->dst ? self : Reduce::make(s, d, n->axis, n->op, n->loc);
}

Stmt IRMutator::mutate_node(const Barrier*, const Stmt& self) {
  return self;
}

}  // namespace tessel::tile

namespace tessel::tile {

Stmt replace_buffers(const Stmt& s, const std::map<const BufferNode*, Buffer>& replacements) {
  struct Replacer : IRMutator {
    const std::map<const BufferNode*, Buffer>* repl;
    Buffer mutate_buffer(const Buffer& b) override {
      auto it = repl->find(b.get());
      return it == repl->end() ? b : it->second;
    }
  } r;
  r.repl = &replacements;
  return r.mutate(s);
}

}  // namespace tessel::tile
