// The trainer with a [distributed] table, ranks as threads of this process (shm): 2 ranks of
// B rows each, or with 2 micro-steps of B/2 rows (gradient accumulation), train exactly as one
// process with 2 B rows does, because every rank reads the same global batches and keeps its
// own rows. Reference: the single-process trainer, which has no data-parallel code in its path.
// Tolerance: 2e-5 on the losses of 10 AdamW steps (sums of halves vs one sum of the batch).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "train/testing/trainer_check.h"
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

// The losses of each rank's run(stop_at), after resume(resume_from) when that is not empty.
std::vector<std::vector<double>> run_ranks(int n, const TrainConfig& c, int64_t stop_at = -1,
                                           const std::string& resume_from = "") {
  auto groups = dist::ProcessGroup::in_process(n).value();
  std::vector<std::vector<double>> losses(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      auto trainer =
          Trainer::create(c, {.progress = nullptr, .process_group = groups[size_t(r)].get()});
      ASSERT_TRUE(trainer.ok()) << trainer.status().to_string();
      if (!resume_from.empty()) {
        Status s = (*trainer)->resume(resume_from);
        ASSERT_TRUE(s.ok()) << s.to_string();
      }
      auto summary = (*trainer)->run(stop_at);
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
        2, config(8, clip,
                  fmt::format("[distributed]\nzero_stage = {}\nbucket_cap_mb = 0.01\n", stage)));
    expect_same(losses[0], want, fmt::format("stage {} rank 0", stage));
    expect_same(losses[1], want, fmt::format("stage {} rank 1", stage));
  }
}

// ZeRO 1/2/3 checkpoints: the ranks gather the sharded parameters (stage 3) and optimizer state
// into the file a single-process run writes, and resuming scatters it back. A run cut after 5 steps
// and resumed continues the uninterrupted run's losses, on 2 ranks and in one process alike.
TEST(TrainerDistributed, AZeroCheckpointResumesOnRanksAndInOneProcess) {
  for (int stage : {1, 2, 3}) {
    const std::string folder =
        check::temp_folder("TrainerDistributed", fmt::format("zero{}", stage));
    const std::string path = folder + "/checkpoint.safetensors";
    const std::string dist =
        fmt::format("[distributed]\nzero_stage = {}\nbucket_cap_mb = 0.01\n", stage);
    const std::string save = fmt::format("checkpoint_path = \"{}\"", path);
    const std::string what = fmt::format("ZeRO-{}", stage);
    const std::vector<double> whole = run_ranks(2, config(8, "", dist))[0];
    ASSERT_EQ(whole.size(), 10u);
    const std::vector<double> want_tail(whole.begin() + 5, whole.end());

    // Saving mid-run (steps 2 and 4) must leave the shards as they were.
    auto head = run_ranks(2, config(8, save + "\ncheckpoint_interval = 2", dist), /*stop_at=*/5);
    expect_same(head[0], std::vector<double>(whole.begin(), whole.begin() + 5), what + " head");

    auto single = Trainer::create(config(16, "", ""), {.progress = nullptr}).value();
    Status resumed = single->resume(path);
    ASSERT_TRUE(resumed.ok()) << resumed.to_string();
    expect_same(single->run().value().losses, want_tail, what + " resumed in one process");

    auto tail = run_ranks(2, config(8, save, dist), -1, path);
    expect_same(tail[0], want_tail, what + " resumed, rank 0");
    expect_same(tail[1], want_tail, what + " resumed, rank 1");
    std::filesystem::remove_all(folder);
  }
}

