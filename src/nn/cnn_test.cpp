// The convolutional modules and the small CNN: parameter and buffer names, shapes and counts as
// PyTorch gives them (written out below from the torch.nn definitions in cnn.h), forward shapes,
// and batch norm / dropout in training and evaluation mode against closed forms.
#include "nn/cnn.h"

#include <gtest/gtest.h>

#include <cmath>

namespace tessel::nn {
namespace {

using autograd::Variable;

Tensor random_tensor(const Shape& shape, uint64_t seed, float offset = 0.0f, float spread = 1.0f) {
  Pcg32 rng(seed);
  std::vector<float> v(shape_numel(shape));
  for (float& x : v)
    x = offset + spread * (rng.next_float() * 2.0f - 1.0f);
  return Tensor::from_vector(v, shape).value();
}

TEST(SmallCnn, ParameterNamesShapesAndCountAreThoseOfPyTorch) {
  SmallCnn cnn;
  // [(n, tuple(p.shape)) for n, p in SmallCnn().named_parameters()]
  std::vector<std::pair<std::string, Shape>> expected = {
      {"conv1.weight", {32, 1, 3, 3}}, {"conv1.bias", {32}},       {"bn1.weight", {32}},
      {"bn1.bias", {32}},              {"conv2.weight", {64, 32, 3, 3}},
      {"conv2.bias", {64}},            {"bn2.weight", {64}},       {"bn2.bias", {64}},
      {"fc1.weight", {128, 3136}},     {"fc1.bias", {128}},        {"fc2.weight", {10, 128}},
      {"fc2.bias", {10}}};
  std::vector<std::pair<std::string, Shape>> got;
  for (auto& [name, p] : cnn.named_parameters())
    got.emplace_back(name, p->shape);
  EXPECT_EQ(got, expected);
  // sum(p.numel() for p in SmallCnn().parameters()):
  // 288+32 + 32+32 + 18432+64 + 64+64 + 401408+128 + 1280+10
  EXPECT_EQ(cnn.num_parameters(), 421834);

  // [n for n, _ in SmallCnn().named_buffers()]
  std::vector<std::string> buffers;
  for (auto& [name, b] : cnn.named_buffers())
    buffers.push_back(name);
  EXPECT_EQ(buffers, (std::vector<std::string>{
                         "bn1.running_mean", "bn1.running_var", "bn1.num_batches_tracked",
                         "bn2.running_mean", "bn2.running_var", "bn2.num_batches_tracked"}));
}

TEST(SmallCnn, ForwardShapes) {
  SmallCnn cnn;
  Pcg32 rng(1);
  FlatParameters params = FlatParameters::create(cnn, cpu_device(), rng).value();
  Variable x(random_tensor({3, 28, 28}, 2));
  Variable logits = cnn.forward(x).value();
  EXPECT_EQ(logits.shape(), (Shape{3, 10}));
  Variable x4(random_tensor({2, 1, 28, 28}, 3));
  EXPECT_EQ(cnn.forward(x4).value().shape(), (Shape{2, 10}));
  Expected<Variable> wrong = cnn.forward(Variable(random_tensor({2, 3, 28, 28}, 4)));
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.status().message().find("[2, 3, 28, 28]"), std::string::npos);
}

TEST(ConvLayers, ShapesOfEachLayer) {
  Sequential net;
  net.append(std::make_unique<Conv2d>(2, 4, 3, Conv2dOptions{.stride = 2, .padding = 1}));
  net.append(std::make_unique<Conv2d>(4, 5, 3, Conv2dOptions{.bias = false}));
  net.append(std::make_unique<AvgPool2d>(2));
  net.append(std::make_unique<Flatten>());
  std::vector<std::string> names;
  for (auto& [name, p] : net.named_parameters())
    names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{"0.weight", "0.bias", "1.weight"}));
  Pcg32 rng(5);
  FlatParameters params = FlatParameters::create(net, cpu_device(), rng).value();
  // 9x9 -> conv s2 p1: 5x5 -> conv 3x3: 3x3 -> avgpool 2: 1x1 -> flatten: 5.
  Variable y = net.forward(Variable(random_tensor({2, 2, 9, 9}, 6))).value();
  EXPECT_EQ(y.shape(), (Shape{2, 5}));
  MaxPool2d pool(3, 2, 1);
  EXPECT_EQ(pool.forward(Variable(random_tensor({1, 1, 8, 8}, 7))).value().shape(),
            (Shape{1, 1, 4, 4}));
}

// Per channel of x [N, C, H, W]: mean and biased variance, in double.
void channel_stats(const std::vector<float>& x, int64_t n, int64_t c, int64_t hw, int64_t ch,
                   double& mean, double& var) {
  double s = 0, s2 = 0;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < hw; ++j) {
      double v = x[(i * c + ch) * hw + j];
      s += v;
      s2 += v * v;
    }
  const double count = double(n * hw);
  mean = s / count;
  var = s2 / count - mean * mean;
}

