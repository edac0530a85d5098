// nn + autograd + optim together: a few steps of SGD and of AdamW on a tiny synthetic batch
// lower the cross-entropy loss of the reference MLP (784-512-256-10, shared/WORKLOADS.md), on cpu.
#include <gtest/gtest.h>

#include "autograd/functional.h"
#include "nn/layers.h"
#include "optim/clip.h"
#include "optim/optimizer.h"

namespace tessel::optim {
namespace {

using autograd::Variable;

struct Batch {
  Variable x, y;
};

// 16 random images in [0, 1) with random labels: a network this size memorises them quickly.
Batch synthetic_batch() {
  Pcg32 rng(7);
  std::vector<float> x(16 * 784);
  for (float& v : x)
    v = rng.next_float();
  std::vector<int64_t> y(16);
  for (int64_t& label : y)
    label = rng.below(10);
  return {Variable(Tensor::from_vector<float>(x, {16, 1, 28, 28}).value()),
          Variable(Tensor::from_vector<int64_t>(y, {16}).value())};
}

template <typename MakeOptimizer>
std::vector<double> train(MakeOptimizer make, int steps) {
  nn::MLP mlp({784, 512, 256, 10});
  Pcg32 rng(42);
  nn::FlatParameters params = nn::FlatParameters::create(mlp, cpu_device(), rng).value();
  std::unique_ptr<Optimizer> optimizer = make(params);
  Batch batch = synthetic_batch();
  std::vector<double> losses;
  for (int step = 0; step < steps; ++step) {
    Variable logits = mlp.forward(batch.x).value();
    Variable loss = autograd::cross_entropy(logits, batch.y).value();
    losses.push_back(loss.data().to_vector<float>().value()[0]);
    EXPECT_TRUE(loss.backward().ok());
    EXPECT_TRUE(clip_grad_norm(params, 5.0).ok());
    EXPECT_TRUE(optimizer->step().ok());
    EXPECT_TRUE(params.zero_grad().ok());
  }
  return losses;
}

void expect_decreasing(const std::vector<double>& losses) {
  // Random labels over 10 classes start near ln(10) = 2.30.
  EXPECT_NEAR(losses.front(), std::log(10.0), 0.5);
  EXPECT_LT(losses.back(), 0.7 * losses.front());
  for (size_t i = 1; i < losses.size(); ++i)
    EXPECT_LT(losses[i], losses[i - 1]) << "step " << i;
}

TEST(Training, SgdLowersTheLossOfTheMlp) {
  std::vector<double> losses = train(
      [](nn::FlatParameters& p) {
        return std::unique_ptr<Optimizer>(
            Sgd::create(p, {.lr = 0.05, .momentum = 0.9}).value().release());
      },
      8);
  expect_decreasing(losses);
}

TEST(Training, AdamWLowersTheLossOfTheMlp) {
  std::vector<double> losses = train(
      [](nn::FlatParameters& p) {
        return std::unique_ptr<Optimizer>(AdamW::create(p, {.lr = 1e-3}).value().release());
      },
      8);
  expect_decreasing(losses);
}

}  // namespace
}  // namespace tessel::optim
