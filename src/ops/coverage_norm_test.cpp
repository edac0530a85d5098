// rms_norm and group_norm (ops/norm_ops.cpp) against PyTorch's values (tools/pytorch/
// edge_cases.py, norm_cases: the same float32 inputs in float64) on every device the op library
// launches on: rms_norm's default eps (a zero row stays zero and its gradient is 1 / sqrt(eps)),
// group_norm over 2 groups of 2 channels, layer_norm_stats, global_avg_pool, and the errors. Random
// shapes against the C++ references and finite differences are in ops_test.cpp.
#include <gtest/gtest.h>

#include <cmath>

#include "ops/op.h"
#include "ops/ops.h"
#include "ops/testing/edge_check.h"

namespace tessel::ops {
namespace {

using namespace testing;  // NOLINT: the helpers of ops/testing/edge_check.h

void expect_near(const std::vector<float>& got, const std::vector<double>& want, double rel,
                 const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], 2e-6 + rel * std::fabs(want[i])) << what << " element " << i;
}

TEST(OpNormEdgeCases, RmsNormWithPyTorchsDefaultEps) {
  for_each_device("rms_norm", {DType::kF32}, [&](Device* d) {
    Tensor x = floats(d, {0, 0, 0, 1, -2, 3}, {2, 3}), w = floats(d, {0.5f, 1, 2}, {3});
    expect_near(host(rms_norm(x, w)), {0, 0, 0, 0.231455, -0.925820, 2.777460}, 1e-5, "rms_norm");
    std::vector<Tensor> g = backward_of("rms_norm", {x, w}, floats(d, {1, 1, 1, 1, -1, 2}, {2, 3}));
    expect_near(host(g[0]), {1448.154688, 2896.309376, 5792.618751, -0.247988, 0.495975, 0.413313},
                1e-5, "dx");
    expect_near(host(g[1]), {0.462910, 0.925820, 2.777460}, 1e-5, "dweight");
    expect_error(rms_norm(x, w, -1e-3), Code::kInvalidArgument, {"rms_norm: eps must be >= 0"});
    expect_error(rms_norm(x, floats(d, {1, 1}, {2})), Code::kInvalidArgument,
                 {"rms_norm: needs f32 x [..., C] and weight [C]"});
  });
}

TEST(OpNormEdgeCases, GroupNormInTwoGroups) {
  for_each_device("group_norm", {DType::kF32}, [&](Device* d) {
    std::vector<float> xs(16);
    for (int i = 0; i < 16; ++i)
      xs[i] = 0.1f * static_cast<float>(i) - 0.7f;
    Tensor x = floats(d, xs, {2, 4, 2});
    Tensor w = floats(d, {1, -1, 0.5f, 2}, {4}), b = floats(d, {0, 0.5f, -0.5f, 1}, {4});
    // The groups' variances are small (steps of 0.1), so f32 statistics carry ~1e-5 relative.
    const std::vector<double> y{-1.341104, -0.447035, 0.052965,  -0.841104, -1.170552, -0.723517,
                                1.894070,  3.682209,  -1.341104, -0.447035, 0.052965,  -0.841104,
                                -1.170552, -0.723517, 1.894069,  3.682209};
    expect_near(host(group_norm(x, 2, w, b)), y, 1e-4, "group_norm");
    std::vector<float> gs(16);
    for (int i = 0; i < 16; ++i)
      gs[i] = static_cast<float>(i % 5) - 2.0f;
    std::vector<Tensor> g = backward_of("group_norm", {x, w, b}, floats(d, gs, {2, 4, 2}),
                                        Attrs().set("num_groups", 2));
    expect_near(
        host(g[0]),
        {-3.580567, 1.786711, 7.153986, -5.360130, 8.050914, -6.257058, -11.624334, 9.830478,
         -4.470348, 4.470348, 4.470348, -4.470348, -12.507865, -0.443997, 38.441956, -25.490094},
        2e-4, "dx");
    expect_near(host(g[1]), {0.894070, -0.894070, -2.235174, -2.235175}, 1e-4, "dweight");
    expect_near(host(g[2]), {0, -2, 1, -1}, 1e-5, "dbias");
    expect_error(group_norm(x, 3, w, b), Code::kInvalidArgument,
                 {"group_norm: 4 channels do not split into num_groups = 3"});
  });
}

// torch.native_layer_norm's mean and rstd (ONNX LayerNormalization's Mean and InvStdDev); a
// constant row has rstd 1 / sqrt(eps).
TEST(OpNormEdgeCases, LayerNormStatistics) {
  for_each_device("layer_norm_stats", {DType::kF32}, [&](Device* d) {
    Tensor x = floats(d, {0, 0, 0, 1, -2, 3}, {2, 3});
    Expected<Tensor> s = layer_norm_stats(x);
    ASSERT_TRUE(s.ok()) << s.status().to_string();
    EXPECT_EQ(s->shape(), (Shape{2, 2}));
    expect_near(host(s), {0, 0.666667, 316.227766, 0.486664}, 1e-5, "mean, rstd");
  });
}

// ONNX GlobalAveragePool as F.adaptive_avg_pool2d(x, 1).
TEST(OpNormEdgeCases, GlobalAveragePool) {
  for_each_device("global_avg_pool", {DType::kF32}, [&](Device* d) {
    std::vector<float> xs(16);
    for (int i = 0; i < 16; ++i)
      xs[i] = 0.1f * static_cast<float>(i) - 0.7f;
    Expected<Tensor> y = global_avg_pool(floats(d, xs, {2, 2, 2, 2}));
    ASSERT_TRUE(y.ok()) << y.status().to_string();
    EXPECT_EQ(y->shape(), (Shape{2, 2, 1, 1}));
    expect_near(host(y), {-0.55, -0.15, 0.25, 0.65}, 1e-5, "global_avg_pool");
    expect_error(global_avg_pool(floats(d, xs, {2, 8})), Code::kInvalidArgument,
                 {"global_avg_pool: needs a float x [N, C, D1, ...]"});
  });
}

}  // namespace
}  // namespace tessel::ops
