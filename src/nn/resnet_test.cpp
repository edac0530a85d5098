// ResNet-18/34/50: parameter and buffer names, shapes and counts against torchvision's own models
// (src/nn/testdata/resnet_manifest.txt, written by tools/pytorch/make_resnet_manifest.py), forward
// shapes at the sizes of shared/WORKLOADS.md, torchvision's initialisation against its closed
// forms, and a backward pass that reaches every parameter with finite gradients.
#include "nn/resnet.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace tessel::nn {
namespace {

std::string testdata_path(const std::string& name) {
  // ctest sets TESSEL_SOURCE_DIR; run by hand, the source tree is where this file was compiled.
  const char* source = std::getenv("TESSEL_SOURCE_DIR");
  std::filesystem::path root = source ? std::filesystem::path(source)
                                      : std::filesystem::path(__FILE__).parent_path() / "../..";
  return (root / "src" / "nn" / "testdata" / name).string();
}

using NamedShapes = std::vector<std::pair<std::string, Shape>>;

// One model of the manifest, as torchvision built it.
struct ManifestModel {
  std::string name, stem;
  int64_t classes = 0;
  NamedShapes params, buffers;
  Shape input, output;
  int64_t parameters = 0;
};

std::vector<ManifestModel> read_manifest() {
  std::ifstream in(testdata_path("resnet_manifest.txt"));
  EXPECT_TRUE(in) << testdata_path("resnet_manifest.txt");
  std::vector<ManifestModel> models;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream words(line);
    std::string kind;
    words >> kind;
    if (kind == "model") {
      ManifestModel m;
      std::string stem, classes;
      words >> m.name >> stem >> classes;
      m.stem = stem.substr(stem.find('=') + 1);
      m.classes = std::stoll(classes.substr(classes.find('=') + 1));
      models.push_back(m);
      continue;
    }
    if (kind == "end") continue;
    EXPECT_FALSE(models.empty()) << line;
    ManifestModel& m = models.back();
    if (kind == "parameters") {
      words >> m.parameters;
      continue;
    }
    std::string name;
    if (kind == "param" || kind == "buffer") words >> name;
    Shape shape;
    for (int64_t d; words >> d;)
      shape.push_back(d);
    if (kind == "param") m.params.emplace_back(name, shape);
    if (kind == "buffer") m.buffers.emplace_back(name, shape);
    if (kind == "input") m.input = shape;
    if (kind == "output") m.output = shape;
  }
  return models;
}

ResNetConfig config_of(const ManifestModel& m) {
  const int depth = std::stoi(m.name.substr(std::string("resnet").size()));
  const ResNetStem stem = m.stem == "cifar" ? ResNetStem::kCifar : ResNetStem::kImageNet;
  return resnet_config(depth, stem, m.classes).value();
}

Tensor random_tensor(const Shape& shape, uint64_t seed) {
  Pcg32 rng(seed);
  std::vector<float> v(shape_numel(shape));
  for (float& x : v)
    x = rng.next_float() * 2.0f - 1.0f;
  return Tensor::from_vector(v, shape).value();
}

TEST(ResNet, NamesShapesAndCountsAreTorchvisions) {
  std::vector<ManifestModel> models = read_manifest();
  // resnet18 cifar/10, resnet18/34/50 imagenet/1000, resnet50 cifar/100.
  ASSERT_EQ(models.size(), 5u);
  for (const ManifestModel& m : models) {
    SCOPED_TRACE(m.name + " " + m.stem);
    ResNet model(config_of(m));
    NamedShapes params, buffers;
    for (auto& [name, p] : model.named_parameters())
      params.emplace_back(name, p->shape);
    for (auto& [name, b] : model.named_buffers())
      buffers.emplace_back(name, b->shape);
    EXPECT_EQ(params, m.params);
    EXPECT_EQ(buffers, m.buffers);
    EXPECT_EQ(model.num_parameters(), m.parameters);
  }
  // The manifest itself says what shared/WORKLOADS.md's resnet18 and resnet50 are.
  EXPECT_EQ(models[0].parameters, 11173962);
  EXPECT_EQ(models[3].parameters, 25557032);
}