// Ranks started with different batch sizes (or models) would train side by side with collectives
// of the same sizes; the trainer compares the settings they must share when it is built and
// every rank fails at once, naming the setting and each rank's value.
TEST(TrainerDistributed, RanksThatDifferInBatchSizeOrModelFailAtStartNamingTheSetting) {
  const std::string dist = "[distributed]\n";
  TrainConfig wide = config(8, "", dist);
  wide.model = Config::parse("name = \"mlp\"\nhidden = [64]", "ddp.toml").value();
  const std::pair<TrainConfig, std::string> cases[] = {
      {config(16, "", dist),
       "ddp.toml: the ranks of this job differ in 'data.batch_size': rank 0: 8; rank 1: 16"},
      {wide,
       "ddp.toml: the ranks of this job differ in 'model': rank 0: mlp: 25450 parameters in 4 "
       "tensors"}};
  for (const auto& [other, want] : cases) {
    auto groups = dist::ProcessGroup::in_process(2).value();
    std::vector<std::string> errors(2);
    std::vector<std::thread> threads;
    for (int r = 0; r < 2; ++r)
      threads.emplace_back([&, r] {
        auto trainer =
            Trainer::create(r == 0 ? config(8, "", dist) : other,
                            {.progress = nullptr, .process_group = groups[size_t(r)].get()});
        errors[size_t(r)] = trainer.ok() ? "" : trainer.status().message();
      });
    for (auto& t : threads)
      t.join();
    for (int r = 0; r < 2; ++r)
      EXPECT_EQ(errors[size_t(r)].rfind(want, 0), 0u) << "rank " << r << ": " << errors[size_t(r)];
  }
}

TEST(TrainerDistributed, ConfigRejectsAnUnknownBackend) {
  auto bad = parse_train_config(
      Config::parse(
          "[model]\nname = \"mlp\"\n[data]\nname = \"fashion_mnist\"\n[train]\nsteps = 1\n"
          "[distributed]\nbackend = \"tcp\"\n",
          "b.toml")
          .value());
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("allowed: shm, mpi, nccl"), std::string::npos)
      << bad.status().to_string();
}

// [distributed] split = "uneven": the ranks measure their compute every step and the rebalancer
// moves their shares of the global batch (hysteresis 0: at any predicted gain, so the ranks'
// noise moves them here); whatever the shares, each rank's gradient and loss count by its rows,
// so the job still trains as one process with the whole batch.
TEST(TrainerDistributed, AnUnevenSplitTrainsAsOneProcessWhileTheSharesMove) {
  auto single = Trainer::create(config(16, "", ""), {.progress = nullptr}).value();
  const std::vector<double> want = single->run().value().losses;
  for (int stage : {0, 3}) {
    const TrainConfig c = config(
        8, "",
        fmt::format("[distributed]\nzero_stage = {}\nbucket_cap_mb = 0.01\nsplit = \"uneven\"\n"
                    "rebalance_every = 1\nrebalance_hysteresis = 0.0\n",
                    stage));
    auto groups = dist::ProcessGroup::in_process(2).value();
    std::vector<std::vector<double>> losses(2);
    std::vector<std::vector<int64_t>> shares(2);
    std::vector<std::thread> threads;
    for (int r = 0; r < 2; ++r)
      threads.emplace_back([&, r] {
        auto trainer =
            Trainer::create(c, {.progress = nullptr, .process_group = groups[size_t(r)].get()});
        ASSERT_TRUE(trainer.ok()) << trainer.status().to_string();
        auto summary = (*trainer)->run();
        ASSERT_TRUE(summary.ok()) << summary.status().to_string();
        losses[size_t(r)] = summary->losses;
        ASSERT_NE((*trainer)->rebalancer(), nullptr);
        shares[size_t(r)] = (*trainer)->rebalancer()->shares();
      });
    for (auto& t : threads)
      t.join();
    const std::string what =
        fmt::format("ZeRO-{}, shares at the end {}:{}", stage, shares[0].at(0), shares[0].at(1));
    expect_same(losses[0], want, what + ", rank 0");
    expect_same(losses[1], want, what + ", rank 1");
    EXPECT_EQ(shares[0], shares[1]) << "the ranks disagree on the shares";
    EXPECT_EQ(shares[0].at(0) + shares[0].at(1), 16);
    EXPECT_GE(std::min(shares[0].at(0), shares[0].at(1)), 1);
  }
}

