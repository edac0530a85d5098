// Training checkpoints at the library level: a model, its optimizer, the step and the loss
// scaler saved in one call and restored into freshly built ones; the keys in the file are the
// documented ones; another model's file is refused with the keys that differ.
#include "io/training_checkpoint.h"

#include <gtest/gtest.h>

#include "autograd/functional.h"
#include "data/test_files.h"
#include "nn/layers.h"

namespace tessel {
namespace {

using testing::TempDir;

// A Linear(3, 2) with its parameters, an AdamW that took `steps` steps on sum(lin(x)).
struct TrainedLinear {
  nn::Linear model{3, 2};
  nn::FlatParameters params;
  std::unique_ptr<optim::AdamW> optimizer;

  TrainedLinear(uint64_t seed, int steps) {
    Pcg32 rng(seed);
    params = nn::FlatParameters::create(model, cpu_device(), rng).value();
    optimizer = optim::AdamW::create(params, {.lr = 0.1}).value();
    autograd::Variable x(Tensor::from_vector<float>({1, -2, 0.5f}, {1, 3}).value());
    for (int i = 0; i < steps; ++i) {
      EXPECT_TRUE(optimizer->zero_grad().ok());
      EXPECT_TRUE(autograd::sum(model(x).value()).value().backward().ok());
      EXPECT_TRUE(optimizer->step().ok());
    }
  }
};

std::map<std::string, std::vector<float>> host_values(const std::map<std::string, Tensor>& m) {
  std::map<std::string, std::vector<float>> out;
  for (const auto& [name, t] : m)
    out[name] = t.to_vector<float>().value();
  return out;
}

TEST(TrainingCheckpoint, OneCallSavesAndRestoresModelOptimizerStepAndScaler) {
  TempDir dir;
  TrainedLinear saved(/*seed=*/1, /*steps=*/3);
  optim::GradScaler scaler;
  scaler.update(/*found_inf=*/true);  // 2^15 now
  ASSERT_TRUE(save_training_checkpoint(dir.file("ckpt.safetensors"), saved.model, *saved.optimizer,
                                       /*step=*/7, {{"data.train", "epoch 2"}}, &scaler)
                  .ok());

  // The file's own keys, as io/checkpoint.h and docs/DESIGN.md name them.
  SafetensorsFile file = load_safetensors(dir.file("ckpt.safetensors")).value();
  std::vector<std::string> names;
  for (const auto& [name, t] : file.tensors)
    names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{
                       "bias", "optimizer.bias.exp_avg", "optimizer.bias.exp_avg_sq",
                       "optimizer.weight.exp_avg", "optimizer.weight.exp_avg_sq", "weight"}));
  EXPECT_EQ(file.metadata.at("step"), "7");
  EXPECT_EQ(file.metadata.at("optimizer.step_count"), "3");
  EXPECT_EQ(file.metadata.at("data.train"), "epoch 2");
  EXPECT_TRUE(file.metadata.contains("grad_scaler.scale"));

  TrainedLinear restored(/*seed=*/2, /*steps=*/0);
  optim::GradScaler restored_scaler;
  Expected<TrainingState> state = load_training_checkpoint(
      dir.file("ckpt.safetensors"), restored.model, *restored.optimizer, &restored_scaler);
  ASSERT_TRUE(state.ok()) << state.status().to_string();
  EXPECT_EQ(state->step, 7);
  EXPECT_EQ(state->metadata, (StringMap{{"data.train", "epoch 2"}}));
  EXPECT_EQ(restored.optimizer->step_count(), 3);
  EXPECT_EQ(restored_scaler.scale(), 32768.0);
  EXPECT_EQ(host_values(restored.model.state_dict()), host_values(saved.model.state_dict()));
  EXPECT_EQ(host_values(restored.optimizer->state_dict().tensors),
            host_values(saved.optimizer->state_dict().tensors));
}

TEST(TrainingCheckpoint, AnotherModelsFileIsRefusedWithTheKeysThatDiffer) {
  TempDir dir;
  TrainedLinear saved(1, 1);
  ASSERT_TRUE(
      save_training_checkpoint(dir.file("a.safetensors"), saved.model, *saved.optimizer, 1).ok());
  nn::Linear other(3, 2, /*bias=*/false);
  Pcg32 rng(3);
  nn::FlatParameters params = nn::FlatParameters::create(other, cpu_device(), rng).value();
  auto optimizer = optim::AdamW::create(params, {}).value();
  Expected<TrainingState> state =
      load_training_checkpoint(dir.file("a.safetensors"), other, *optimizer);
  ASSERT_FALSE(state.ok());
  EXPECT_NE(state.status().message().find("Unexpected key(s) in state_dict: \"bias\"."),
            std::string::npos)
      << state.status().message();
}

TEST(TrainingCheckpoint, TheFormatsOwnMetadataKeysAreRefused) {
  TempDir dir;
  TrainedLinear saved(1, 0);
  Status s = save_training_checkpoint(dir.file("b.safetensors"), saved.model, *saved.optimizer, 0,
                                      {{"optimizer.step_count", "5"}});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("metadata key 'optimizer.step_count' is the checkpoint's own"),
            std::string::npos)
      << s.message();
}

}  // namespace
}  // namespace tessel