TEST(ResNet, BuffersAreBatchNormsRunningStatistics) {
  ResNet model(resnet_config(18, ResNetStem::kCifar, 10).value());
  Pcg32 rng(1);
  FlatParameters params = FlatParameters::create(model, cpu_device(), rng).value();
  for (auto& [name, b] : model.named_buffers()) {
    if (name.ends_with("num_batches_tracked")) {
      EXPECT_EQ(b->tensor.dtype(), DType::kI64) << name;
      EXPECT_EQ(b->tensor.to_vector<int64_t>().value(), std::vector<int64_t>{0}) << name;
    } else {
      std::vector<float> v = b->tensor.to_vector<float>().value();
      const float want = name.ends_with("running_var") ? 1.0f : 0.0f;
      for (float x : v)
        ASSERT_EQ(x, want) << name;
    }
  }
}

// torchvision's ResNet.__init__: convolutions N(0, 2 / fan_out) with fan_out = out * k * k;
// batch norm weight 1 bias 0; fc nn.Linear's default U(-1/sqrt(in), 1/sqrt(in)).
TEST(ResNet, InitialisationIsTorchvisions) {
  ResNet model(resnet_config(50, ResNetStem::kImageNet, 1000).value());
  Pcg32 rng(7);
  FlatParameters params = FlatParameters::create(model, cpu_device(), rng).value();
  for (auto& [name, p] : model.named_parameters()) {
    std::vector<float> v = p->variable.data().to_vector<float>().value();
    const std::string leaf = name.substr(name.rfind('.') + 1);
    const bool batch_norm = name.find(".bn") != std::string::npos || name.starts_with("bn") ||
                            name.ends_with("downsample.1.weight") ||
                            name.ends_with("downsample.1.bias");
    if (batch_norm) {
      for (float x : v)
        ASSERT_EQ(x, leaf == "weight" ? 1.0f : 0.0f) << name;
      continue;
    }
    double sum = 0, sum2 = 0, largest = 0;
    for (float x : v) {
      sum += x;
      sum2 += double(x) * x;
      largest = std::max(largest, std::fabs(double(x)));
    }
    const double n = double(v.size()), mean = sum / n, var = sum2 / n - mean * mean;
    if (name.starts_with("fc.")) {
      const double bound = 1.0 / std::sqrt(2048.0);
      EXPECT_LE(largest, bound) << name;
      EXPECT_NEAR(var, bound * bound / 3, 0.05 * bound * bound / 3) << name;  // U(-b, b): b^2/3
      continue;
    }
    ASSERT_EQ(p->shape.size(), 4u) << name;  // every other parameter is a convolution weight
    const double fan_out = double(p->shape[0] * p->shape[2] * p->shape[3]);
    const double want_var = 2.0 / fan_out;
    // The sample variance of n normal draws has relative standard deviation sqrt(2 / n); allow
    // six of them (the smallest weight here, conv1's 9,408 values, gives 9%).
    EXPECT_NEAR(var, want_var, 6 * std::sqrt(2.0 / n) * want_var) << name;
    EXPECT_NEAR(mean, 0.0, 6 * std::sqrt(want_var / n)) << name;
  }
}

TEST(ResNet, ForwardShapesOfTheWorkloads) {
  std::vector<ManifestModel> models = read_manifest();
  ASSERT_EQ(models.size(), 5u);
  // shared/WORKLOADS.md: resnet18, CIFAR stem, 10 classes, 3x32x32, for a batch of 2 as
  // torchvision's model gave it.
  const ManifestModel& m18 = models[0];
  ASSERT_EQ(m18.input, (Shape{3, 32, 32}));
  ResNet r18(config_of(m18));
  Pcg32 rng(2);
  FlatParameters p18 = FlatParameters::create(r18, cpu_device(), rng).value();
  Variable logits = r18.forward(Variable(random_tensor({2, 3, 32, 32}, 3))).value();
  EXPECT_EQ(logits.shape(), m18.output);
  // Any size down to 1x1 after layer4 works, as with adaptive pooling: 3x8x8 reaches 1x1.
  EXPECT_EQ(r18.forward(Variable(random_tensor({2, 3, 8, 8}, 4))).value().shape(), m18.output);
  Expected<Variable> wrong = r18.forward(Variable(random_tensor({2, 1, 32, 32}, 5)));
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.status().message().find("[2, 1, 32, 32]"), std::string::npos)
      << wrong.status().message();

  // shared/WORKLOADS.md: resnet50, ImageNet stem, 1000 classes, 3x224x224. Evaluation mode and
  // one image keep the test short; the stem takes 224 to 56, the stages to 56, 28, 14, 7.
  const ManifestModel& m50 = models[3];
  ASSERT_EQ(m50.input, (Shape{3, 224, 224}));
  ResNet r50(config_of(m50));
  FlatParameters p50 = FlatParameters::create(r50, cpu_device(), rng).value();
  r50.eval();
  autograd::NoGrad no_grad;
  Variable out = r50.forward(Variable(random_tensor({1, 3, 224, 224}, 6))).value();
  EXPECT_EQ(out.shape(), (Shape{1, m50.output[1]}));
  std::vector<float> v = out.data().to_vector<float>().value();
  for (float x : v)
    ASSERT_TRUE(std::isfinite(x));
}

