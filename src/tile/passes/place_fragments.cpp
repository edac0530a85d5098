// Registers or shared memory for each fragment (see place_fragments.h).
#include "tile/passes/place_fragments.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>

#include "tile/ir/visitor.h"

namespace tessel::tile {

ThreadTiling thread_tiling(const std::vector<int64_t>& extents, int threads) {
  ThreadTiling t;
  if (extents.size() == 1) {
    t.rows = extents[0];
    t.tr = threads;
    t.row_steps = (t.rows + threads - 1) / threads;
    return t;
  }
  for (size_t d = 0; d + 1 < extents.size(); ++d)
    t.rows *= extents[d];
  t.cols = extents.back();
  int tc = 1;
  while (tc * 2 <= t.cols && tc * 2 <= threads)
    tc *= 2;
  int tr = threads / tc;
  // Square-ish thread blocks reuse operands best; give rows threads while there are rows.
  while (tc * tc > threads && tr < t.rows) {
    tc /= 2;
    tr = threads / tc;
  }
  t.tc = tc;
  t.tr = tr;
  t.row_steps = (t.rows + tr - 1) / tr;
  t.col_steps = (t.cols + tc - 1) / tc;
  return t;
}

BlockThreads block_threads(const Kernel& kernel, const Target& target) {
  BlockThreads b;
  b.count = target.threads_per_block;
  b.column_run = std::max(1, target.column_run);
  const Grid* grid = kernel.grid();
  if (!target.is_gpu() || grid->threads.empty()) return b;
  std::vector<int64_t> t;
  for (const Expr& e : grid->threads) {
    std::optional<int64_t> v = const_int(e);
    TESSEL_CHECK(v && *v >= 1, "block threads of kernel '{}' are not constants", kernel.name);
    t.push_back(*v);
  }
  if (t.size() == 1) {
    b.count = static_cast<int>(t[0]);
  } else {
    b.rows = static_cast<int>(t[0]);
    b.cols = static_cast<int>(t[1]);
    b.count = b.rows * b.cols;
  }
  return b;
}

ThreadTiling thread_tiling(const std::vector<int64_t>& extents, const BlockThreads& block) {
  if (block.cols == 0 || extents.size() < 2 || extents.back() < block.cols)
    return thread_tiling(extents, block.count);
  ThreadTiling t;
  for (size_t d = 0; d + 1 < extents.size(); ++d)
    t.rows *= extents[d];
  t.cols = extents.back();
  t.tr = block.rows;
  t.tc = block.cols;
  t.block_shaped = true;
  while (t.run * 2 <= block.column_run && t.cols % (t.tc * t.run * 2) == 0)
    t.run *= 2;
  t.row_steps = (t.rows + t.tr - 1) / t.tr;
  t.col_steps = (t.cols + t.tc * t.run - 1) / (t.tc * t.run) * t.run;
  return t;
}

namespace {

class Placement : public IRVisitor {
 public:
  std::map<const BufferNode*, bool> owned;  // fragment -> every access is by its owner

 protected:
  using IRVisitor::visit_node;

  void access(const Buffer& b, const std::vector<Expr>& idx) {
    if (b->scope != Scope::kFragment) return;
    bool ok = current_ != nullptr && static_cast<int>(current_->vars.size()) == b->rank();
    for (size_t d = 0; ok && d < idx.size(); ++d) {
      auto e = const_int(current_->extents[d]);
      const Var* v = idx[d]->as<Var>();
      ok = e && *e == b->const_dim(static_cast<int>(d)) && v &&
           v->name == current_->vars[d]->as<Var>()->name;
    }
    auto [it, inserted] = owned.emplace(b.get(), ok);
    if (!inserted) it->second = it->second && ok;
  }
  void visit_node(const Load* n) override {
    access(n->buffer, n->indices);
    IRVisitor::visit_node(n);
  }
  void visit_node(const Store* n) override {
    access(n->buffer, n->indices);
    IRVisitor::visit_node(n);
  }
  void visit_node(const Parallel* n) override {
    const Parallel* outer = current_;
    current_ = n;
    IRVisitor::visit_node(n);
    current_ = outer;
  }
  // Tile operations left unlowered cannot be placed in registers.
  void visit_node(const Copy* n) override {
    owned[n->src.buffer.get()] = false;
    owned[n->dst.buffer.get()] = false;
  }
  void visit_node(const Gemm* n) override {
    for (const TileRef* t : {&n->a, &n->b, &n->c})
      owned[t->buffer.get()] = false;
  }

 private:
  const Parallel* current_ = nullptr;
};

}  // namespace

Kernel place_fragments(const Kernel& kernel, const Target& target) {
  if (!target.is_gpu()) return kernel;
  Placement p;
  p.visit(kernel.body);
  struct Allocs : IRVisitor {
    std::vector<Buffer> fragments;
    void visit_node(const Alloc* n) override {
      if (n->buffer->scope == Scope::kFragment) fragments.push_back(n->buffer);
    }
  } allocs;
  allocs.visit(kernel.body);
  std::map<const BufferNode*, Buffer> repl;
  for (const Buffer& b : allocs.fragments) {
    auto it = p.owned.find(b.get());
    if (it == p.owned.end() || !it->second) continue;
    auto nb = std::make_shared<BufferNode>(*b);
    nb->layout = Layout::kRegisters;
    repl[b.get()] = nb;
  }
  Kernel out = kernel;
  out.body = replace_buffers(kernel.body, repl);
  return out;
}

}  // namespace tessel::tile
