// The trainer on Fashion-MNIST with a tiny MLP: a run cut short and resumed from its checkpoint
// computes the same losses as one never interrupted; metrics are JSON lines; the progress line
// redraws in place only when asked to; training lowers the loss.
#include "train/trainer.h"

#include "io/checkpoint.h"
#include "train/progress.h"
#include "train/testing/trainer_check.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

namespace tessel::train {
namespace {

std::string temp_folder(const std::string& name) {
  return check::temp_folder("trainer_test", name);
}

TrainConfig tiny_config(const std::string& folder, int64_t steps) {
  std::string text = fmt::format(R"(
seed = 3
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
[schedule]
name = "warmup_cosine"
warmup_steps = 2
[train]
steps = {}
clip_grad_norm = 0.5
log_interval = 2
checkpoint_path = "{}/checkpoint.safetensors"
metrics_path = "{}/metrics.jsonl"
)",
                                 steps, folder, folder);
  return parse_train_config(Config::parse(text, "tiny.toml").value()).value();
}

TEST(Trainer, AResumedRunContinuesTheSameLossSequence) {
  const std::string whole = temp_folder("whole"), parts = temp_folder("parts");
  auto uninterrupted = Trainer::create(tiny_config(whole, 8), {.progress = nullptr}).value();
  RunSummary all = uninterrupted->run().value();
  ASSERT_EQ(all.losses.size(), 8u);

  // The same run, stopped after 5 steps (as a preempted job) ...
  auto first = Trainer::create(tiny_config(parts, 8), {.progress = nullptr}).value();
  RunSummary head = first->run(/*stop_at=*/5).value();
  ASSERT_EQ(head.losses.size(), 5u);
  for (size_t i = 0; i < 5; ++i)
    EXPECT_EQ(head.losses[i], all.losses[i]) << i;
  // ... then restarted in a new trainer from its checkpoint.
  auto second = Trainer::create(tiny_config(parts, 8), {.progress = nullptr}).value();
  ASSERT_TRUE(second->resume(parts + "/checkpoint.safetensors").ok());
  EXPECT_EQ(second->step(), 5);
  RunSummary tail = second->run().value();
  EXPECT_EQ(tail.first_step, 5);
  ASSERT_EQ(tail.losses.size(), 3u);
  for (size_t i = 0; i < 3; ++i)
    EXPECT_NEAR(tail.losses[i], all.losses[5 + i], 1e-6) << "step " << 5 + i;
  EXPECT_NEAR(tail.final_eval.accuracy, all.final_eval.accuracy, 1e-9);

  // Metrics: loss lines every 2 steps (and at the stop), an evaluation at each end; the resumed
  // run appended to the first one's file.
  std::ifstream in(parts + "/metrics.jsonl");
  std::vector<int64_t> loss_steps, eval_steps;
  for (std::string line; std::getline(in, line);) {
    nlohmann::json j = nlohmann::json::parse(line);
    (j.contains("loss") ? loss_steps : eval_steps).push_back(j["step"].get<int64_t>());
  }
  EXPECT_EQ(loss_steps, (std::vector<int64_t>{2, 4, 5, 6, 8}));
  EXPECT_EQ(eval_steps, (std::vector<int64_t>{5, 8}));
  std::filesystem::remove_all(whole);
  std::filesystem::remove_all(parts);
}

TEST(Trainer, ResumingAnotherModelsCheckpointNamesTheMissingTensors) {
  const std::string folder = temp_folder("other");
  auto mlp = Trainer::create(tiny_config(folder, 3), {.progress = nullptr}).value();
  ASSERT_TRUE(mlp->save_checkpoint(folder + "/mlp.safetensors").ok());
  TrainConfig cnn_config = tiny_config(folder, 3);
  cnn_config.model = Config::parse("name = \"cnn\"", "tiny.toml").value();
  auto cnn = Trainer::create(cnn_config, {.progress = nullptr}).value();
  Status s = cnn->resume(folder + "/mlp.safetensors");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("Missing key(s) in state_dict: \"conv1.weight\""), std::string::npos)
      << s.message();
  std::filesystem::remove_all(folder);
}

// A gradient turned NaN at step 4 stops the run there, naming the step and the tensor; the
// checkpoint of step 2 is left as the last good one (not overwritten with NaN weights).
TEST(Trainer, ANonFiniteGradientStopsTheRunAndKeepsTheLastGoodCheckpoint) {
  const std::string folder = temp_folder("nan");
  TrainConfig c = tiny_config(folder, 8);
  c.checkpoint_interval = 2;
  auto trainer = Trainer::create(c, {.progress = nullptr}).value();
  std::string poisoned;
  trainer->set_after_backward([&](const nn::FlatParameters& params, int64_t step) -> Status {
    if (step != 3) return ok_status();
    const nn::FlatParameters::Entry& e = params.entries().back();
    poisoned = e.name;
    Tensor g = params.groups()[e.group].grads;
    TESSEL_ASSIGN_OR_RETURN(std::vector<float> v, g.to_vector<float>());
    v[size_t(e.offset)] = std::nanf("");
    TESSEL_ASSIGN_OR_RETURN(Tensor nan, Tensor::from_vector<float>(v, g.shape()));
    return g.copy_from(nan);
  });
  Expected<RunSummary> run = trainer->run();
  ASSERT_FALSE(run.ok());
  EXPECT_EQ(run.status().message(),
            fmt::format("tiny.toml: step 4: the gradient of '{}' is not finite; stopping the run "
                        "(the last checkpoint written, if any, is kept: {}/checkpoint.safetensors)",
                        poisoned, folder));
  Expected<Checkpoint> kept = load_checkpoint(folder + "/checkpoint.safetensors");
  ASSERT_TRUE(kept.ok()) << kept.status().to_string();
  EXPECT_EQ(*kept->get_int("step"), 2);
  std::filesystem::remove_all(folder);
}

