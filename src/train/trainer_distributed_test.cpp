// The trainer with a [distributed] table, ranks as threads of this process (shm): 2 ranks of
// B rows each, or with 2 micro-steps of B/2 rows (gradient accumulation), train exactly as one
// process with 2 B rows does, because every rank reads the same global batches and keeps its
// own rows. Reference: the single-process trainer, which has no data-parallel code in its path.
// Tolerance: 2e-5 on the losses of 10 AdamW steps (sums of halves vs one sum of the batch).
#include <gtest/gtest.h>

#include <cmath>
#include <thread>

#include "train/trainer.h"

namespace tessel::train {
namespace {

TrainConfig config(int64_t batch, const std::string& extra_train, const std::string& distributed) {
  std::string text = fmt::format(R"(
seed = 5
[model]
name = "mlp"
hidden = [32]
[data]
name = "fashion_mnist"
batch_size = {}
eval_batch_size = 5000
[optimizer]
name = "adamw"
lr = 0.01
[train]
steps = 10
log_interval = 5
{}
{}
)",
                                 batch, extra_train, distributed);
  return parse_train_config(Config::parse(text, "ddp.toml").value()).value();
}

std::vector<std::vector<double>> run_ranks(int n, const TrainConfig& c) {
  auto groups = dist::ProcessGroup::in_process(n).value();
  std::vector<std::vector<double>> losses(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      auto trainer = Trainer::create(c, {.progress = nullptr, .process_group = groups[size_t(r)].get()});
      ASSERT_TRUE(trainer.ok()) << trainer.status().to_string();
      auto summary = (*trainer)->run();
      ASSERT_TRUE(summary.ok()) << summary.status().to_string();
      losses[size_t(r)] = summary->losses;
    });
  for (auto& t : threads)
    t.join();
  return losses;
}

void expect_same(const std::vector<double>& got, const std::vector<double>& want,
                 const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t s = 0; s < got.size(); ++s)
    EXPECT_NEAR(got[s], want[s], 2e-5) << what << ", step " << s;
}

TEST(TrainerDistributed, TwoRanksTrainAsOneProcessWithTheWholeBatch) {
  auto single = Trainer::create(config(16, "", ""), {.progress = nullptr}).value();
  const std::vector<double> want = single->run().value().losses;
  auto ddp = run_ranks(2, config(8, "", "[distributed]\nbucket_cap_mb = 0.01\n"));
  // Every rank reports the loss of the global batch.
  expect_same(ddp[0], want, "DDP rank 0");
  expect_same(ddp[1], want, "DDP rank 1");
  auto accumulated =
      run_ranks(2, config(4, "grad_accum_steps = 2", "[distributed]\nzero_stage = 2\n"));
  expect_same(accumulated[0], want, "ZeRO-2 with 2 micro-steps");
}

// Clipping by the global norm: DDP's ranks hold all the (averaged) gradients, ZeRO's ranks
// disjoint shards of them whose squares are summed across the ranks; every way must clip as one
// process with the whole batch does. The threshold is far below the gradients' norm, so every
// step clips (shown by the losses moving away from the unclipped run's).
TEST(TrainerDistributed, ClippingByTheGlobalNormEqualsOneProcessUnderEveryZeroStage) {
  const std::string clip = "clip_grad_norm = 0.05";
  const std::vector<double> unclipped =
      Trainer::create(config(16, "", ""), {.progress = nullptr}).value()->run().value().losses;
  const std::vector<double> want =
      Trainer::create(config(16, clip, ""), {.progress = nullptr}).value()->run().value().losses;
  ASSERT_EQ(want.size(), unclipped.size());
  EXPECT_GT(std::abs(want.back() - unclipped.back()), 1e-3) << "the threshold clipped nothing";
  for (int stage = 0; stage <= 3; ++stage) {
    auto losses = run_ranks(
        2, config(8, clip, fmt::format("[distributed]\nzero_stage = {}\nbucket_cap_mb = 0.01\n",
                                       stage)));
    expect_same(losses[0], want, fmt::format("stage {} rank 0", stage));
    expect_same(losses[1], want, fmt::format("stage {} rank 1", stage));
  }
}

TEST(TrainerDistributed, ConfigRejectsWhatShardedStateCannotDo) {
  std::string text = R"(
[model]
name = "mlp"
[data]
name = "fashion_mnist"
[train]
steps = 1
checkpoint_path = "x.safetensors"
[distributed]
zero_stage = 2
)";
  auto c = parse_train_config(Config::parse(text, "z.toml").value());
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("train.checkpoint_path"), std::string::npos)
      << c.status().to_string();
  auto bad = parse_train_config(
      Config::parse("[model]\nname = \"mlp\"\n[data]\nname = \"fashion_mnist\"\n[train]\nsteps = 1\n"
                    "[distributed]\nbackend = \"tcp\"\n",
                    "b.toml")
          .value());
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("allowed: shm, mpi, nccl"), std::string::npos)
      << bad.status().to_string();
}

}  // namespace
}  // namespace tessel::train
