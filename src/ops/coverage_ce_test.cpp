// cross_entropy's class weights, label smoothing with weights, reduction "none" and probability
// targets against PyTorch's values (tools/pytorch/edge_cases.py, cross_entropy_cases: the same
// float32 logits, computed in float64), on every device the op library launches on. Random
// shapes against the C++ reference and finite differences are in ops_test.cpp.
#include <gtest/gtest.h>

#include "ops/op.h"
#include "ops/ops.h"
#include "ops/testing/edge_check.h"

namespace tessel::ops {
namespace {

using namespace testing;  // NOLINT: the helpers of ops/testing/edge_check.h

const std::vector<float> kLogits{-1.0f,  -0.63f, -0.26f, 0.11f, 0.48f, 0.85f,
                                 -0.78f, -0.41f, -0.04f, 0.33f, 0.70f, -0.93f};
const std::vector<double> kWeight{0.5, 2.0, 1.0, 3.0};

void expect_near(const std::vector<float>& got, const std::vector<double>& want,
                 const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], 2e-6 + 1e-5 * std::fabs(want[i])) << what << " element " << i;
}

TEST(OpCrossEntropyEdgeCases, ClassWeightsWithSmoothingAndEveryReduction) {
  for_each_device("cross_entropy", {DType::kF32}, [&](Device* d) {
    Tensor x = floats(d, kLogits, {3, 4});
    Tensor t = longs(d, {2, -100, 0}, {3});
    expect_near(host(cross_entropy(x, t, -100, 0.1, 0, kWeight)), {1.583661}, "mean");
    expect_near(host(cross_entropy(x, t, -100, 0.1, 1, kWeight)), {2.375491}, "sum");
    Expected<Tensor> none = cross_entropy(x, t, -100, 0.1, 2, kWeight);
    ASSERT_TRUE(none.ok()) << none.status().to_string();
    EXPECT_EQ(none->shape(), (Shape{3}));
    expect_near(host(none), {1.365581, 0.0, 1.009910}, "none");
    Attrs a = Attrs().set_reals("weight", kWeight).set("label_smoothing", 0.1);
    std::vector<Tensor> g = backward_of("cross_entropy", {x, t}, floats(d, {1}, {}), a);
    expect_near(host(g[0]),
                {0.085139, 0.101989, -0.420755, 0.233627, 0, 0, 0, 0, -0.225914, 0.085988, 0.156079,
                 -0.016154},
                "gradient");
    expect_error(cross_entropy(x, t, -100, 0.0, 0, {1.0, 2.0}), Code::kInvalidArgument,
                 {"2 class weights for 4 classes"});
    expect_error(cross_entropy(x, t, -100, 0.0, 3), Code::kInvalidArgument,
                 {"reduction 3 is none of"});
  });
}

TEST(OpCrossEntropyEdgeCases, ProbabilityTargets) {
  for_each_device("cross_entropy", {DType::kF32}, [&](Device* d) {
    Tensor x = floats(d, kLogits, {3, 4});
    Tensor p = floats(d, {0.2f, 0.3f, 0.5f, 0, 1, 0, 0, 0, 0.25f, 0.25f, 0.25f, 0.25f}, {3, 4});
    expect_near(host(cross_entropy(x, p, -100, 0.1, 0, kWeight)), {1.847412}, "mean");
    expect_near(host(cross_entropy(x, p, -100, 0.0, 2)), {1.544253, 1.144874, 1.545261}, "none");
    Attrs a = Attrs().set_reals("weight", kWeight).set("label_smoothing", 0.1);
    std::vector<Tensor> g = backward_of("cross_entropy", {x, p}, floats(d, {1}, {}), a);
    expect_near(host(g[0]),
                {0.020487, -0.117543, -0.043783, 0.140839, -0.089188, 0.077406, 0.010098, 0.001684,
                 0.067665, -0.008383, 0.145820, -0.205102},
                "gradient");
    // The targets' gradient (PyTorch gives probabilities one): -(1 - eps) w_c log_softmax.
    expect_near(host(g[1]),
                {0.303788, 0.993152, 0.385576, 0.823728, 0.171731, 0.464924, 0.721462, 1.831386,
                 0.240039, 0.738157, 0.258078, 2.241235},
                "target gradient");
    std::vector<Tensor> gn = backward_of("cross_entropy", {x, p}, floats(d, {1, -2, 0.5f}, {3}),
                                         Attrs().set("reduction", 2));
    expect_near(host(gn[1]),
                {2.025253, 1.655253, 1.285253, 0.915253, -2.289747, -1.549747, -4.809747, -4.069747,
                 0.800131, 0.615131, 0.430131, 1.245131},
                "target gradient, reduction none");
    expect_error(cross_entropy(x, floats(d, iota(3), {3}), -100, 0.0), Code::kInvalidArgument,
                 {"f32 class probabilities [..., C]"});
  });
}

}  // namespace
}  // namespace tessel::ops