// Metadata a resumed run would trust is range-checked: a step outside the run, an optimizer step
// count that is negative or ahead of the step.
TEST(Trainer, ResumeRefusesMetadataOutOfRange) {
  const std::string folder = temp_folder("meta");
  auto trainer = Trainer::create(tiny_config(folder, 3), {.progress = nullptr}).value();
  ASSERT_TRUE(trainer->run().ok());
  const std::string path = folder + "/checkpoint.safetensors";
  const std::pair<const char*, const char*> bad[] = {{"step", "-50"},
                                                     {"step", "9223372036854775807"},
                                                     {"step", "4"},
                                                     {"optimizer.step_count", "-7"},
                                                     {"optimizer.step_count", "4"}};
  for (auto [key, value] : bad) {
    Checkpoint ckpt = load_checkpoint(path).value();
    ckpt.metadata[key] = value;
    const std::string edited = folder + "/edited.safetensors";
    ASSERT_TRUE(save_checkpoint(edited, ckpt).ok());
    auto fresh = Trainer::create(tiny_config(folder, 3), {.progress = nullptr}).value();
    Status s = fresh->resume(edited);
    ASSERT_FALSE(s.ok()) << key << " = " << value;
    EXPECT_NE(
        s.message().find(fmt::format("metadata '{}' is {}, expected a value in [0, ", key, value)),
        std::string::npos)
        << s.message();
  }
  std::filesystem::remove_all(folder);
}

TEST(Trainer, AnUnwritableCheckpointPathOrAnEmptyRunFailsAtStart) {
  const std::string folder = temp_folder("paths");
  std::ofstream(folder + "/file") << "not a folder";
  TrainConfig c = tiny_config(folder, 3);
  c.checkpoint_path = folder + "/file/checkpoint.safetensors";
  Expected<std::unique_ptr<Trainer>> t = Trainer::create(c, {.progress = nullptr});
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().message().rfind(
                fmt::format("tiny.toml: key 'train.checkpoint_path' = '{}'", c.checkpoint_path), 0),
            0u)
      << t.status().message();
  // One epoch of Fashion-MNIST is 7,500 batches of 8: 10,000 micro-batches per step take no step.
  c = tiny_config(folder, 3);
  c.steps = 0;
  c.epochs = 1;
  c.grad_accum_steps = 10000;
  t = Trainer::create(c, {.progress = nullptr});
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(
      t.status().message(),
      "tiny.toml: key 'train.grad_accum_steps': 10000 micro-batches per step, but the run has "
      "7500 batches (1 epochs of 7500): it would take no step");
  std::filesystem::remove_all(folder);
}

TEST(Progress, RedrawsInPlaceOnATerminalAndPrintsLinesOtherwise) {
  char* text = nullptr;
  size_t size = 0;
  std::FILE* out = open_memstream(&text, &size);
  {
    Progress plain(out, 100, 0, /*interactive=*/0);
    plain.update(10, 1.5, 1e-3, 640.0);
    plain.message("eval");
    plain.finish();
  }
  std::fflush(out);
  std::string got(text, size);
  EXPECT_EQ(got.find('\r'), std::string::npos);
  EXPECT_EQ(std::count(got.begin(), got.end(), '\n'), 2);
  EXPECT_NE(got.find("step  10/100  10.0%  loss 1.5000  lr 1.00e-03  640 samples/s"),
            std::string::npos)
      << got;
  std::fclose(out);
  free(text);

  out = open_memstream(&text, &size);
  {
    Progress live(out, 100, 0, /*interactive=*/1);
    live.update(10, 1.5, 1e-3, 640.0);
    live.update(20, 1.2, 1e-3, 650.0);
    live.finish();
  }
  std::fflush(out);
  got.assign(text, size);
  EXPECT_EQ(std::count(got.begin(), got.end(), '\r'), 2);
  EXPECT_EQ(std::count(got.begin(), got.end(), '\n'), 1);
  EXPECT_NE(got.find("\x1b[K"), std::string::npos);
  std::fclose(out);
  free(text);
  EXPECT_EQ(Progress::format_duration(3723.4), "1:02:03");
  EXPECT_EQ(Progress::format_duration(65), "1:05");
}

}  // namespace
}  // namespace tessel::train
