// Software pipelining of GPU loops (see pipeline_gpu_loops.h).
#include "tile/passes/pipeline_gpu_loops.h"

#include <map>
#include <set>

#include "tile/ir/visitor.h"
#include "tile/passes/simplify.h"

namespace tessel::tile {

namespace {

// `e` with variable `name` replaced by `value`.
Expr substitute(const Expr& e, const std::string& name, const Expr& value) {
  struct Sub : IRMutator {
    const std::string* name;
    Expr value;
    using IRMutator::mutate_node;
    Expr mutate_node(const Var* v, const Expr& self) override {
      return v->name == *name ? value : self;
    }
  } s;
  s.name = &name;
  s.value = value;
  return simplify(s.mutate(e));
}

// Where each buffer is read and written, and whether inside a given loop.
struct Uses : IRVisitor {
  std::map<const BufferNode*, int> writes, reads_outside;
  const Stmt* loop = nullptr;
  bool inside = false;
  using IRVisitor::visit_node;
  void read(const Buffer& b) {
    if (!inside) ++reads_outside[b.get()];
  }
  void visit_node(const Load* n) override {
    read(n->buffer);
    IRVisitor::visit_node(n);
  }
  void visit_node(const Store* n) override {
    ++writes[n->buffer.get()];
    IRVisitor::visit_node(n);
  }
  void visit_node(const Copy* n) override {
    read(n->src.buffer);
    ++writes[n->dst.buffer.get()];
    IRVisitor::visit_node(n);
  }
  void visit_node(const Gemm* n) override {
    read(n->a.buffer);
    read(n->b.buffer);
    read(n->c.buffer);
    ++writes[n->c.buffer.get()];
  }
  void visit_node(const Fill* n) override {
    ++writes[n->dst.get()];
    IRVisitor::visit_node(n);
  }
  void visit_node(const Reduce* n) override {
    read(n->src);
    read(n->dst);
    ++writes[n->dst.get()];
  }
};

std::set<std::string> free_vars(const std::vector<Expr>& es) {
  struct Vars : IRVisitor {
    std::set<std::string> names;
    void visit_node(const Var* v) override { names.insert(v->name); }
  } v;
  for (const Expr& e : es)
    v.visit(e);
  return v.names;
}

}  // namespace

Kernel pipeline_gpu_loops(const Kernel& kernel, const Target& target) {
  if (!target.is_gpu()) return kernel;
  const Grid* grid = kernel.grid();
  const Seq* top = grid->body->as<Seq>();
  if (!top) return kernel;

  // Names fixed for a block before any loop: sizes, scalars, block indices, grid-level lets.
  std::set<std::string> fixed;
  for (const Expr& s : kernel.sizes)
    fixed.insert(s->as<Var>()->name);
  for (const KernelArg& a : kernel.args)
    if (!a.is_tensor()) fixed.insert(a.name);
  for (const Expr& v : grid->vars)
    fixed.insert(v->as<Var>()->name);

  std::vector<Stmt> allocs, rest;
  int loops = 0;
  for (const Stmt& s : top->stmts) {
    if (const Let* l = s->as<Let>()) fixed.insert(l->var->as<Var>()->name);
    const For* f = s->as<For>();
    auto stages = f ? const_int(f->stages) : std::nullopt;
    const Seq* body = f ? f->body->as<Seq>() : nullptr;
    if (!f || f->for_kind != ForKind::kPipelined || !stages || *stages < 2 || !body) {
      (s->as<Alloc>() ? allocs : rest).push_back(s);
      continue;
    }
    // The leading copies from global memory into shared tiles.
    std::vector<const Copy*> copies;
    for (const Stmt& c : body->stmts) {
      const Copy* copy = c->as<Copy>();
      if (!copy || !copy->src.is_global() || copy->dst.buffer->scope != Scope::kShared) break;
      copies.push_back(copy);
    }
    Uses uses;
    uses.visit(kernel.body);
    Uses outside;  // reads outside this loop
    for (const Stmt& other : top->stmts)
      if (other != s) outside.visit(other);
    std::string k = f->var->as<Var>()->name;
    bool ok = !copies.empty();
    for (const Copy* c : copies) {
      ok &=
          uses.writes[c->dst.buffer.get()] == 1 && outside.reads_outside[c->dst.buffer.get()] == 0;
      for (const std::string& v : free_vars(c->src.origin))
        ok &= v == k || fixed.count(v) > 0;
    }
    for (const std::string& v : free_vars({f->extent}))
      ok &= fixed.count(v) > 0;
    if (!ok) {
      rest.push_back(s);
      continue;
    }
    int64_t S = *stages;
    // Stage copies of each staged tile: stage 0 keeps the tile, the others are new tiles.
    std::vector<std::map<const BufferNode*, Buffer>> stage(S);
    for (const Copy* c : copies) {
      const Buffer& b = c->dst.buffer;
      stage[0][b.get()] = b;
      for (int64_t i = 1; i < S; ++i) {
        Buffer copy =
            make_buffer(fmt::format("_{}_{}", b->name, i), b->dtype, b->scope, b->shape, b->loc);
        stage[i][b.get()] = copy;
        allocs.push_back(Alloc::make(copy, f->loc));
      }
    }
    Expr n = f->extent;
    // The copies of iteration `iter` into the tiles of stage `st`.
    auto issue = [&](const Expr& iter, int64_t st) {
      std::vector<Stmt> out;
      for (const Copy* c : copies) {
        TileRef src = c->src;
        for (Expr& o : src.origin)
          o = substitute(o, k, iter);
        TileRef dst = c->dst;
        dst.buffer = stage[st].at(c->dst.buffer.get());
        out.push_back(Copy::make(src, dst, c->pad, c->loc));
      }
      return Seq::make(out, f->loc);
    };
    // Prologue: iterations 0 .. S-2. Copies of iterations past the end need no guard: their
    // tiles lie outside the tensor, so every element is masked (and a guard would hide the
    // barrier before the next compute from insert_barriers on the path that skips it).
    for (int64_t p = 0; p + 1 < S; ++p)
      rest.push_back(issue(make_int(p), p));
    // The loop: one branch per stage, each computing on its own tiles.
    std::vector<Stmt> compute(body->stmts.begin() + copies.size(), body->stmts.end());
    Stmt chain;
    for (int64_t st = S; st-- > 0;) {
      Expr ahead = simplify(Binary::make(BinaryOp::kAdd, f->var, make_int(S - 1), f->loc));
      std::vector<Stmt> branch = {issue(ahead, (st + S - 1) % S)};
      branch.push_back(replace_buffers(Seq::make(compute, f->loc), stage[st]));
      Stmt here = Seq::make(branch, f->loc);
      if (!chain) {
        chain = here;
        continue;
      }
      Expr is_stage =
          Binary::make(BinaryOp::kEq, Binary::make(BinaryOp::kMod, f->var, make_int(S), f->loc),
                       make_int(st), f->loc);
      chain = IfThenElse::make(is_stage, here, chain, f->loc);
    }
    rest.push_back(For::make(f->var, n, ForKind::kSerial, nullptr, chain, f->loc));
    ++loops;
  }
  if (loops == 0) return kernel;
  allocs.insert(allocs.end(), rest.begin(), rest.end());
  Kernel out = kernel;
  out.body =
      Grid::make(grid->extents, grid->vars, Seq::make(allocs, top->loc), grid->loc, grid->threads);
  return out;
}

}  // namespace tessel::tile
