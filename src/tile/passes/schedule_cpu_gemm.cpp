// Edge packing and shared packed tiles for CPU gemms (see schedule_cpu_gemm.h).
#include "tile/passes/schedule_cpu_gemm.h"

#include <algorithm>
#include <functional>
#include <map>
#include <set>

#include "tile/ir/printer.h"
#include "tile/ir/visitor.h"

namespace tessel::tile {

namespace {

bool packed(const Buffer& b) { return b->layout == Layout::kPackedA || b->layout == Layout::kPackedB; }

struct Facts : IRVisitor {
  std::set<std::string> written_globals;
  std::map<const BufferNode*, int> copies_into;  // packed tile -> copies writing it
  using IRVisitor::visit_node;
  void visit_node(const Store* n) override {
    if (n->buffer->scope == Scope::kGlobal) written_globals.insert(n->buffer->name);
    IRVisitor::visit_node(n);
  }
  void visit_node(const Copy* n) override {
    if (n->dst.is_global()) written_globals.insert(n->dst.buffer->name);
    if (packed(n->dst.buffer)) ++copies_into[n->dst.buffer.get()];
    IRVisitor::visit_node(n);
  }
};

std::set<std::string> free_vars(const std::vector<Expr>& es) {
  struct Vars : IRVisitor {
    std::set<std::string> names;
    void visit_node(const Var* v) override { names.insert(v->name); }
  } v;
  for (const Expr& e : es) v.visit(e);
  return v.names;
}

// The K range of a gemm operand's copy, as text: "origin | size | tile extent".
std::string k_range(const Copy* c, bool operand_a) {
  const BufferNode& dst = *c->dst.buffer;
  // The tile axis that is K for this operand, in the copy's view of the source.
  int k_axis = operand_a ? (dst.packed_transposed ? 0 : 1) : (dst.packed_transposed ? 1 : 0);
  if (!c->src.is_global()) return fmt::format("tile {} {}", c->src.buffer->name, k_axis);
  const BufferNode& src = *c->src.buffer;
  int view_dim = src.rank() - 2 + k_axis;
  int storage_dim = c->src.transposed ? (src.rank() - 1 - k_axis) : view_dim;
  return fmt::format("{} | {} | {}", to_string(c->src.origin[view_dim]), to_string(src.shape[storage_dim]),
                     dst.const_dim(k_axis));
}

}  // namespace

Kernel schedule_cpu_gemm(const Kernel& kernel) {
  Facts facts;
  facts.visit(kernel.body);
  const Grid* grid = kernel.grid();
  std::set<std::string> invariant;  // names whose value is the same in every block
  for (const Expr& s : kernel.sizes) invariant.insert(s->as<Var>()->name);
  for (const KernelArg& a : kernel.args)
    if (!a.is_tensor()) invariant.insert(a.name);
  std::vector<std::string> block_vars;
  for (const Expr& v : grid->vars) block_vars.push_back(v->as<Var>()->name);

  std::map<const BufferNode*, Buffer> repl;
  auto annotate = [&](const Buffer& b) -> BufferNode& {
    auto it = repl.find(b.get());
    if (it == repl.end()) it = repl.emplace(b.get(), std::make_shared<BufferNode>(*b)).first;
    return const_cast<BufferNode&>(*it->second);
  };

  // Statement lists where a copy into a packed tile and the gemm reading it meet.
  std::function<void(const Stmt&, const For*, bool)> scan = [&](const Stmt& s, const For* loop, bool top) {
    if (const For* f = s->as<For>()) return scan(f->body, f, top);
    if (const IfThenElse* i = s->as<IfThenElse>()) {
      scan(i->then_case, nullptr, false);
      if (i->else_case) scan(i->else_case, nullptr, false);
      return;
    }
    const Seq* seq = s->as<Seq>();
    if (!seq) return;
    std::map<const BufferNode*, const Copy*> copied;  // packed tile -> its copy, earlier here
    for (const Stmt& c : seq->stmts) {
      if (const Copy* copy = c->as<Copy>(); copy && packed(copy->dst.buffer)) {
        copied[copy->dst.buffer.get()] = copy;
        continue;
      }
      if (const Gemm* g = c->as<Gemm>()) {
        auto a = copied.find(g->a.buffer.get()), b = copied.find(g->b.buffer.get());
        if (a == copied.end() || b == copied.end()) continue;
        if (facts.copies_into[a->first] != 1 || facts.copies_into[b->first] != 1) continue;
        if (k_range(a->second, true) != k_range(b->second, false)) continue;
        annotate(g->a.buffer).edge_packed = true;
        annotate(g->b.buffer).edge_packed = true;
        // Shared tiles: only in a loop directly inside the grid, over invariant extents.
        if (!loop || !top) continue;
        for (const Copy* copy : {a->second, b->second}) {
          if (!copy->src.is_global() || facts.written_globals.count(copy->src.buffer->name)) continue;
          std::set<std::string> uses = free_vars(copy->src.origin);
          std::vector<std::string> key;
          bool ok = true;
          for (const std::string& v : uses) {
            bool block = std::find(block_vars.begin(), block_vars.end(), v) != block_vars.end();
            ok &= block || invariant.count(v) || v == loop->var->as<Var>()->name;
          }
          for (const std::string& extent : free_vars({loop->extent})) ok &= invariant.count(extent) > 0;
          if (!ok) continue;
          for (const std::string& v : block_vars)
            if (uses.count(v)) key.push_back(v);
          key.push_back(loop->var->as<Var>()->name);
          annotate(copy->dst.buffer).memo_key = key;
        }
      } else {
        scan(c, nullptr, false);
      }
    }
  };
  const Seq* top = grid->body->as<Seq>();
  if (top)
    for (const Stmt& s : top->stmts) scan(s, nullptr, true);
  if (repl.empty()) return kernel;
  Kernel out = kernel;
  out.body = replace_buffers(kernel.body, repl);
  return out;
}

}  // namespace tessel::tile
