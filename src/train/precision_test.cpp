// Mixed precision in the trainer: fp16's loss scaler skips a step whose gradients hold an inf
// (the weights do not move, the optimizer's step count does not advance, the scale halves) and
// its scale survives a checkpoint; bf16 training of examples/fashion_mlp.toml ends within 0.3
// accuracy points of fp32 with the same seed.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <set>

#include "data/mnist.h"
#include "train/testing/trainer_check.h"
#include "train/trainer.h"

namespace tessel::train {
namespace {

using check::quiet;

bool have_fashion_mnist() {
  return load_mnist(kFashionMnistDir, "test").ok();
}

std::string temp_folder(const std::string& name) {
  return check::temp_folder("precision_test", name);
}

TrainConfig tiny_fp16_config(const std::string& folder, int64_t steps) {
  std::string text = fmt::format(R"(
seed = 5
[model]
name = "mlp"
hidden = [16]
[data]
name = "fashion_mnist"
batch_size = 8
eval_batch_size = 5000
[optimizer]
name = "adamw"
lr = 0.01
[train]
steps = {}
precision = "fp16"
checkpoint_path = "{}/checkpoint.safetensors"
)",
                                 steps, folder);
  return parse_train_config(Config::parse(text, "tiny.toml").value()).value();
}

// Writes an inf into the first gradient at the steps in `at`.
std::function<Status(const nn::FlatParameters&, int64_t)> inject_inf_at(std::set<int64_t> at) {
  return [at](const nn::FlatParameters& params, int64_t step) -> Status {
    if (!at.count(step)) return ok_status();
    Tensor first = params.groups()[0].grads.slice(0, 0, 1).value();
    return first.copy_from(
        Tensor::from_vector<float>({std::numeric_limits<float>::infinity()}, {1}).value());
  };
}

std::vector<float> weights_of(const nn::FlatParameters& params) {
  return params.groups()[0].values.to_vector<float>().value();
}

TEST(MixedPrecision, AnInfSkipsTheStepAndHalvesTheScale) {
  if (!have_fashion_mnist()) GTEST_SKIP() << "no Fashion-MNIST in " << kFashionMnistDir;
  const std::string folder = temp_folder("skip");
  std::vector<float> before_step_1, before_step_2;
  auto inject = inject_inf_at({1});
  auto trainer = Trainer::create(tiny_fp16_config(folder, 3), quiet()).value();
  trainer->set_after_backward([&](const nn::FlatParameters& params, int64_t step) -> Status {
    if (step == 1) before_step_1 = weights_of(params);
    if (step == 2) before_step_2 = weights_of(params);
    return inject(params, step);
  });
  ASSERT_NE(trainer->grad_scaler(), nullptr);
  EXPECT_EQ(trainer->grad_scaler()->scale(), 65536.0);
  RunSummary run = trainer->run().value();
  ASSERT_EQ(run.losses.size(), 3u);
  for (double loss : run.losses)
    EXPECT_TRUE(std::isfinite(loss));  // the loss itself was never scaled
  EXPECT_EQ(before_step_1, before_step_2) << "step 1 was applied despite its inf";
  EXPECT_EQ(trainer->optimizer().step_count(), 2);   // steps 0 and 2
  EXPECT_EQ(trainer->grad_scaler()->scale(), 32768.0);  // halved once
  EXPECT_EQ(trainer->grad_scaler()->clean_steps(), 1);  // step 2
  std::filesystem::remove_all(folder);
}

TEST(MixedPrecision, ACheckpointKeepsTheLossScale) {
  if (!have_fashion_mnist()) GTEST_SKIP() << "no Fashion-MNIST in " << kFashionMnistDir;
  const std::string folder = temp_folder("resume");
  auto first = Trainer::create(tiny_fp16_config(folder, 4), quiet()).value();
  first->set_after_backward(inject_inf_at({0, 2}));
  ASSERT_TRUE(first->run(/*stop_at=*/4).ok());
  EXPECT_EQ(first->grad_scaler()->scale(), 16384.0);
  EXPECT_EQ(first->grad_scaler()->clean_steps(), 1);

  auto second = Trainer::create(tiny_fp16_config(folder, 6), quiet()).value();
  EXPECT_EQ(second->grad_scaler()->scale(), 65536.0);
  ASSERT_TRUE(second->resume(folder + "/checkpoint.safetensors").ok());
  EXPECT_EQ(second->grad_scaler()->scale(), 16384.0);
  EXPECT_EQ(second->grad_scaler()->clean_steps(), 1);
  EXPECT_EQ(second->optimizer().step_count(), 2);
  std::filesystem::remove_all(folder);
}

TEST(MixedPrecision, Bf16FashionMlpEndsWithinAThirdOfAPointOfFp32) {
  if (!have_fashion_mnist()) GTEST_SKIP() << "no Fashion-MNIST in " << kFashionMnistDir;
  const char* source = std::getenv("TESSEL_SOURCE_DIR");
  ASSERT_NE(source, nullptr) << "ctest sets TESSEL_SOURCE_DIR";
  double accuracy[2] = {0, 0};
  int i = 0;
  for (const char* precision : {"fp32", "bf16"}) {
    TrainConfig config =
        load_train_config(std::string(source) + "/examples/fashion_mlp.toml").value();
    config.precision = precision;
    config.checkpoint_path = "";
    config.metrics_path = "";
    auto trainer = Trainer::create(config, quiet()).value();
    RunSummary run = trainer->run().value();
    accuracy[i++] = run.final_eval.accuracy;
    std::printf("fashion_mlp %s: test accuracy %.2f%% after %lld steps (%.1f s)\n", precision,
                100 * run.final_eval.accuracy, static_cast<long long>(run.last_step),
                run.seconds);
  }
  EXPECT_GT(accuracy[0], 0.85);
  EXPECT_NEAR(accuracy[1], accuracy[0], 0.003);
}

}  // namespace
}  // namespace tessel::train
