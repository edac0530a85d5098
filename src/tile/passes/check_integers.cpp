// Compile-time integer checks after specialisation (see check_integers.h).
#include "tile/passes/check_integers.h"

#include "tile/ir/printer.h"
#include "tile/ir/visitor.h"

namespace tessel::tile {

namespace {

// The operation as the kernel spells it: "N / 0", "cdiv(N, 0)".
std::string text(const Binary* n) { return to_string(Binary::make(n->op, n->a, n->b, n->loc)); }

class IntegerChecker : public IRVisitor {
 public:
  Status status;

  void check_shape(const BufferNode& b) {
    for (const Expr& d : b.shape) visit(d);
  }

 protected:
  using IRVisitor::visit_node;

  void fail(Status s) {
    if (status.ok()) status = std::move(s);
  }

  void visit_node(const Binary* n) override {
    IRVisitor::visit_node(n);
    if (!status.ok() || !n->a->type.is_int()) return;
    auto a = const_int(n->a), b = const_int(n->b);
    bool divides = n->op == BinaryOp::kDiv || n->op == BinaryOp::kMod || n->op == BinaryOp::kCDiv;
    if (divides && b == 0)
      return fail(error_at(n->loc, "division by zero in '{}'", text(n)));
    if (n->op == BinaryOp::kCDiv && b && *b < 0)
      return fail(error_at(n->loc, "cdiv needs a positive divisor, got {} in '{}'", *b,
                           text(n)));
    // Both sides known yet left unfolded: the exact result does not fit the type.
    if (a && b)
      fail(error_at(n->loc, "integer overflow: {} {} {} does not fit {}", *a, binary_op_name(n->op), *b,
                    n->type.name()));
  }

  void visit_node(const Unary* n) override {
    IRVisitor::visit_node(n);
    if (!status.ok() || n->op != UnaryOp::kNeg) return;
    if (auto a = const_int(n->a))
      fail(error_at(n->loc, "integer overflow: -({}) does not fit {}", *a, n->type.name()));
  }

  void visit_node(const Alloc* n) override {
    check_shape(*n->buffer);
    IRVisitor::visit_node(n);
  }
};

}  // namespace

Status check_integers(const Kernel& kernel) {
  TESSEL_CHECK(kernel.specialized, "check_integers before specialize");
  IntegerChecker c;
  for (const KernelArg& a : kernel.args) {
    if (a.is_tensor()) c.check_shape(*a.tensor);
    else c.visit(a.scalar);
  }
  if (c.status.ok()) c.visit(kernel.body);
  return c.status;
}

}  // namespace tessel::tile
