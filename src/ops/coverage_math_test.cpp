// Edge cases of the element-wise math ops (ops/math_ops.cpp) against PyTorch 2's values, on
// every device the op library launches on: NaN and infinities, ties and bounds in gradients,
// zero bases and exponents, comparisons with NaN, where's condition and broadcasting. Forward
// values and gradients on random data are checked against the references in ops_test.cpp; the
// expectations here are the values tools/pytorch/edge_cases.py prints for the same inputs.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "ops/op.h"
#include "ops/ops.h"
#include "ops/testing/edge_check.h"

namespace tessel::ops {
namespace {

using namespace testing;  // NOLINT: the helpers of ops/testing/edge_check.h

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// Equal as PyTorch prints them: NaN matches NaN.
void expect_values(const std::vector<float>& got, const std::vector<float>& want,
                   const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(want[i]))
      EXPECT_TRUE(std::isnan(got[i])) << what << " element " << i << " is " << got[i];
    else if (std::isinf(want[i]))
      EXPECT_EQ(got[i], want[i]) << what << " element " << i;
    else
      EXPECT_NEAR(got[i], want[i], 1e-5 * (1 + std::fabs(want[i]))) << what << " element " << i;
  }
}

// torch.maximum / minimum propagate NaN; the gradient goes to the operand that does not lose,
// half to each on a tie, and whole to both where a NaN makes every comparison false.
TEST(OpMathEdgeCases, MaximumAndMinimumPropagateNaNAndSplitTies) {
  for_each_device("maximum", {DType::kF32}, [&](Device* d) {
    Tensor a = floats(d, {1, kNaN, 2, 3}, {4}), b = floats(d, {kNaN, 1, 2, 1}, {4});
    expect_values(host(maximum(a, b)), {kNaN, kNaN, 2, 3}, "maximum");
    expect_values(host(minimum(a, b)), {kNaN, kNaN, 2, 1}, "minimum");
    Tensor ones = floats(d, {1, 1, 1, 1}, {4});
    std::vector<Tensor> g = backward_of("maximum", {a, b}, ones);
    expect_values(host(g[0]), {1, 1, 0.5, 1}, "d maximum / da");
    expect_values(host(g[1]), {1, 1, 0.5, 0}, "d maximum / db");
    g = backward_of("minimum", {a, b}, ones);
    expect_values(host(g[0]), {1, 1, 0.5, 0}, "d minimum / da");
    expect_values(host(g[1]), {1, 1, 0.5, 1}, "d minimum / db");
  });
}

// exp, log, sqrt, abs, neg, erf at the edges of their domains, and the gradients there.
TEST(OpMathEdgeCases, UnaryMathAtTheEdgesOfItsDomain) {
  for_each_device("exp", {DType::kF32}, [&](Device* d) {
    Tensor x = floats(d, {0, -1, kInf, -kInf, kNaN}, {5});
    expect_values(host(exp(x)), {1, std::exp(-1.0f), kInf, 0, kNaN}, "exp");
    expect_values(host(log(x)), {-kInf, kNaN, kInf, kNaN, kNaN}, "log");
    expect_values(host(sqrt(x)), {0, kNaN, kInf, kNaN, kNaN}, "sqrt");
    expect_values(host(abs(x)), {0, 1, kInf, kInf, kNaN}, "abs");
    expect_values(host(neg(x)), {0, 1, -kInf, kInf, kNaN}, "neg");
    expect_values(host(erf(x)), {0, std::erf(-1.0f), 1, -1, kNaN}, "erf");
    Tensor y = floats(d, {-1, 0, 2}, {3}), ones = floats(d, {1, 1, 1}, {3});
    expect_values(host(backward_of("abs", {y}, ones)[0]), {-1, 0, 1}, "abs' (0 at 0)");
    expect_values(host(backward_of("sqrt", {floats(d, {0, 4}, {2})}, floats(d, {1, 1}, {2}))[0]),
                  {kInf, 0.25f}, "sqrt'");
    expect_values(host(backward_of("neg", {y}, ones)[0]), {-1, -1, -1}, "neg'");
    expect_values(host(backward_of("erf", {y}, ones)[0]),
                  {1.1283791670955126f * std::exp(-1.0f), 1.1283791670955126f,
                   1.1283791670955126f * std::exp(-4.0f)},
                  "erf'");
  });
}

// pow: 0^0 = 1, a negative base with a fractional exponent is NaN; the gradients at a zero base
// are 0 where PyTorch defines them so (0^0, 0^2).
TEST(OpMathEdgeCases, PowAtZeroAndNegativeBases) {
  for_each_device("pow", {DType::kF32}, [&](Device* d) {
    Tensor x = floats(d, {0, 0, 2, -2, -2}, {5}), e = floats(d, {2, 0, 3, 2, 0.5f}, {5});
    expect_values(host(pow(x, e)), {0, 1, 8, 4, kNaN}, "pow");
    Tensor x3 = floats(d, {0, 0, 2}, {3}), e3 = floats(d, {2, 0, 3}, {3});
    std::vector<Tensor> g = backward_of("pow", {x3, e3}, floats(d, {1, 1, 1}, {3}));
    expect_values(host(g[0]), {0, 0, 12}, "d pow / dx");
    expect_values(host(g[1]), {0, 0, 8 * std::log(2.0f)}, "d pow / dexponent");
  });
}