// [distributed] sync_batchnorm = true: the CNN's BatchNorm2d layers normalise over the global
// batch, so an uneven split whose shares move trains as one process (without it each rank's
// rows have their own statistics and the losses differ from the first step on).
TEST(TrainerDistributed, SyncBatchNormUnderAnUnevenSplitTrainsAsOneProcess) {
  auto cnn = [](int64_t batch, const std::string& distributed) {
    const std::string text = fmt::format(R"(
seed = 5
[model]
name = "cnn"
[data]
name = "synthetic"
shape = [1, 28, 28]
samples = 64
eval_samples = 8
batch_size = {}
eval_batch_size = 8
[optimizer]
name = "adamw"
lr = 0.001
[train]
steps = 6
log_interval = 6
{}
)",
                                         batch, distributed);
    return parse_train_config(Config::parse(text, "bn.toml").value()).value();
  };
  auto single = Trainer::create(cnn(8, ""), {.progress = nullptr}).value();
  const std::vector<double> want = single->run().value().losses;
  const std::string uneven =
      "[distributed]\nbucket_cap_mb = 0.05\nsplit = \"uneven\"\nrebalance_every = 1\n"
      "rebalance_hysteresis = 0.0\n";
  auto synced = run_ranks(2, cnn(4, uneven + "sync_batchnorm = true\n"));
  expect_same(synced[0], want, "sync_batchnorm, rank 0");
  expect_same(synced[1], want, "sync_batchnorm, rank 1");
  auto per_rank = run_ranks(2, cnn(4, uneven));
  ASSERT_EQ(per_rank[0].size(), want.size());
  EXPECT_GT(std::abs(per_rank[0][0] - want[0]), 1e-4) << "per-rank statistics matched anyway";
}

// [distributed] devices: rank 1 computes on the OpenCL device (PoCL here: OpenCL on this CPU,
// kernels compiled by its LLVM), rank 0 on the CPU, and the uneven split re-balances from what
// each measures, the copy to and from the device included. DataParallel's parameters, collectives
// and optimizer stay in host memory, so the job still trains as one process with the whole batch.
TEST(TrainerDistributed, ARankOnOpenClBesideACpuRankTrainsAsOneProcess) {
  Expected<Device*> opencl = get_device("opencl:0");
  if (!opencl.ok()) GTEST_SKIP() << "no OpenCL device: " << opencl.status().to_string();
  auto single = Trainer::create(config(16, "", ""), {.progress = nullptr}).value();
  const std::vector<double> want = single->run().value().losses;
  for (int stage : {0, 2}) {
    const TrainConfig c = config(
        8, "",
        fmt::format("[distributed]\nzero_stage = {}\nbucket_cap_mb = 0.01\nsplit = \"uneven\"\n"
                    "rebalance_every = 1\ndevices = [\"cpu\", \"opencl:0\"]\n",
                    stage));
    auto groups = dist::ProcessGroup::in_process(2).value();
    std::vector<std::vector<double>> losses(2);
    std::vector<std::string> devices(2);
    std::vector<int64_t> shares;
    std::vector<std::thread> threads;
    for (int r = 0; r < 2; ++r)
      threads.emplace_back([&, r] {
        auto trainer =
            Trainer::create(c, {.progress = nullptr, .process_group = groups[size_t(r)].get()});
        ASSERT_TRUE(trainer.ok()) << trainer.status().to_string();
        devices[size_t(r)] = (*trainer)->device()->id();
        auto summary = (*trainer)->run();
        ASSERT_TRUE(summary.ok()) << summary.status().to_string();
        losses[size_t(r)] = summary->losses;
        if (r == 0) shares = (*trainer)->rebalancer()->shares();
      });
    for (auto& t : threads)
      t.join();
    EXPECT_EQ(devices[0], "cpu");
    EXPECT_EQ(devices[1], (*opencl)->id());
    ASSERT_EQ(shares.size(), 2u);
    const std::string what =
        fmt::format("ZeRO-{}, shares at the end cpu {} : opencl {}", stage, shares[0], shares[1]);
    std::printf("%s\n", what.c_str());  // which share the device got, for the reader
    expect_same(losses[0], want, what + ", rank 0");
    expect_same(losses[1], want, what + ", rank 1");
  }
}

