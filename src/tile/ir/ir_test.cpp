// The IR's own guarantees: make() refuses malformed nodes (a bug, so it stops the program), the
// verifier catches a pass that changes one reference to a buffer but not the others, and the
// printer writes minimal parentheses that keep the meaning.
#include "tile/ir/ir.h"

#include <gtest/gtest.h>

#include "tile/ir/printer.h"
#include "tile/ir/verifier.h"
#include "tile/ir/visitor.h"
#include "tile/parse/parser.h"

namespace tessel::tile {
namespace {

TEST(IrDeathTest, MakeRefusesMismatchedOperands) {
  Expr i = Var::make("i", kI64, VarKind::kLoop);
  Expr x = FloatImm::make(1.5);
  EXPECT_DEATH(Binary::make(BinaryOp::kAdd, i, x), "'\\+' on i64 and f32");
  EXPECT_DEATH(Call::make(MathFn::kExp, {i}), "exp of a non-float");
  Buffer t = make_buffer("t", kF32, Scope::kFragment, {make_int(4), make_int(4)}, {});
  EXPECT_DEATH(Load::make(t, {i}), "1 indices into 't' of rank 2");
}

TEST(Ir, PrinterParenthesisesOnlyWhereNeeded) {
  Expr a = Var::make("a", kI64, VarKind::kLoop), b = Var::make("b", kI64, VarKind::kLoop);
  Expr c = Var::make("c", kI64, VarKind::kLoop);
  auto bin = [](BinaryOp op, Expr x, Expr y) { return Binary::make(op, x, y); };
  EXPECT_EQ(to_string(bin(BinaryOp::kMul, bin(BinaryOp::kAdd, a, b), c)), "(a + b) * c");
  EXPECT_EQ(to_string(bin(BinaryOp::kAdd, a, bin(BinaryOp::kMul, b, c))), "a + b * c");
  EXPECT_EQ(to_string(bin(BinaryOp::kSub, a, bin(BinaryOp::kSub, b, c))), "a - (b - c)");
  EXPECT_EQ(to_string(bin(BinaryOp::kSub, bin(BinaryOp::kSub, a, b), c)), "a - b - c");
  EXPECT_EQ(to_string(bin(BinaryOp::kCDiv, bin(BinaryOp::kAdd, a, b), c)), "cdiv(a + b, c)");
}

TEST(Ir, VerifierCatchesABufferChangedInOnePlace) {
  auto k = parse_kernel(R"(kernel k(x: f32[N]) {
  grid (N) as (b) {
    t = fragment<f32>[4]
    clear(t)
    parallel (i) in t { x[b] = t[i] }
  }
})",
                        "v.tile");
  ASSERT_TRUE(k.ok()) << k.status().to_string();
  EXPECT_TRUE(verify(*k).ok());
  // A "pass" that gives the parallel loop's load a new buffer but leaves the allocation alone.
  struct Broken : IRMutator {
    using IRMutator::mutate_node;
    Expr mutate_node(const Load* n, const Expr& self) override {
      if (n->buffer->name != "t") return self;
      auto copy = std::make_shared<BufferNode>(*n->buffer);
      return Load::make(copy, n->indices, n->loc);
    }
  };
  Kernel broken = *k;
  broken.body = Broken().mutate(k->body);
  Status s = verify(broken);
  EXPECT_EQ(s.code(), Code::kInternal);
  EXPECT_EQ(s.message(),
            "IR of kernel 'k' is malformed at v.tile:5:32: buffer 't' is not the one defined in scope "
            "(a pass changed one reference but not all)");
}

}  // namespace
}  // namespace tessel::tile