TEST(BatchNorm2d, TrainingUsesBatchStatisticsAndUpdatesRunningOnes) {
  BatchNorm2d bn(3);
  Pcg32 rng(1);
  FlatParameters params = FlatParameters::create(bn, cpu_device(), rng).value();
  const int64_t n = 4, c = 3, hw = 25;
  Tensor x = random_tensor({n, c, 5, 5}, 8, /*offset=*/2.0f, /*spread=*/3.0f);
  std::vector<float> xs = x.to_vector<float>().value();
  std::vector<float> ys = bn.forward(Variable(x)).value().data().to_vector<float>().value();
  auto buffers = bn.named_buffers();
  std::vector<float> rm = buffers[0].second->tensor.to_vector<float>().value();
  std::vector<float> rv = buffers[1].second->tensor.to_vector<float>().value();
  EXPECT_EQ(buffers[2].second->tensor.to_vector<int64_t>().value(), std::vector<int64_t>{1});
  for (int64_t ch = 0; ch < c; ++ch) {
    double mean, var;
    channel_stats(xs, n, c, hw, ch, mean, var);
    double ymean, yvar;
    channel_stats(ys, n, c, hw, ch, ymean, yvar);
    EXPECT_NEAR(ymean, 0.0, 1e-5);
    EXPECT_NEAR(yvar, var / (var + 1e-5), 1e-4);
    // running = 0.9 * initial + 0.1 * batch (unbiased variance for the running one).
    const double count = double(n * hw);
    EXPECT_NEAR(rm[ch], 0.1 * mean, 1e-5);
    EXPECT_NEAR(rv[ch], 0.9 + 0.1 * var * count / (count - 1), 1e-5);
  }
}

TEST(BatchNorm2d, EvalModeUsesRunningStatisticsAndLeavesThemAlone) {
  BatchNorm2d bn(2);
  Pcg32 rng(1);
  FlatParameters params = FlatParameters::create(bn, cpu_device(), rng).value();
  bn.eval();
  EXPECT_FALSE(bn.is_training());
  Tensor x = random_tensor({2, 2, 3, 3}, 9, 1.0f, 2.0f);
  std::vector<float> xs = x.to_vector<float>().value();
  std::vector<float> ys = bn.forward(Variable(x)).value().data().to_vector<float>().value();
  // Running mean 0 and variance 1: y = x / sqrt(1 + eps).
  for (size_t i = 0; i < xs.size(); ++i)
    EXPECT_NEAR(ys[i], xs[i] / std::sqrt(1.0 + 1e-5), 1e-6);
  auto buffers = bn.named_buffers();
  EXPECT_EQ(buffers[0].second->tensor.to_vector<float>().value(), (std::vector<float>{0, 0}));
  EXPECT_EQ(buffers[1].second->tensor.to_vector<float>().value(), (std::vector<float>{1, 1}));
  EXPECT_EQ(buffers[2].second->tensor.to_vector<int64_t>().value(), std::vector<int64_t>{0});
}

TEST(Module, TrainAndEvalReachEveryDescendant) {
  SmallCnn cnn;
  cnn.eval();
  for (auto& [name, m] : cnn.named_modules())
    EXPECT_FALSE(m->is_training()) << name;
  cnn.train();
  for (auto& [name, m] : cnn.named_modules())
    EXPECT_TRUE(m->is_training()) << name;
  std::vector<std::string> names;
  for (auto& [name, m] : cnn.named_modules())
    names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{"", "conv1", "bn1", "conv2", "bn2", "fc1", "fc2"}));
}

TEST(Dropout, DropsInTrainingAndIsTheIdentityInEval) {
  Dropout drop(0.25, 11);
  Tensor x = Tensor::full({4000}, 1.0, DType::kF32).value();
  std::vector<float> y = drop.forward(Variable(x)).value().data().to_vector<float>().value();
  int64_t zeros = 0;
  for (float v : y) {
    if (v == 0.0f) {
      ++zeros;
    } else {
      EXPECT_NEAR(v, 1.0 / 0.75, 1e-6);
    }
  }
  // 1000 expected; the binomial standard deviation is ~27.
  EXPECT_NEAR(double(zeros), 1000.0, 150.0);
  // Each forward draws a new mask.
  std::vector<float> again = drop.forward(Variable(x)).value().data().to_vector<float>().value();
  EXPECT_NE(again, y);
  drop.eval();
  EXPECT_EQ(drop.forward(Variable(x)).value().data().to_vector<float>().value(),
            std::vector<float>(4000, 1.0f));
}

}  // namespace
}  // namespace tessel::nn
