// scaled_dot_product_attention (ops/attention_ops.cpp) against PyTorch on every device the op
// library launches on: src/ops/testdata/attention_cases.txt (tools/pytorch/coverage_fixtures.py)
// holds boolean and additive masks (a query with every key hidden gets zeros and no gradient, as
// PyTorch 2), is_causal (top left), the bottom-right causal mask, grouped-query heads, a scale and
// unbatched inputs, with PyTorch's output and the gradients of q, k and v. Random shapes against
// the C++ reference and finite differences are in ops_test.cpp; here also the errors.
#include <gtest/gtest.h>

#include <cmath>

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
      if (c.has("gmask")) {  // a float mask's gradient, summed over its broadcast dimensions
        EXPECT_EQ(g[3].shape(), c.tensor("mask").shape);
        expect_matches(host(g[3]), c.tensor("gmask").values, 1e-5, 1e-5, "mask gradient");
      } else if (bool_mask) {
        EXPECT_FALSE(g[3].defined()) << "a bool mask has no gradient";
      }
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
    dropped.dropout_p = 1.5;
    expect_error(scaled_dot_product_attention(q, q, q, dropped, 3), Code::kInvalidArgument,
                 {"dropout probability has to be between 0 and 1, but got 1.5"});
    dropped.dropout_p = 0.5;
    expect_error(scaled_dot_product_attention(q, q, q, dropped), Code::kInvalidArgument,
                 {"dropout_p = 0.5 needs a seed"});
    AttentionOptions wrong_mask;
    wrong_mask.attn_mask = floats(d, iota(4), {4});
    expect_error(scaled_dot_product_attention(q, q, q, wrong_mask), Code::kInvalidArgument,
                 {"attn_mask must be f32 and broadcast to [1, 2, 3, 3]"});
  });
}

// Attention dropout: with v the identity, the output is the dropped weights themselves, which must
// be the dropout op's mask (same seed, same positions) applied to the undropped weights; the kept
// fraction is 1 - p within 4 standard deviations; p = 1 gives zeros and zero gradients (as
// PyTorch). The gradients with dropout are checked against finite differences of the reference in
// ops_test.cpp (BackendOps), which reproduces the mask.
TEST(OpAttentionEdgeCases, DropoutUsesTheSeedsMaskAndRate) {
  for_each_device(kOp, {DType::kF32, DType::kF32, DType::kF32, DType::kF32}, [&](Device* d) {
    const int64_t l = 64, n = 128;
    std::vector<float> qv(l * 4), kv(n * 4), eye(n * n, 0.0f);
    for (size_t i = 0; i < qv.size(); ++i)
      qv[i] = std::sin(0.37f * static_cast<float>(i));
    for (size_t i = 0; i < kv.size(); ++i)
      kv[i] = std::cos(0.23f * static_cast<float>(i));
    for (int64_t i = 0; i < n; ++i)
      eye[i * n + i] = 1.0f;
    Tensor q = floats(d, qv, {1, l, 4}), k = floats(d, kv, {1, n, 4}),
           v = floats(d, eye, {1, n, n});
    std::vector<float> weights = host(scaled_dot_product_attention(q, k, v));
    const Tensor w = floats(d, weights, {1, l, n});
    for (double p : {0.25, 0.5}) {
      AttentionOptions o;
      o.dropout_p = p;
      std::vector<float> got = host(scaled_dot_product_attention(q, k, v, o, 11));
      std::vector<float> want = host(dropout(w, p, 11));
      ASSERT_EQ(got.size(), want.size());
      int64_t kept = 0;
      for (size_t i = 0; i < got.size(); ++i) {
        EXPECT_NEAR(got[i], want[i], 1e-6 * (1 + std::fabs(want[i]))) << "p " << p << " at " << i;
        kept += got[i] != 0.0f;
      }
      const double total = static_cast<double>(got.size());
      EXPECT_NEAR(kept / total, 1 - p, 4 * std::sqrt(p * (1 - p) / total)) << "p " << p;
      // Another seed, another mask.
      EXPECT_NE(host(scaled_dot_product_attention(q, k, v, o, 12)), got);
    }
    AttentionOptions all;
    all.dropout_p = 1;
    Attrs a = attention_attrs(all, 1).value();
    Tensor zero = floats(d, {0}, {1});
    std::vector<float> y = host(run(kOp, {q, k, v, zero}, a));
    EXPECT_EQ(y, std::vector<float>(l * n, 0.0f));
    std::vector<Tensor> g =
        backward_of(kOp, {q, k, v, zero}, floats(d, std::vector<float>(l * n, 1.0f), {1, l, n}), a);
    for (int i = 0; i < 3; ++i)
      EXPECT_EQ(host(g[i]), std::vector<float>(g[i].numel(), 0.0f)) << "gradient " << i;
  });
}

}  // namespace
}  // namespace tessel::ops