TEST(TrainerDistributed, PerRankDevicesAreCheckedAgainstTheJob) {
  const std::string base =
      "[model]\nname = \"mlp\"\n[data]\nname = \"fashion_mnist\"\n[train]\nsteps = 1\n"
      "[distributed]\ndevices = [\"cpu\", \"cpu\", \"cpu\"]\n";
  auto zero3 = parse_train_config(Config::parse(base + "zero_stage = 3\n", "d.toml").value());
  ASSERT_FALSE(zero3.ok());
  EXPECT_NE(zero3.status().message().find("works with zero_stage 0, 1 or 2, not 3"),
            std::string::npos)
      << zero3.status().to_string();
  auto twice = parse_train_config(Config::parse("device = \"cpu\"\n" + base, "d.toml").value());
  ASSERT_FALSE(twice.ok());
  EXPECT_NE(twice.status().message().find("remove 'device' = 'cpu'"), std::string::npos)
      << twice.status().to_string();
  // Three devices for a job of two ranks.
  const TrainConfig c = config(8, "", "[distributed]\ndevices = [\"cpu\", \"cpu\", \"cpu\"]\n");
  auto groups = dist::ProcessGroup::in_process(2).value();
  std::vector<std::string> errors(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      auto trainer =
          Trainer::create(c, {.progress = nullptr, .process_group = groups[size_t(r)].get()});
      if (!trainer.ok()) errors[size_t(r)] = trainer.status().to_string();
    });
  for (auto& t : threads)
    t.join();
  for (const std::string& e : errors)
    EXPECT_NE(e.find("key 'distributed.devices' lists 3 devices for 2 ranks"), std::string::npos)
        << e;
}

TEST(TrainerDistributed, ConfigErrorsOfTheSplitNameTheKey) {
  const std::string base =
      "[model]\nname = \"mlp\"\n[data]\nname = \"fashion_mnist\"\n[train]\nsteps = 1\n"
      "[distributed]\n";
  const std::pair<std::string, std::string> cases[] = {
      {"split = \"diagonal\"",
       "key 'distributed.split': 'diagonal' is not allowed; allowed: even, uneven"},
      {"rebalance_every = 5", "key 'distributed.rebalance_every' needs split = 'uneven'"},
      {"split = \"uneven\"\nrebalance_every = 0", "distributed.rebalance_every"},
      {"split = \"uneven\"\nrebalance_hysteresis = 1.5",
       "key 'distributed.rebalance_hysteresis': must be below 1, got 1.5"}};
  for (const auto& [extra, want] : cases) {
    auto bad = parse_train_config(Config::parse(base + extra + "\n", "u.toml").value());
    ASSERT_FALSE(bad.ok()) << extra;
    EXPECT_NE(bad.status().message().find(want), std::string::npos) << bad.status().to_string();
  }
  auto good = parse_train_config(
      Config::parse(base + "split = \"uneven\"\nrebalance_every = 3\n", "u.toml").value());
  ASSERT_TRUE(good.ok()) << good.status().to_string();
  EXPECT_TRUE(good->distributed.uneven);
  EXPECT_EQ(good->distributed.rebalance_every, 3);
  EXPECT_DOUBLE_EQ(good->distributed.rebalance_hysteresis, 0.05);
}

}  // namespace
}  // namespace tessel::train
