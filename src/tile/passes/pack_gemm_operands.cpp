// Choosing packed layouts for CPU gemm operands (see pack_gemm_operands.h).
#include "tile/passes/pack_gemm_operands.h"

#include <map>

#include "tile/ir/visitor.h"

namespace tessel::tile {

namespace {

struct Use {
  bool other = false;  // any use that is not "written by copy" or "read by gemm"
  int as_a = 0, as_b = 0;
  bool transposed_a = false, transposed_b = false, mixed_transpose = false;
};

class UseCollector : public IRVisitor {
 public:
  std::map<const BufferNode*, Use> uses;

 protected:
  using IRVisitor::visit_node;
  void other(const Buffer& b) { uses[b.get()].other = true; }
  void gemm_operand(const TileRef& t, bool is_a) {
    Use& u = uses[t.buffer.get()];
    int& count = is_a ? u.as_a : u.as_b;
    bool& tr = is_a ? u.transposed_a : u.transposed_b;
    if (count > 0 && tr != t.transposed) u.mixed_transpose = true;
    tr = t.transposed;
    ++count;
  }
  void visit_node(const Load* n) override {
    other(n->buffer);
    IRVisitor::visit_node(n);
  }
  void visit_node(const Store* n) override {
    other(n->buffer);
    IRVisitor::visit_node(n);
  }
  void visit_node(const Copy* n) override {
    other(n->src.buffer);  // read by a copy: must stay row-major to be read element-wise
    IRVisitor::visit_node(n);
  }
  void visit_node(const Gemm* n) override {
    gemm_operand(n->a, true);
    gemm_operand(n->b, false);
    other(n->c.buffer);
  }
  void visit_node(const Fill* n) override {
    other(n->dst);
    IRVisitor::visit_node(n);
  }
  void visit_node(const Reduce* n) override {
    other(n->src);
    other(n->dst);
  }
};

}  // namespace

Kernel pack_gemm_operands(const Kernel& kernel) {
  UseCollector c;
  c.visit(kernel.body);
  std::map<const BufferNode*, Buffer> repl;
  // Only allocations can be repacked; find them with their owning Buffer.
  struct AllocFinder : IRVisitor {
    std::vector<Buffer> shared;
    void visit_node(const Alloc* n) override {
      if (n->buffer->scope == Scope::kShared) shared.push_back(n->buffer);
    }
  } finder;
  finder.visit(kernel.body);
  for (const Buffer& b : finder.shared) {
    const Use& u = c.uses[b.get()];
    if (u.other || u.mixed_transpose || b->rank() != 2) continue;
    // The micro-kernels take f32, f16 and bf16 operands.
    if (b->dtype != kF32 && b->dtype != kF16 && b->dtype != kBF16) continue;
    if ((u.as_a > 0) == (u.as_b > 0)) continue;  // unused, or used as both A and B
    auto nb = std::make_shared<BufferNode>(*b);
    nb->layout = u.as_a > 0 ? Layout::kPackedA : Layout::kPackedB;
    nb->packed_transposed = u.as_a > 0 ? u.transposed_a : u.transposed_b;
    repl[b.get()] = nb;
  }
  Kernel out = kernel;
  out.body = replace_buffers(kernel.body, repl);
  return out;
}

}  // namespace tessel::tile
