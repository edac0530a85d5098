// Shape checks after specialisation (see check_shapes.h).
#include "tile/passes/check_shapes.h"

#include "tile/ir/printer.h"
#include "tile/ir/visitor.h"

namespace tessel::tile {

std::vector<int64_t> tile_shape(const TileRef& t) {
  std::vector<int64_t> s;
  for (int d = 0; d < t.buffer->rank(); ++d)
    s.push_back(t.buffer->const_dim(d));
  if (t.transposed) std::swap(s[s.size() - 2], s[s.size() - 1]);
  return s;
}

namespace {

constexpr int64_t kMaxTileElements = (int64_t{1} << 31) - 1;
constexpr int64_t kMaxStages = 32;
constexpr int64_t kMaxBlockThreadsPerDimension = 1 << 14;

std::string shape_text(const std::vector<int64_t>& s) {
  return fmt::format("[{}]", fmt::join(s, ", "));
}
std::string shape_text(const std::vector<Expr>& s) {
  std::vector<std::string> dims;
  for (const Expr& e : s)
    dims.push_back(to_string(e));
  return fmt::format("[{}]", fmt::join(dims, ", "));
}

class ShapeChecker : public IRVisitor {
 public:
  Status status;

 protected:
  using IRVisitor::visit_node;

  void fail(Status s) {
    if (status.ok()) status = std::move(s);
  }

  void visit_node(const Alloc* n) override {
    const BufferNode& b = *n->buffer;
    for (int d = 0; d < b.rank(); ++d) {
      auto v = const_int(b.shape[d]);
      if (!v)
        return fail(error_at(b.loc, "dimension {} of tile '{}' is not a compile-time constant: {}",
                             d, b.name, to_string(b.shape[d])));
      if (*v <= 0)
        return fail(error_at(b.loc,
                             "dimension {} of tile '{}' is {}; tile dimensions must be positive", d,
                             b.name, *v));
    }
    // Sizes are computed in int64 by later passes (bytes, registers per thread): a tile whose
    // element count wraps around would pass every budget check.
    int64_t elements = 1;
    for (int d = 0; d < b.rank(); ++d)
      if (__builtin_mul_overflow(elements, b.const_dim(d), &elements) ||
          elements > kMaxTileElements)
        return fail(error_at(b.loc, "tile '{}' {} has more than {} elements", b.name,
                             shape_text(b.shape), kMaxTileElements));
  }

  // How many threads a block may have is the target's business (check_fast_memory); here only
  // that they are known, positive and cannot overflow a count.
  void visit_node(const Grid* n) override {
    for (const Expr& e : n->threads) {
      auto v = const_int(e);
      if (!v || *v < 1 || *v > kMaxBlockThreadsPerDimension)
        return fail(error_at(e->loc,
                             "block threads must be compile-time constants from 1 to {}, got {}",
                             kMaxBlockThreadsPerDimension, to_string(e)));
    }
    IRVisitor::visit_node(n);
  }

  void visit_node(const For* n) override {
    if (n->stages) {
      auto s = const_int(n->stages);
      if (!s || *s < 1)
        return fail(error_at(n->loc, "stages must be a compile-time constant of at least 1, got {}",
                             to_string(n->stages)));
      // Each stage is a copy of the loop's tiles and of its prologue: the count is unrolled.
      if (*s > kMaxStages)
        return fail(error_at(n->loc, "stages is {}; at most {} are supported", *s, kMaxStages));
    }
    IRVisitor::visit_node(n);
  }

  void visit_node(const Parallel* n) override {
    for (const Expr& e : n->extents) {
      auto v = const_int(e);
      if (!v || *v <= 0)
        return fail(error_at(n->loc,
                             "parallel extents must be positive compile-time constants, got {}",
                             to_string(e)));
    }
    int64_t iterations = 1;
    for (const Expr& e : n->extents)
      if (__builtin_mul_overflow(iterations, *const_int(e), &iterations) ||
          iterations > kMaxTileElements)
        return fail(error_at(n->loc, "parallel loop over {} has more than {} iterations",
                             shape_text(n->extents), kMaxTileElements));
    IRVisitor::visit_node(n);
  }

  void visit_node(const Copy* n) override {
    if (!status.ok()) return;
    if (!n->src.is_global() && !n->dst.is_global()) {
      auto s = tile_shape(n->src), d = tile_shape(n->dst);
      if (s != d)
        fail(error_at(n->loc, "copy between tiles of different shapes: '{}'{} is {} and '{}' is {}",
                      n->src.buffer->name, n->src.transposed ? ".T" : "", shape_text(s),
                      n->dst.buffer->name, shape_text(d)));
    }
  }

  void visit_node(const Gemm* n) override {
    if (!status.ok()) return;
    auto a = tile_shape(n->a), b = tile_shape(n->b), c = tile_shape(n->c);
    auto name = [](const TileRef& t) {
      return fmt::format("'{}{}'", t.buffer->name, t.transposed ? ".T" : "");
    };
    if (a[1] != b[0])
      return fail(error_at(
          n->loc,
          "gemm shapes do not agree: {} is {} and {} is {}; the inner dimensions {} and {} differ",
          name(n->a), shape_text(a), name(n->b), shape_text(b), a[1], b[0]));
    if (c[0] != a[0] || c[1] != b[1])
      fail(error_at(n->loc, "gemm accumulator {} is {} but {} @ {} is [{}, {}]", name(n->c),
                    shape_text(c), name(n->a), name(n->b), a[0], b[1]));
  }

  void visit_node(const Reduce* n) override {
    if (!status.ok()) return;
    std::vector<int64_t> s, d;
    for (int i = 0; i < n->src->rank(); ++i)
      if (i != n->axis) s.push_back(n->src->const_dim(i));
    if (s.empty()) s.push_back(1);
    for (int i = 0; i < n->dst->rank(); ++i)
      d.push_back(n->dst->const_dim(i));
    if (s != d)
      fail(error_at(n->loc, "reduce of '{}' along axis {} gives {} but '{}' is {}", n->src->name,
                    n->axis, shape_text(s), n->dst->name, shape_text(d)));
  }
};

}  // namespace

Status check_shapes(const Kernel& kernel) {
  TESSEL_CHECK(kernel.specialized, "check_shapes before specialize");
  ShapeChecker c;
  c.visit(kernel.body);
  return c.status;
}

}  // namespace tessel::tile
