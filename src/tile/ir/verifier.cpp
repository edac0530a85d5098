// The IR verifier (see verifier.h).
#include "tile/ir/verifier.h"

#include <map>
#include <set>

#include "tile/ir/visitor.h"

namespace tessel::tile {

namespace {

class Verifier : public IRVisitor {
 public:
  explicit Verifier(const Kernel& k) : kernel_(k) {
    scopes_.emplace_back();
    for (const Expr& s : k.sizes)
      define(s);
    for (const KernelArg& a : k.args) {
      if (a.is_tensor())
        buffers_.back()[a.name] = a.tensor.get();
      else
        define(a.scalar);
    }
    if (!k.specialized)
      for (const Param& p : k.params)
        if (!p.is_dtype) scopes_.back().insert(p.name);
  }
  Status status;

  void run() {
    if (!kernel_.body || !kernel_.body->as<Grid>()) return fail("the body is not a grid");
    visit(kernel_.body);
  }

 protected:
  using IRVisitor::visit_node;

  void fail(const std::string& what, const SourceLoc& loc = {}) {
    if (status.ok())
      status = internal_error("IR of kernel '{}' is malformed{}: {}", kernel_.name,
                              loc.line ? " at " + loc.to_string() : std::string(), what);
  }
  void define(const Expr& v) { scopes_.back().insert(v->as<Var>()->name); }
  bool defined(const std::string& n) const {
    for (const auto& s : scopes_)
      if (s.count(n)) return true;
    return false;
  }
  const BufferNode* buffer(const std::string& n) const {
    for (auto it = buffers_.rbegin(); it != buffers_.rend(); ++it) {
      auto f = it->find(n);
      if (f != it->end()) return f->second;
    }
    return nullptr;
  }
  void push() {
    scopes_.emplace_back();
    buffers_.emplace_back();
  }
  void pop() {
    scopes_.pop_back();
    buffers_.pop_back();
  }
  void check_type(const DType& t, const SourceLoc& loc) {
    if (kernel_.specialized && t.is_param())
      fail("dtype parameter " + t.name() + " after specialisation", loc);
  }
  void use_buffer(const Buffer& b, const SourceLoc& loc) {
    const BufferNode* d = buffer(b->name);
    if (!d) return fail("buffer '" + b->name + "' is used where it is not defined", loc);
    if (d != b.get())
      fail("buffer '" + b->name +
               "' is not the one defined in scope (a pass changed one reference but not all)",
           loc);
    check_type(b->dtype, loc);
  }
  void expr_type(const ExprNode* e) { check_type(e->type, e->loc); }

  void visit_node(const Var* v) override {
    expr_type(v);
    if (kernel_.specialized && v->var_kind == VarKind::kParam)
      fail("parameter '" + v->name + "' after specialisation", v->loc);
    if (!defined(v->name))
      fail("variable '" + v->name + "' is used where it is not defined", v->loc);
  }
  void visit_node(const FloatImm* n) override { expr_type(n); }
  void visit_node(const Cast* n) override {
    expr_type(n);
    IRVisitor::visit_node(n);
  }
  void visit_node(const Load* n) override {
    use_buffer(n->buffer, n->loc);
    IRVisitor::visit_node(n);
  }
  void visit_node(const Seq* n) override {
    push();
    IRVisitor::visit_node(n);
    pop();
  }
  void visit_node(const Grid* n) override {
    for (const Expr& e : n->extents)
      visit(e);
    for (const Expr& e : n->threads)
      visit(e);
    push();
    for (const Expr& v : n->vars)
      define(v);
    visit(n->body);
    pop();
  }
  void visit_node(const Alloc* n) override {
    if (parallel_depth_) fail("allocation inside a parallel loop", n->loc);
    buffers_.back()[n->buffer->name] = n->buffer.get();
    check_type(n->buffer->dtype, n->loc);
  }
  void visit_node(const Let* n) override {
    visit(n->value);
    define(n->var);
  }
  void visit_node(const For* n) override {
    visit(n->extent);
    visit(n->stages);
    push();
    define(n->var);
    visit(n->body);
    pop();
  }
  void visit_node(const Parallel* n) override {
    if (parallel_depth_) fail("nested parallel loops", n->loc);
    for (const Expr& e : n->extents)
      visit(e);
    for (const Expr& e : n->limits)
      visit(e);
    push();
    for (const Expr& v : n->vars)
      define(v);
    ++parallel_depth_;
    visit(n->body);
    --parallel_depth_;
    pop();
  }
  void visit_node(const Store* n) override {
    if (!parallel_depth_) fail("element store outside a parallel loop", n->loc);
    use_buffer(n->buffer, n->loc);
    IRVisitor::visit_node(n);
  }
  void tile_op(const char* what, const SourceLoc& loc) {
    if (parallel_depth_) fail(std::string(what) + " inside a parallel loop", loc);
  }
  void visit_node(const Copy* n) override {
    tile_op("copy", n->loc);
    use_buffer(n->src.buffer, n->loc);
    use_buffer(n->dst.buffer, n->loc);
    IRVisitor::visit_node(n);
  }
  void visit_node(const Gemm* n) override {
    tile_op("gemm", n->loc);
    for (const TileRef* t : {&n->a, &n->b, &n->c})
      use_buffer(t->buffer, n->loc);
  }
  void visit_node(const Fill* n) override {
    tile_op("fill", n->loc);
    use_buffer(n->dst, n->loc);
    IRVisitor::visit_node(n);
  }
  void visit_node(const Reduce* n) override {
    tile_op("reduce", n->loc);
    use_buffer(n->src, n->loc);
    use_buffer(n->dst, n->loc);
  }
  void visit_node(const Barrier* n) override { tile_op("barrier", n->loc); }

 private:
  const Kernel& kernel_;
  std::vector<std::set<std::string>> scopes_;
  std::vector<std::map<std::string, const BufferNode*>> buffers_{1};
  int parallel_depth_ = 0;
};

}  // namespace

Status verify(const Kernel& kernel) {
  Verifier v(kernel);
  v.run();
  return v.status;
}

}  // namespace tessel::tile
