// The trainer with [checkpoint] encrypt = true: a run cut short and resumed from its encrypted
// checkpoint computes the same losses as one never interrupted, in one process and under ZeRO on
// 2 ranks (threads); the checkpoint cannot be read without the key; a config that names no key,
// or two, is refused. Reference: the uninterrupted run (and, for ZeRO, the plain-checkpoint path
// already tested in trainer_distributed_test.cpp).
#include <gtest/gtest.h>
#include <stdlib.h>

#include <thread>

#include "io/checkpoint.h"
#include "support/atomic_file.h"
#include "train/testing/trainer_check.h"
#include "train/trainer.h"

namespace tessel::train {
namespace {

TrainConfig config(const std::string& folder, int64_t batch, const std::string& key_line,
                   const std::string& distributed) {
  std::string text = fmt::format(R"(
seed = 7
[model]
name = "mlp"
hidden = [16]
[data]
name = "fashion_mnist"
batch_size = {}
eval_batch_size = 5000
[optimizer]
name = "adamw"
lr = 0.01
[train]
steps = 8
log_interval = 4
checkpoint_path = "{}/checkpoint.safetensors"
[checkpoint]
encrypt = true
{}
{}
)",
                                 batch, folder, key_line, distributed);
  return parse_train_config(Config::parse(text, "encrypted.toml").value()).value();
}

void expect_same(const std::vector<double>& got, const std::vector<double>& want,
                 const std::string& what, double tolerance) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t s = 0; s < got.size(); ++s)
    EXPECT_NEAR(got[s], want[s], tolerance) << what << ", step " << s;
}

TEST(TrainerEncrypted, AResumedRunContinuesTheSameLosses) {
  const std::string folder = check::temp_folder("TrainerEncrypted", "single");
  const secure::SecretKey key = secure::SecretKey::generate();
  ASSERT_TRUE(key.save(folder + "/run.key").ok());
  const std::string key_line = fmt::format("key_file = \"{}/run.key\"", folder);
  const std::vector<double> whole = Trainer::create(config(folder, 8, key_line, ""), check::quiet())
                                        .value()
                                        ->run()
                                        .value()
                                        .losses;
  auto head = Trainer::create(config(folder, 8, key_line, ""), check::quiet()).value();
  ASSERT_TRUE(head->run(/*stop_at=*/5).ok());
  const std::string path = folder + "/checkpoint.safetensors";
  Expected<Checkpoint> no_key = load_checkpoint(path);
  ASSERT_FALSE(no_key.ok());

  // The key from an environment variable this time: the same key, another source.
  ::setenv("TESSEL_TEST_CHECKPOINT_KEY", read_file(folder + "/run.key").value().c_str(), 1);
  auto tail = Trainer::create(config(folder, 8, "key_env = \"TESSEL_TEST_CHECKPOINT_KEY\"", ""),
                              check::quiet())
                  .value();
  Status s = tail->resume(path);
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_EQ(tail->step(), 5);
  expect_same(tail->run().value().losses, std::vector<double>(whole.begin() + 5, whole.end()),
              "resumed", 1e-6);
  ::unsetenv("TESSEL_TEST_CHECKPOINT_KEY");

  // Another key: the trainer refuses the checkpoint and says why.
  ASSERT_TRUE(secure::SecretKey::generate().save(folder + "/other.key").ok());
  auto other =
      Trainer::create(config(folder, 8, fmt::format("key_file = \"{}/other.key\"", folder), ""),
                      check::quiet())
          .value();
  s = other->resume(path);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("wrong key"), std::string::npos) << s.message();
  std::filesystem::remove_all(folder);
}

TEST(TrainerEncrypted, AZeroCheckpointResumesOnTwoRanks) {
  const std::string folder = check::temp_folder("TrainerEncrypted", "zero");
  ASSERT_TRUE(secure::SecretKey::generate().save(folder + "/run.key").ok());
  const std::string key_line = fmt::format("key_file = \"{}/run.key\"", folder);
  const std::string dist = "[distributed]\nzero_stage = 3\nbucket_cap_mb = 0.01\n";
  auto run_ranks = [&](int64_t stop_at, bool resume) {
    auto groups = dist::ProcessGroup::in_process(2).value();
    std::vector<std::vector<double>> losses(2);
    std::vector<std::thread> threads;
    for (int r = 0; r < 2; ++r)
      threads.emplace_back([&, r] {
        TrainerOptions options = check::quiet();
        options.process_group = groups[size_t(r)].get();
        auto trainer = Trainer::create(config(folder, 8, key_line, dist), options);
        ASSERT_TRUE(trainer.ok()) << trainer.status().to_string();
        if (resume) {
          Status s = (*trainer)->resume(folder + "/checkpoint.safetensors");
          ASSERT_TRUE(s.ok()) << s.to_string();
        }
        auto summary = (*trainer)->run(stop_at);
        ASSERT_TRUE(summary.ok()) << summary.status().to_string();
        losses[size_t(r)] = summary->losses;
      });
    for (auto& t : threads)
      t.join();
    return losses;
  };
  const std::vector<double> whole = run_ranks(-1, false)[0];
  ASSERT_EQ(whole.size(), 8u);
  run_ranks(5, false);
  auto tail = run_ranks(-1, true);
  const std::vector<double> want(whole.begin() + 5, whole.end());
  expect_same(tail[0], want, "ZeRO-3 resumed, rank 0", 2e-5);
  expect_same(tail[1], want, "ZeRO-3 resumed, rank 1", 2e-5);
  std::filesystem::remove_all(folder);
}

TEST(TrainerEncrypted, ConfigNeedsExactlyOneKeySource) {
  for (const char* keys : {"", "key_file = \"a\"\nkey_env = \"B\""}) {
    const std::string text = fmt::format(
        "[model]\nname = \"mlp\"\n[data]\nname = \"fashion_mnist\"\n[train]\nsteps = 1\n"
        "[checkpoint]\nencrypt = true\n{}\n",
        keys);
    Expected<TrainConfig> c = parse_train_config(Config::parse(text, "bad.toml").value());
    ASSERT_FALSE(c.ok());
    EXPECT_NE(c.status().message().find("exactly one of 'checkpoint.key_file'"), std::string::npos)
        << c.status().message();
  }
  Expected<TrainConfig> c = parse_train_config(
      Config::parse(
          "[model]\nname = \"mlp\"\n[data]\nname = \"fashion_mnist\"\n[train]\nsteps = 1\n"
          "[checkpoint]\nkey = \"00\"\n",
          "bad.toml")
          .value());
  ASSERT_FALSE(c.ok());  // a key in the config itself is not a thing
  EXPECT_NE(c.status().message().find("checkpoint.key"), std::string::npos) << c.status().message();
}

}  // namespace
}  // namespace tessel::train
