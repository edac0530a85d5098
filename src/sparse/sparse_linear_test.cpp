// SparseLinear against nn::Linear with the pruned dense weight (forward and every gradient, on
// every device), magnitude pruning, and the GCN learning on a power-law graph.
#include <gtest/gtest.h>

#include <cmath>

#include "autograd/functional.h"
#include "sparse/functional.h"
#include "sparse/gcn.h"
#include "sparse/sparse_linear.h"
#include "sparse/testing.h"

namespace tessel::sparse {
namespace {

TEST(SparseLinear, PruneKeepsTheLargestMagnitudes) {
  Tensor w = Tensor::from_vector<float>({0.1f, -3, 0.5f, 2, -0.2f, 0.5f}, {2, 3}).value();
  SparseMatrix p = SparseLinear::prune(w, 0.5).value();
  EXPECT_EQ(p.nnz(), 3);
  // |w| ranks: -3, 2, then the first 0.5 (ties to the earlier entry).
  EXPECT_EQ(p.to_dense().value().to_vector<float>().value(),
            (std::vector<float>{0, -3, 0.5f, 2, 0, 0}));
  EXPECT_FALSE(SparseLinear::prune(w, 0).ok());
}

TEST(SparseLinear, MatchesLinearWithThePrunedWeightOnEveryDevice) {
  for (Device* device : testing::devices()) {
    SCOPED_TRACE(device->id());
    SparseMatrix w = SparseLinear::prune(testing::random_dense({9, 14}, 1, device), 0.3).value();
    SparseLinear layer(w);
    Pcg32 rng(2);
    nn::FlatParameters flat = nn::FlatParameters::create(layer, device, rng).value();
    Tensor x = testing::random_dense({2, 3, 14}, 3, device);
    Tensor g = testing::random_dense({2, 3, 9}, 4, device);
    Variable vx(x, true);
    Variable y = layer.forward(vx).value();
    ASSERT_EQ(y.shape(), (Shape{2, 3, 9}));
    ASSERT_TRUE(y.backward(g).ok());
    // The reference: the dense weight (a function of the values) in autograd::linear.
    SparseVariable dense_w = SparseVariable::of(
        w.with_values(layer.weight_values().variable.data()).value(), true);
    Variable bias(layer.bias()->variable.data(), true);
    Variable rx(x, true);
    Variable want = autograd::linear(rx, to_dense(dense_w).value(), bias).value();
    ASSERT_TRUE(want.backward(g).ok());
    auto close = [](const Tensor& a, const Tensor& b, const char* what) {
      std::vector<float> u = a.contiguous().value().to_vector<float>().value();
      std::vector<float> v = b.contiguous().value().to_vector<float>().value();
      ASSERT_EQ(u.size(), v.size()) << what;
      for (size_t i = 0; i < u.size(); ++i)
        EXPECT_NEAR(u[i], v[i], 1e-5 + 1e-5 * std::fabs(v[i])) << what << " " << i;
    };
    close(y.data(), want.data(), "output");
    close(vx.grad(), rx.grad(), "input gradient");
    close(layer.weight_values().variable.grad(), dense_w.values.grad(), "weight gradient");
    close(layer.bias()->variable.grad(), bias.grad(), "bias gradient");
  }
}

// On a power-law graph whose features alone are weak evidence, the GCN learns and beats the
// majority class by far (4 balanced classes: 25%).
TEST(Gcn, LearnsOnAPowerLawGraph) {
  GraphOptions o;
  o.nodes = 600;
  Graph g = make_power_law_graph(o).value();
  EXPECT_GT(g.max_degree, 4 * o.mean_degree) << g.describe();  // hubs: a heavy tail
  Gcn model(o.features, 16, o.classes);
  GcnReport r = train_gcn(model, g, {.steps = 60, .lr = 0.02}).value();
  EXPECT_LT(r.losses.back(), 0.8 * r.losses.front());
  EXPECT_GT(r.test_accuracy, 0.5) << g.describe();
}

}  // namespace
}  // namespace tessel::sparse