// clamp keeps NaN, gives max where min > max, and passes the gradient strictly inside the
// bounds only (PyTorch 2: the bounds themselves and NaN get 0).
TEST(OpMathEdgeCases, ClampKeepsNaNAndGradientsStopAtTheBounds) {
  for_each_device("clamp", {DType::kF32}, [&](Device* d) {
    Tensor x = floats(d, {kNaN, -3, 0.5f, 3, -0.5f, 1}, {6});
    expect_values(host(clamp(x, -0.5, 1.0)), {kNaN, -0.5f, 0.5f, 1, -0.5f, 1}, "clamp");
    expect_values(host(clamp(x, 2.0, 1.0)), {kNaN, 1, 1, 1, 1, 1}, "clamp with min > max");
    expect_values(host(clamp(x, std::nullopt, 0.0)), {kNaN, -3, 0, 0, -0.5f, 0}, "clamp max only");
    Tensor ones = floats(d, std::vector<float>(6, 1), {6});
    Attrs both = Attrs().set("min", -0.5).set("max", 1.0);
    expect_values(host(backward_of("clamp", {x}, ones, both)[0]), {0, 0, 1, 0, 0, 0}, "clamp'");
    expect_values(host(backward_of("clamp", {x}, ones, Attrs().set("min", -0.5))[0]),
                  {0, 0, 1, 1, 0, 1}, "clamp' with min only");
  });
}

// Comparisons give bool tensors; NaN is unequal to everything, itself included.
TEST(OpMathEdgeCases, ComparisonsWithNaN) {
  for_each_device("eq", {DType::kF32}, [&](Device* d) {
    Tensor a = floats(d, {kNaN, 1, 2, -kInf}, {4}), b = floats(d, {kNaN, 1, 1, -kInf}, {4});
    auto bools_of = [](const Expected<Tensor>& t) {
      EXPECT_TRUE(t.ok()) << t.status().to_string();
      EXPECT_EQ(t->dtype(), DType::kBool);
      return t->to_vector<bool>().value();
    };
    EXPECT_EQ(bools_of(compare("eq", a, b)), (std::vector<bool>{false, true, false, true}));
    EXPECT_EQ(bools_of(compare("ne", a, b)), (std::vector<bool>{true, false, true, false}));
    EXPECT_EQ(bools_of(compare("lt", a, b)), (std::vector<bool>{false, false, false, false}));
    EXPECT_EQ(bools_of(compare("le", a, b)), (std::vector<bool>{false, true, false, true}));
    EXPECT_EQ(bools_of(compare("gt", a, b)), (std::vector<bool>{false, false, true, false}));
    EXPECT_EQ(bools_of(compare("ge", a, b)), (std::vector<bool>{false, true, true, true}));
  });
}

// where takes a bool condition only (PyTorch: "where expected condition to be a boolean
// tensor"); its gradients are the output gradient where each side was chosen, summed over the
// dimensions it was broadcast along.
TEST(OpMathEdgeCases, WhereTakesABoolConditionAndBroadcasts) {
  for_each_device("where", {DType::kF32}, [&](Device* d) {
    Tensor a = floats(d, {1, 2, 3}, {3}), b = floats(d, {-1, -2, -3, -4, -5, -6}, {2, 3});
    Tensor c = bools(d, {true, false}, {2, 1});
    expect_values(host(where(c, a, b)), {1, 2, 3, -4, -5, -6}, "where");
    expect_error(where(longs(d, {1, 0}, {2, 1}), a, b), Code::kInvalidArgument,
                 {"where: the condition is bool"});
    std::vector<Tensor> g = backward_of("where", {c, a, b}, floats(d, iota(6, 1), {2, 3}));
    expect_values(host(g[1]), {1, 2, 3}, "d where / da");
    expect_values(host(g[2]), {0, 0, 0, 4, 5, 6}, "d where / db");
  });
}

// Integer tensors run integer kernels (ops/integer_ops.h), never a float kernel that would round
// i64 values past 2^24; exp of an integer is f32, as in PyTorch. The edge cases of every type are
// in coverage_integer_test.cpp.
TEST(OpMathEdgeCases, IntegerInputsStayExactPastTwoToThe24) {
  for_each_device("add", {DType::kI64}, [&](Device* d) {
    const int64_t v = (int64_t{1} << 40) + 1;
    Tensor big = longs(d, {v, -v}, {2});
    EXPECT_EQ(add(big, big).value().to_vector<int64_t>().value(),
              (std::vector<int64_t>{2 * v, -2 * v}));
    EXPECT_EQ(maximum(big, neg(big).value()).value().to_vector<int64_t>().value(),
              (std::vector<int64_t>{v, v}));
    Expected<Tensor> e = exp(big);
    ASSERT_TRUE(e.ok()) << e.status().to_string();
    EXPECT_EQ(e->dtype(), DType::kF32);
    EXPECT_EQ(e->to_vector<float>().value(), (std::vector<float>{INFINITY, 0.0f}));
  });
}

}  // namespace
}  // namespace tessel::ops
