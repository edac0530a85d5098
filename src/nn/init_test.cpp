// Initialisers: sample mean and variance of large tensors against the closed forms of each
// distribution (bounds from the sampling error of n draws), bounds, gains and determinism.
#include "nn/init.h"

#include <gtest/gtest.h>

#include <cmath>

#include "nn/layers.h"
#include "nn/module.h"

namespace tessel::nn {
namespace {

struct Moments {
  double mean = 0, variance = 0, max_abs = 0;
};

Moments moments(const Tensor& t) {
  std::vector<float> v = t.to_vector<float>().value();
  Moments m;
  for (float x : v) {
    m.mean += x;
    m.max_abs = std::max(m.max_abs, std::abs(static_cast<double>(x)));
  }
  m.mean /= static_cast<double>(v.size());
  for (float x : v)
    m.variance += (x - m.mean) * (x - m.mean);
  m.variance /= static_cast<double>(v.size());
  return m;
}

// n = 1024 * 512 draws: the sample mean is within 6 standard errors (sigma / sqrt(n)) of 0, and
// the sample variance within 2% of sigma^2 (its relative standard error is sqrt((kurtosis - 1) /
// n) <= 0.002 for the uniform and normal distributions).
void expect_moments(const Tensor& t, double expected_variance, const char* what) {
  Moments m = moments(t);
  double n = static_cast<double>(t.numel());
  EXPECT_NEAR(m.mean, 0.0, 6.0 * std::sqrt(expected_variance / n)) << what;
  EXPECT_NEAR(m.variance / expected_variance, 1.0, 0.02) << what;
}

constexpr int64_t kOut = 512, kIn = 1024;

TEST(Init, GainsAreTorchs) {
  EXPECT_DOUBLE_EQ(calculate_gain(Nonlinearity::kLinear), 1.0);
  EXPECT_DOUBLE_EQ(calculate_gain(Nonlinearity::kSigmoid), 1.0);
  EXPECT_DOUBLE_EQ(calculate_gain(Nonlinearity::kTanh), 5.0 / 3.0);
  EXPECT_DOUBLE_EQ(calculate_gain(Nonlinearity::kRelu), std::sqrt(2.0));
  EXPECT_DOUBLE_EQ(calculate_gain(Nonlinearity::kLeakyRelu, 0.2), std::sqrt(2.0 / 1.04));
}

TEST(Init, FansOfLinearAndConvWeights) {
  Fans linear = compute_fans({kOut, kIn}).value();
  EXPECT_EQ(linear.fan_in, kIn);
  EXPECT_EQ(linear.fan_out, kOut);
  Fans conv = compute_fans({64, 32, 3, 3}).value();  // [out, in, kh, kw]
  EXPECT_EQ(conv.fan_in, 32 * 9);
  EXPECT_EQ(conv.fan_out, 64 * 9);
  EXPECT_FALSE(compute_fans({10}).ok());
}

TEST(Init, KaimingUniformFanInAndFanOut) {
  Tensor w = Tensor::empty({kOut, kIn}, DType::kF32).value();
  Pcg32 rng(11);
  ASSERT_TRUE(kaiming_uniform(w, rng, {.nonlinearity = Nonlinearity::kRelu}).ok());
  double bound = std::sqrt(2.0) * std::sqrt(3.0 / kIn);
  expect_moments(w, bound * bound / 3.0, "kaiming_uniform fan_in");
  EXPECT_LE(moments(w).max_abs, bound);
  EXPECT_GT(moments(w).max_abs, 0.999 * bound);
  ASSERT_TRUE(
      kaiming_uniform(w, rng, {.mode = FanMode::kFanOut, .nonlinearity = Nonlinearity::kRelu})
          .ok());
  bound = std::sqrt(2.0) * std::sqrt(3.0 / kOut);
  expect_moments(w, bound * bound / 3.0, "kaiming_uniform fan_out");
}

TEST(Init, KaimingNormalWithLeakyReluSlope) {
  Tensor w = Tensor::empty({kOut, kIn}, DType::kF32).value();
  Pcg32 rng(12);
  ASSERT_TRUE(kaiming_normal(w, rng, {.a = 0.1}).ok());
  double std = std::sqrt(2.0 / 1.01) / std::sqrt(static_cast<double>(kIn));
  expect_moments(w, std * std, "kaiming_normal");
}

TEST(Init, XavierUniformAndNormal) {
  Tensor w = Tensor::empty({kOut, kIn}, DType::kF32).value();
  Pcg32 rng(13);
  ASSERT_TRUE(xavier_uniform(w, rng, 2.0).ok());
  double bound = 2.0 * std::sqrt(6.0 / (kIn + kOut));
  expect_moments(w, bound * bound / 3.0, "xavier_uniform");
  EXPECT_LE(moments(w).max_abs, bound);
  ASSERT_TRUE(xavier_normal(w, rng).ok());
  double std = std::sqrt(2.0 / (kIn + kOut));
  expect_moments(w, std * std, "xavier_normal");
}

TEST(Init, NormalWithMeanAndConstants) {
  Tensor w = Tensor::empty({kOut, kIn}, DType::kF32).value();
  Pcg32 rng(14);
  ASSERT_TRUE(normal(w, rng, 3.0, 0.5).ok());
  Moments m = moments(w);
  EXPECT_NEAR(m.mean, 3.0, 6.0 * 0.5 / std::sqrt(static_cast<double>(w.numel())));
  EXPECT_NEAR(m.variance / 0.25, 1.0, 0.02);
  ASSERT_TRUE(ones(w).ok());
  EXPECT_EQ(moments(w).mean, 1.0);
  ASSERT_TRUE(zeros(w).ok());
  EXPECT_EQ(moments(w).max_abs, 0.0);
}

TEST(Init, SameSeedSameWeightsOtherSeedOthers) {
  auto weights = [](uint64_t seed) {
    MLP mlp({20, 16, 4});
    Pcg32 rng(seed);
    FlatParameters flat = FlatParameters::create(mlp, cpu_device(), rng).value();
    return flat.groups()[0].values.to_vector<float>().value();
  };
  EXPECT_EQ(weights(5), weights(5));
  EXPECT_NE(weights(5), weights(6));
}

TEST(Init, LinearDefaultIsUniformOverOneOverSqrtFanIn) {
  // nn.Linear: weight and bias ~ U(-1/sqrt(in), 1/sqrt(in)).
  Linear lin(kIn, kOut);
  Pcg32 rng(15);
  FlatParameters flat = FlatParameters::create(lin, cpu_device(), rng).value();
  double bound = 1.0 / std::sqrt(static_cast<double>(kIn));
  expect_moments(lin.weight().variable.data(), bound * bound / 3.0, "Linear.weight");
  EXPECT_LE(moments(lin.weight().variable.data()).max_abs, bound);
  EXPECT_LE(moments(lin.bias()->variable.data()).max_abs, bound);
}

}  // namespace
}  // namespace tessel::nn
