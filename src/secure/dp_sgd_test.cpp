// DP-SGD: the clipped gradient against a plain reference that runs each example alone (a batch
// of one, forward and backward) and clips and sums the results here, for an MLP, a CNN and a
// Linear over sequences (ghost norms with T > 1); the noise has the promised spread and is the
// same for the same seed; a model with parameters outside Linear and Conv2d is refused.
#include "secure/dp_sgd.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "autograd/functional.h"
#include "nn/conv_layers.h"
#include "nn/layers.h"
#include "support/random.h"

namespace tessel::secure {
namespace {

using autograd::Variable;

struct Net {
  std::unique_ptr<nn::Sequential> model;
  std::unique_ptr<nn::FlatParameters> params;
};

Net mlp(int64_t in, int64_t hidden, int64_t out) {
  Net n{std::make_unique<nn::Sequential>(), nullptr};
  n.model->append(std::make_unique<nn::Linear>(in, hidden));
  n.model->append(std::make_unique<nn::ReLU>());
  n.model->append(std::make_unique<nn::Linear>(hidden, out));
  Pcg32 rng(3);
  n.params = std::make_unique<nn::FlatParameters>(
      nn::FlatParameters::create(*n.model, cpu_device(), rng).value());
  return n;
}

Net cnn() {
  Net n{std::make_unique<nn::Sequential>(), nullptr};
  n.model->append(
      std::make_unique<nn::Conv2d>(2, 3, 3, nn::Conv2dOptions{.stride = 1, .padding = 1}));
  n.model->append(std::make_unique<nn::ReLU>());
  n.model->append(std::make_unique<nn::Conv2d>(3, 2, 2, nn::Conv2dOptions{.stride = 2}));
  n.model->append(std::make_unique<nn::Flatten>());
  n.model->append(std::make_unique<nn::Linear>(2 * 2 * 2, 3));
  Pcg32 rng(5);
  n.params = std::make_unique<nn::FlatParameters>(
      nn::FlatParameters::create(*n.model, cpu_device(), rng).value());
  return n;
}

Tensor random_tensor(const Shape& shape, uint64_t seed) {
  Pcg32 rng(seed);
  std::vector<float> v(size_t(shape_numel(shape)));
  for (float& x : v)
    x = float(rng.below(2001)) / 500.0f - 2.0f;
  return Tensor::from_vector<float>(v, shape).value();
}

// Mean cross-entropy of the model on (x, y): logits [..., classes], targets [...].
Status backward(Net& n, const Tensor& x, const Tensor& y) {
  TESSEL_TRY(n.params->zero_grad());
  TESSEL_ASSIGN_OR_RETURN(Variable logits, n.model->forward(Variable(x)));
  TESSEL_ASSIGN_OR_RETURN(Variable loss, autograd::cross_entropy(logits, Variable(y)));
  return loss.backward();
}

std::vector<float> flat_grads(Net& n) {
  std::vector<float> out;
  for (const auto& g : n.params->groups()) {
    std::vector<float> v = g.grads.to_vector<float>().value();
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

// The reference: each example alone, its gradient clipped to C, the clipped ones averaged.
std::vector<double> reference(Net& n, const Tensor& x, const Tensor& y, double clip,
                              std::vector<double>& norms) {
  const int64_t batch = x.shape()[0];
  std::vector<double> sum;
  for (int64_t i = 0; i < batch; ++i) {
    Tensor xi = x.slice(0, i, i + 1).value().contiguous().value();
    Tensor yi = y.slice(0, i, i + 1).value().contiguous().value();
    EXPECT_TRUE(backward(n, xi, yi).ok());
    const std::vector<float> g = flat_grads(n);
    double norm = 0;
    for (float v : g)
      norm += double(v) * v;
    norm = std::sqrt(norm);
    norms.push_back(norm);
    const double c = std::min(1.0, clip / (norm + 1e-6));
    sum.resize(g.size(), 0.0);
    for (size_t k = 0; k < g.size(); ++k)
      sum[k] += c * g[k] / double(batch);
  }
  return sum;
}

// The clipping norm is the median of the examples' gradient norms, so that some are clipped and
// some are not.
void expect_private_gradient_matches(Net n, const Tensor& x, const Tensor& y) {
  std::vector<double> want_norms;
  reference(n, x, y, 1e30, want_norms);
  std::vector<double> sorted = want_norms;
  std::sort(sorted.begin(), sorted.end());
  const double clip = 0.5 * (sorted[sorted.size() / 2] + sorted[(sorted.size() - 1) / 2]);
  want_norms.clear();
  const std::vector<double> want = reference(n, x, y, clip, want_norms);
  auto dp = DpSgd::attach(*n.model, *n.params,
                          {.max_grad_norm = clip, .noise_multiplier = 0.0, .seed = {}});
  ASSERT_TRUE(dp.ok()) << dp.status().to_string();
  ASSERT_TRUE(backward(n, x, y).ok());
  Status s = (*dp)->privatise(x.shape()[0]);
  ASSERT_TRUE(s.ok()) << s.to_string();
  const std::vector<float> got = flat_grads(n);
  ASSERT_EQ(got.size(), want.size());
  int clipped = 0;
  for (size_t i = 0; i < want_norms.size(); ++i) {
    EXPECT_NEAR((*dp)->last_norms()[i], want_norms[i], 1e-4 * (1 + want_norms[i])) << i;
    clipped += want_norms[i] > clip;
  }
  EXPECT_GT(clipped, 0) << "no example was clipped: the test would not see clipping";
  EXPECT_LT(clipped, int(want_norms.size())) << "every example was clipped";
  for (size_t k = 0; k < want.size(); ++k)
    ASSERT_NEAR(got[k], want[k], 1e-5 + 1e-4 * std::abs(want[k])) << "coordinate " << k;
}

TEST(DpSgd, ClippedMlpGradientEqualsThePerExampleReference) {
  const Tensor x = random_tensor({6, 5}, 1);
  const Tensor y = Tensor::from_vector<int64_t>({0, 2, 1, 1, 0, 2}, {6}).value();
  expect_private_gradient_matches(mlp(5, 4, 3), x, y);
}

TEST(DpSgd, ClippedCnnGradientEqualsThePerExampleReference) {
  const Tensor x = random_tensor({5, 2, 4, 4}, 2);
  const Tensor y = Tensor::from_vector<int64_t>({0, 2, 1, 1, 0}, {5}).value();
  expect_private_gradient_matches(cnn(), x, y);
}

TEST(DpSgd, ClippedSequenceGradientEqualsThePerExampleReference) {
  const Tensor x = random_tensor({4, 3, 5}, 3);  // [B, T, C]: ghost norms over T x T
  const Tensor y =
      Tensor::from_vector<int64_t>({0, 2, 1, 1, 0, 2, 2, 1, 0, 0, 1, 2}, {4, 3}).value();
  expect_private_gradient_matches(mlp(5, 6, 3), x, y);
}

TEST(DpSgd, NoiseHasTheStandardDeviationSigmaTimesClipOverBatch) {
  const Tensor x = random_tensor({8, 50}, 4);
  const Tensor y = Tensor::from_vector<int64_t>({0, 1, 2, 3, 0, 1, 2, 3}, {8}).value();
  const double clip = 0.5, sigma = 2.0;
  std::array<uint8_t, 32> seed{};
  seed[0] = 7;
  std::vector<std::vector<float>> runs;
  for (int run = 0; run < 3; ++run) {
    Net n = mlp(50, 40, 4);
    if (run == 2) seed[0] = 8;
    auto dp = DpSgd::attach(*n.model, *n.params,
                            {.max_grad_norm = clip, .noise_multiplier = sigma, .seed = seed});
    ASSERT_TRUE(dp.ok());
    ASSERT_TRUE(backward(n, x, y).ok());
    ASSERT_TRUE((*dp)->privatise(8).ok());
    runs.push_back(flat_grads(n));
  }
  Net clean = mlp(50, 40, 4);
  {
    auto dp = DpSgd::attach(*clean.model, *clean.params,
                            {.max_grad_norm = clip, .noise_multiplier = 0, .seed = {}});
    ASSERT_TRUE(backward(clean, x, y).ok());
    ASSERT_TRUE((*dp)->privatise(8).ok());
  }
  const std::vector<float> base = flat_grads(clean);
  EXPECT_EQ(runs[0], runs[1]);  // the same seed, the same noise
  EXPECT_NE(runs[0], runs[2]);
  double sum = 0, sum2 = 0;
  int64_t n = 0;
  for (const auto& e : clean.params->entries())  // real coordinates only, not the padding
    for (int64_t k = e.offset; k < e.offset + e.numel; ++k) {
      const double z = (double(runs[0][size_t(k)]) - base[size_t(k)]) * 8 / (sigma * clip);
      sum += z;
      sum2 += z * z;
      ++n;
    }
  ASSERT_EQ(n, 50 * 40 + 40 + 40 * 4 + 4);
  EXPECT_NEAR(sum / double(n), 0.0, 0.08);
  EXPECT_NEAR(std::sqrt(sum2 / double(n)), 1.0, 0.05);
}

TEST(DpSgd, RefusesParametersItCannotClipPerExample) {
  Net n{std::make_unique<nn::Sequential>(), nullptr};
  n.model->append(std::make_unique<nn::Linear>(4, 4));
  n.model->append(std::make_unique<nn::LayerNorm>(4));
  Pcg32 rng(1);
  n.params = std::make_unique<nn::FlatParameters>(
      nn::FlatParameters::create(*n.model, cpu_device(), rng).value());
  auto dp = DpSgd::attach(*n.model, *n.params, {});
  ASSERT_FALSE(dp.ok());
  EXPECT_NE(dp.status().message().find("'1.weight' is not in a Linear or Conv2d"),
            std::string::npos)
      << dp.status().message();
}

}  // namespace
}  // namespace tessel::secure
