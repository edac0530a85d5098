// Barrier placement for GPU targets (see insert_barriers.h).
#include "tile/passes/insert_barriers.h"

#include <set>

#include "tile/ir/visitor.h"

namespace tessel::tile {

namespace {

using Set = std::set<const BufferNode*>;

struct State {
  Set written, read;  // since the last barrier
  bool operator==(const State& o) const { return written == o.written && read == o.read; }
};

State merge(const State& a, const State& b) {
  State s = a;
  s.written.insert(b.written.begin(), b.written.end());
  s.read.insert(b.read.begin(), b.read.end());
  return s;
}

bool shared_memory(const Buffer& b) {
  return b->scope != Scope::kGlobal && b->layout != Layout::kRegisters;
}

// The shared-memory buffers a statement reads and writes.
struct Access : IRVisitor {
  Set reads, writes;
  using IRVisitor::visit_node;
  void visit_node(const Load* n) override {
    if (shared_memory(n->buffer)) reads.insert(n->buffer.get());
    IRVisitor::visit_node(n);
  }
  void visit_node(const Store* n) override {
    if (shared_memory(n->buffer)) writes.insert(n->buffer.get());
    IRVisitor::visit_node(n);
  }
};

bool intersects(const Set& a, const Set& b) {
  for (const BufferNode* x : a)
    if (b.count(x)) return true;
  return false;
}

Stmt place(const Stmt& s, State* state) {
  if (const Seq* seq = s->as<Seq>()) {
    std::vector<Stmt> out;
    for (const Stmt& c : seq->stmts) {
      Stmt placed = place(c, state);
      // A leaf that needs a barrier comes back as Seq{Barrier, leaf}; splice it.
      if (const Seq* inner = placed->as<Seq>(); inner && !c->as<Seq>())
        out.insert(out.end(), inner->stmts.begin(), inner->stmts.end());
      else
        out.push_back(placed);
    }
    return Seq::make(std::move(out), seq->loc);
  }
  if (const For* f = s->as<For>()) {
    // A conflict with what came before the loop is settled once, before the loop, rather than
    // in every iteration.
    Access all;
    all.visit(f->body);
    Set touched = all.reads;
    touched.insert(all.writes.begin(), all.writes.end());
    bool before = intersects(touched, state->written) || intersects(all.writes, state->read);
    if (before) *state = State{};
    State entry = *state;
    Stmt body;
    State end;
    for (int round = 0; round < 4; ++round) {
      State in = entry;
      body = place(f->body, &in);
      State next_entry = merge(*state, in);
      end = in;
      if (next_entry == entry) break;
      entry = next_entry;
    }
    *state = merge(*state, end);
    Stmt loop = For::make(f->var, f->extent, f->for_kind, f->stages, body, f->loc);
    return before ? Seq::make({Barrier::make(f->loc), loop}, f->loc) : loop;
  }
  if (const IfThenElse* i = s->as<IfThenElse>()) {
    State a = *state, b = *state;
    Stmt t = place(i->then_case, &a);
    Stmt e = i->else_case ? place(i->else_case, &b) : nullptr;
    *state = merge(a, b);
    return IfThenElse::make(i->cond, t, e, i->loc);
  }
  if (s->as<Alloc>() || s->as<Barrier>()) return s;
  Access acc;
  acc.visit(s);
  Set touched = acc.reads;
  touched.insert(acc.writes.begin(), acc.writes.end());
  bool need = intersects(touched, state->written) || intersects(acc.writes, state->read);
  if (need) *state = State{};
  state->written.insert(acc.writes.begin(), acc.writes.end());
  state->read.insert(acc.reads.begin(), acc.reads.end());
  if (!need) return s;
  return Seq::make({Barrier::make(s->loc), s}, s->loc);
}

}  // namespace

Kernel insert_barriers(const Kernel& kernel, const Target& target) {
  if (!target.is_gpu()) return kernel;
  const Grid* g = kernel.grid();
  State state;
  Stmt body = place(g->body, &state);
  Kernel out = kernel;
  out.body = Grid::make(g->extents, g->vars, body, g->loc, g->threads);
  return out;
}

}  // namespace tessel::tile
