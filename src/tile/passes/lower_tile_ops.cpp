// Tile operations -> element loops (see lower_tile_ops.h).
#include "tile/passes/lower_tile_ops.h"

#include "tile/ir/visitor.h"
#include "tile/passes/check_shapes.h"

namespace tessel::tile {

namespace {

class Lowerer : public IRMutator {
 public:
  explicit Lowerer(const Target& target) : target_(target) {}

 protected:
  using IRMutator::mutate_node;

  // Compiler-made names start with '_', which .tile source cannot use.
  Expr fresh(const char* stem, const SourceLoc& loc) {
    return Var::make(fmt::format("_{}{}", stem, counter_++), kI64, VarKind::kLoop, loc);
  }

  std::vector<Expr> fresh_vars(size_t n, const SourceLoc& loc) {
    std::vector<Expr> vs;
    for (size_t i = 0; i < n; ++i) vs.push_back(fresh("i", loc));
    return vs;
  }

  static std::vector<Expr> consts(const std::vector<int64_t>& v) {
    std::vector<Expr> out;
    for (int64_t x : v) out.push_back(make_int(x));
    return out;
  }

  static Expr add(const Expr& a, const Expr& b) {
    if (is_const_int(a, 0)) return b;
    if (is_const_int(b, 0)) return a;
    return Binary::make(BinaryOp::kAdd, a, b, a->loc);
  }

  // Buffer indices of the element at `vars` (coordinates in the operation's view of the tile).
  static std::vector<Expr> element_indices(const TileRef& t, const std::vector<Expr>& vars) {
    std::vector<Expr> idx;
    if (t.is_global()) {
      idx = t.origin;
      size_t lead = idx.size() - vars.size();
      for (size_t d = 0; d < vars.size(); ++d) idx[lead + d] = add(idx[lead + d], vars[d]);
    } else {
      idx = vars;
    }
    if (t.transposed) std::swap(idx[idx.size() - 2], idx[idx.size() - 1]);
    return idx;
  }

  static Expr convert(const Expr& e, const DType& to) {
    return e->type == to ? e : Cast::make(to, e, e->loc);
  }

  Stmt mutate_node(const Fill* n, const Stmt&) override {
    std::vector<int64_t> shape;
    for (int d = 0; d < n->dst->rank(); ++d) shape.push_back(n->dst->const_dim(d));
    std::vector<Expr> vars = fresh_vars(shape.size(), n->loc);
    Stmt body = Store::make(n->dst, vars, n->value, n->loc);
    return Parallel::make(vars, consts(shape), body, n->loc);
  }

  Stmt mutate_node(const Copy* n, const Stmt& self) override {
    if (!target_.is_gpu() && n->dst.buffer->layout != Layout::kRowMajor) return self;
    std::vector<int64_t> shape = n->dst.is_global() ? tile_shape(n->src) : tile_shape(n->dst);
    std::vector<Expr> vars = fresh_vars(shape.size(), n->loc);
    Expr value;
    std::vector<Expr> src_idx = element_indices(n->src, vars);
    if (n->src.is_global()) {
      // A mask placeholder: infer_bounds computes the real predicate; `other` is the padding.
      Expr pad = n->pad ? n->pad : (n->src.buffer->dtype.is_float()
                                        ? FloatImm::make(0, n->src.buffer->dtype, n->loc)
                                        : IntImm::make(0, n->src.buffer->dtype, n->loc));
      value = Load::make(n->src.buffer, src_idx, n->loc, IntImm::make(1, kBool, n->loc), pad);
    } else {
      value = Load::make(n->src.buffer, src_idx, n->loc);
    }
    Stmt body = Store::make(n->dst.buffer, element_indices(n->dst, vars),
                            convert(value, n->dst.buffer->dtype), n->loc);
    return Parallel::make(vars, consts(shape), body, n->loc);
  }

  Stmt mutate_node(const Gemm* n, const Stmt& self) override {
    if (!target_.is_gpu() && n->a.buffer->layout == Layout::kPackedA &&
        n->b.buffer->layout == Layout::kPackedB)
      return self;
    std::vector<int64_t> a = tile_shape(n->a), b = tile_shape(n->b);
    Expr k = fresh("k", n->loc);
    Expr i = fresh("i", n->loc), j = fresh("i", n->loc);
    Expr av = convert(Load::make(n->a.buffer, element_indices(n->a, {i, k}), n->loc), kF32);
    Expr bv = convert(Load::make(n->b.buffer, element_indices(n->b, {k, j}), n->loc), kF32);
    Expr cv = Load::make(n->c.buffer, {i, j}, n->loc);
    Expr sum = Binary::make(BinaryOp::kAdd, cv, Binary::make(BinaryOp::kMul, av, bv, n->loc), n->loc);
    Stmt inner = Parallel::make({i, j}, consts({a[0], b[1]}), Store::make(n->c.buffer, {i, j}, sum, n->loc), n->loc);
    return For::make(k, make_int(a[1]), ForKind::kSerial, nullptr, inner, n->loc);
  }

  Stmt mutate_node(const Reduce* n, const Stmt&) override {
    std::vector<int64_t> dst_shape;
    for (int d = 0; d < n->dst->rank(); ++d) dst_shape.push_back(n->dst->const_dim(d));
    std::vector<Expr> vars = fresh_vars(dst_shape.size(), n->loc);
    Expr k = fresh("k", n->loc);
    std::vector<Expr> src_idx;
    if (n->src->rank() == 1) {
      src_idx = {k};
    } else {
      src_idx = vars;
      src_idx.insert(src_idx.begin() + n->axis, k);
    }
    Expr old = Load::make(n->dst, vars, n->loc);
    Expr x = convert(Load::make(n->src, src_idx, n->loc), n->dst->dtype);
    BinaryOp op = n->op == ReduceOp::kSum ? BinaryOp::kAdd : n->op == ReduceOp::kMax ? BinaryOp::kMax : BinaryOp::kMin;
    Stmt update = Store::make(n->dst, vars, Binary::make(op, old, x, n->loc), n->loc);
    Stmt loop = For::make(k, make_int(n->src->const_dim(n->axis)), ForKind::kSerial, nullptr, update, n->loc);
    return Parallel::make(vars, consts(dst_shape), loop, n->loc);
  }

 private:
  const Target& target_;
  int counter_ = 0;
};

}  // namespace

Kernel lower_tile_ops(const Kernel& kernel, const Target& target) {
  Kernel out = kernel;
  out.body = Lowerer(target).mutate(kernel.body);
  return out;
}

}  // namespace tessel::tile
