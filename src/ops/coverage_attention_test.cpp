// scaled_dot_product_attention (ops/attention_ops.cpp) against PyTorch on every device the op
// library launches on: src/ops/testdata/attention_cases.txt (tools/pytorch/coverage_fixtures.py)
// holds boolean and additive masks (a query with every key hidden gets zeros and no gradient, as
// PyTorch 2), is_causal (top left), the bottom-right causal mask, grouped-query heads, a scale and
// unbatched inputs, with PyTorch's output and the gradients of q, k and v. Random shapes against
// the C++ reference and finite differences are in ops_test.cpp; here also the errors.
#include <gtest/gtest.h>

#include "ops/op.h"
#include "ops/ops.h"
#include "ops/testing/edge_check.h"
#include "ops/testing/fixture.h"

namespace tessel::ops {
namespace {

using namespace testing;  // NOLINT: the helpers of ops/testing/

const char* const kOp = "scaled_dot_product_attention";

TEST(OpAttentionEdgeCases, MatchPyTorchOnEveryDevice) {
  const std::vector<FixtureCase> cases = read_fixture("attention");
  EXPECT_GE(cases.size(), 6u);
  for (const FixtureCase& c : cases) {
    const bool bool_mask = c.attrs.get_int("mask", 0) == 1;
    const std::vector<DType> dtypes{DType::kF32, DType::kF32, DType::kF32,
                                    bool_mask ? DType::kBool : DType::kF32};
    for_each_device(kOp, dtypes, [&](Device* d) {
      SCOPED_TRACE(c.label);
      std::vector<Tensor> in;
      for (const char* name : {"q", "k", "v"})
        in.push_back(floats(d, c.floats(name), c.tensor(name).shape));
      if (!c.has("mask")) {
        in.push_back(floats(d, {0}, {1}));
      } else if (bool_mask) {
        const std::vector<double>& m = c.tensor("mask").values;
        in.push_back(bools(d, std::vector<bool>(m.begin(), m.end()), c.tensor("mask").shape));
      } else {
        in.push_back(floats(d, c.floats("mask"), c.tensor("mask").shape));
      }
      Expected<Tensor> y = run(kOp, in, c.attrs);
      ASSERT_TRUE(y.ok()) << y.status().to_string();
      EXPECT_EQ(y->shape(), c.tensor("y").shape);
      expect_matches(host(y), c.tensor("y").values, 1e-5, 1e-5, "output");
      const RefTensor& gy = c.tensor("gy");
      std::vector<Tensor> g = backward_of(kOp, in, floats(d, c.floats("gy"), gy.shape), c.attrs);
      expect_matches(host(g[0]), c.tensor("gq").values, 1e-5, 1e-5, "q gradient");
      expect_matches(host(g[1]), c.tensor("gk").values, 1e-5, 1e-5, "k gradient");
      expect_matches(host(g[2]), c.tensor("gv").values, 1e-5, 1e-5, "v gradient");
    });
  }
}

// The errors PyTorch raises (tools/pytorch/coverage_fixtures.py prints them), and dropout.
TEST(OpAttentionEdgeCases, InvalidCallsAreErrors) {
  for_each_device(kOp, {DType::kF32, DType::kF32, DType::kF32, DType::kF32}, [&](Device* d) {
    Tensor q = floats(d, iota(24), {1, 2, 3, 4});
    AttentionOptions both;
    both.attn_mask = bools(d, {true, true, true, true, true, true, true, true, true}, {3, 3});
    both.causal = 1;
    expect_error(scaled_dot_product_attention(q, q, q, both), Code::kInvalidArgument,
                 {"takes an attn_mask or is_causal, not both"});
    Tensor k3 = floats(d, iota(24), {1, 3, 2, 4});
    Tensor k2 = floats(d, iota(16), {1, 2, 2, 4});
    AttentionOptions gqa;
    gqa.enable_gqa = true;
    expect_error(scaled_dot_product_attention(k3, k2, k2, gqa), Code::kInvalidArgument,
                 {"q's heads must be a multiple of k's"});
    expect_error(scaled_dot_product_attention(k3, k2, k2), Code::kInvalidArgument,
                 {"enable_gqa allows fewer k/v heads"});
    AttentionOptions dropped;
    dropped.dropout_p = 0.1;
    expect_error(scaled_dot_product_attention(q, q, q, dropped), Code::kInvalidArgument,
                 {"dropout_p must be 0"});
    AttentionOptions wrong_mask;
    wrong_mask.attn_mask = floats(d, iota(4), {4});
    expect_error(scaled_dot_product_attention(q, q, q, wrong_mask), Code::kInvalidArgument,
                 {"attn_mask must be f32 and broadcast to [1, 2, 3, 3]"});
  });
}

}  // namespace
}  // namespace tessel::ops