TEST(ResNet, OneChannelImagesMayOmitTheChannelAxis) {
  // What a Fashion-MNIST run hands out: [N, 28, 28].
  ResNetConfig config = resnet_config(18, ResNetStem::kCifar, 10).value();
  config.in_channels = 1;
  config.base_width = 4;
  ResNet model(config);
  Pcg32 rng(4);
  FlatParameters params = FlatParameters::create(model, cpu_device(), rng).value();
  EXPECT_EQ(model.forward(Variable(random_tensor({2, 28, 28}, 7))).value().shape(), (Shape{2, 10}));
  EXPECT_EQ(model.forward(Variable(random_tensor({2, 1, 28, 28}, 7))).value().shape(),
            (Shape{2, 10}));
}

// One backward pass: every parameter gets a finite, non-zero
// gradient (a parameter left out of the graph would keep its zero gradient).
void expect_backward_reaches_every_parameter(const ResNetConfig& config, const Shape& input) {
  ResNet model(config);
  Pcg32 rng(3);
  FlatParameters params = FlatParameters::create(model, cpu_device(), rng).value();
  Variable logits = model.forward(Variable(random_tensor(input, 8))).value();
  ASSERT_EQ(logits.shape(), (Shape{input[0], config.classes}));
  std::vector<int64_t> labels;
  for (int64_t i = 0; i < input[0]; ++i)
    labels.push_back(i % config.classes);
  Variable targets(Tensor::from_vector(labels, {input[0]}).value());
  Variable loss = autograd::cross_entropy(logits, targets).value();
  ASSERT_TRUE(loss.backward().ok());
  for (auto& [name, p] : model.named_parameters()) {
    std::vector<float> g = p->grad.to_vector<float>().value();
    bool nonzero = false;
    for (float x : g) {
      ASSERT_TRUE(std::isfinite(x)) << name;
      nonzero = nonzero || x != 0.0f;
    }
    EXPECT_TRUE(nonzero) << name << " got no gradient";
  }
}

TEST(ResNet, BackwardReachesEveryParameterOfResNet18) {
  // shared/WORKLOADS.md's resnet18 (CIFAR stem, 10 classes) at 8x8, which layer4 takes to 1x1.
  expect_backward_reaches_every_parameter(resnet_config(18, ResNetStem::kCifar, 10).value(),
                                          {4, 3, 8, 8});
}

TEST(ResNet, BackwardReachesEveryParameterOfResNet50) {
  // shared/WORKLOADS.md's resnet50 (ImageNet stem) with 7 classes, at 64x64 (layer4: 2x2) to
  // keep the test short.
  expect_backward_reaches_every_parameter(resnet_config(50, ResNetStem::kImageNet, 7).value(),
                                          {2, 3, 64, 64});
}

TEST(ResNet, UnknownDepthNamesTheAllowedOnes) {
  Expected<ResNetConfig> config = resnet_config(20, ResNetStem::kCifar, 10);
  ASSERT_FALSE(config.ok());
  EXPECT_NE(config.status().message().find("allowed: 18, 34, 50"), std::string::npos);
}

}  // namespace
}  // namespace tessel::nn
