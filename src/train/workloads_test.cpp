// The workloads of `tessel bench train` against shared/WORKLOADS.md: parameter counts from closed
// forms of the architectures the table names, batch shapes and units from the table, and a step
// that trains (the loss on the fixed batch falls).
#include "train/workloads.h"

#include <gtest/gtest.h>

#include <cmath>

namespace tessel::train {
namespace {

int64_t linear_params(int64_t in, int64_t out) {
  return in * out + out;
}

// GPT-2 with tied embedding: wte V*C, wpe T*C, per block 2 LayerNorms (4C), qkv (3C^2 + 3C),
// proj (C^2 + C), fc (4C^2 + 4C), fc proj (4C^2 + C); ln_f 2C.
int64_t gpt_params(int64_t v, int64_t t, int64_t l, int64_t c) {
  return v * c + t * c +
         l * (4 * c + 3 * c * c + 3 * c + c * c + c + 4 * c * c + 4 * c + 4 * c * c + c) + 2 * c;
}

// torchvision's ResNet: convolutions without bias, BatchNorm weight + bias, a 1x1 downsample
// (+ BatchNorm) where a block changes stride or width, global pooling, then fc.
int64_t resnet_params(bool bottleneck, const std::vector<int64_t>& blocks, bool cifar_stem,
                      int64_t classes) {
  auto conv = [](int64_t in, int64_t out, int64_t k) { return in * out * k * k; };
  auto bn = [](int64_t c) { return 2 * c; };
  int64_t n = conv(3, 64, cifar_stem ? 3 : 7) + bn(64), in = 64;
  for (size_t stage = 0; stage < blocks.size(); ++stage) {
    const int64_t planes = int64_t{64} << stage, out = bottleneck ? 4 * planes : planes;
    for (int64_t b = 0; b < blocks[stage]; ++b) {
      const bool stride2 = b == 0 && stage > 0;
      if (bottleneck)
        n += conv(in, planes, 1) + bn(planes) + conv(planes, planes, 3) + bn(planes) +
             conv(planes, out, 1) + bn(out);
      else
        n += conv(in, planes, 3) + bn(planes) + conv(planes, planes, 3) + bn(planes);
      if (stride2 || in != out) n += conv(in, out, 1) + bn(out);
      in = out;
    }
  }
  return n + in * classes + classes;
}

int64_t parameters_of(const std::string& name) {
  auto run = WorkloadRun::create(name, cpu_device(), 1);
  EXPECT_TRUE(run.ok()) << run.status().to_string();
  return run.ok() ? (*run)->parameter_count() : -1;
}

TEST(Workloads, ParameterCountsAreThoseOfTheTable) {
  // mlp: 784-512-256-10.
  EXPECT_EQ(parameters_of("mlp"),
            linear_params(784, 512) + linear_params(512, 256) + linear_params(256, 10));
  // cnn: conv3x3 1->32 and 32->64 with bias, BatchNorm weight+bias, linear 3136->128->10.
  EXPECT_EQ(parameters_of("cnn"), (9 * 1 * 32 + 32) + 2 * 32 + (9 * 32 * 64 + 64) + 2 * 64 +
                                      linear_params(3136, 128) + linear_params(128, 10));
  EXPECT_EQ(parameters_of("gpt_tiny"), gpt_params(65, 64, 4, 128));
  EXPECT_EQ(parameters_of("gpt_mini"), gpt_params(65, 256, 6, 384));
  EXPECT_EQ(gpt_params(65, 64, 4, 128), 809856);  // the figure nanoGPT prints for this config
  EXPECT_EQ(parameters_of("resnet18"), resnet_params(false, {2, 2, 2, 2}, true, 10));
  EXPECT_EQ(parameters_of("resnet50"), resnet_params(true, {3, 4, 6, 3}, false, 1000));
  EXPECT_EQ(resnet_params(true, {3, 4, 6, 3}, false, 1000), 25557032);  // torchvision's figure
}

TEST(Workloads, BatchesAndUnitsAreThoseOfTheTable) {
  struct Row {
    const char* name;
    Shape input;
    int64_t items;
    const char* unit;
  };
  const Row rows[] = {{"mlp", {128, 1, 28, 28}, 128, "samples/s"},
                      {"cnn", {128, 1, 28, 28}, 128, "samples/s"},
                      {"gpt_tiny", {12, 64}, 12 * 64, "tokens/s"},
                      {"gpt_mini", {8, 256}, 8 * 256, "tokens/s"},
                      {"resnet18", {32, 3, 32, 32}, 32, "samples/s"},
                      {"resnet50", {8, 3, 224, 224}, 8, "samples/s"}};
  ASSERT_EQ(workload_specs().size(), std::size(rows));
  for (size_t i = 0; i < std::size(rows); ++i) {
    const WorkloadSpec& s = workload_specs()[i];
    EXPECT_EQ(s.name, rows[i].name);
    EXPECT_EQ(s.input_shape, rows[i].input) << s.name;
    EXPECT_EQ(s.items_per_step, rows[i].items) << s.name;
    EXPECT_EQ(s.unit, rows[i].unit) << s.name;
  }
}

TEST(Workloads, UnknownNamesAreErrorsNamingTheKnownOnes) {
  auto unknown = WorkloadRun::create("vgg", cpu_device(), 1);
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("gpt_tiny"), std::string::npos)
      << unknown.status().to_string();
}

TEST(Workloads, StepsTrainOnTheFixedBatch) {
  // AdamW at lr 1e-3 memorises one batch: after a few steps the loss is clearly lower, and the
  // first loss is near ln(classes) for a freshly initialised classifier.
  for (const char* name : {"mlp", "gpt_tiny"}) {
    auto run = WorkloadRun::create(name, cpu_device(), 1);
    ASSERT_TRUE(run.ok()) << run.status().to_string();
    ASSERT_FALSE((*run)->last_loss().ok());
    ASSERT_TRUE((*run)->step().ok());
    auto first = (*run)->last_loss();
    ASSERT_TRUE(first.ok());
    const double classes = std::string(name) == "mlp" ? 10 : 65;
    EXPECT_NEAR(*first, std::log(classes), 0.35 * std::log(classes)) << name;
    for (int i = 0; i < 5; ++i)
      ASSERT_TRUE((*run)->step().ok());
    auto later = (*run)->last_loss();
    ASSERT_TRUE(later.ok());
    EXPECT_LT(*later, *first - 0.1) << name;
  }
}

}  // namespace
}  // namespace tessel::train
