// Data-parallel training against single-process training: N ranks (threads of this process on
// the shm backend) each training a small GPT on 1/N of a batch must compute the losses that one
// process computes on the whole batch with the plain optimizer (no DataParallel involved), for
// DDP and ZeRO 1, 2, 3, with and without gradient accumulation. Also: the ZeRO memory accounting
// against its closed form, that bucket all-reduces run while backward is still going (seen from
// inside backward: a bucket's collective finishes before the last gradient hook), and that a
// rank that fails (aborts, or its process is killed) turns into an error on the others instead
// of a hang.
//
// Tolerance: losses agree within 2e-5 absolute over 20 AdamW steps (the reference sums the
// batch's gradient in one pass; ranks sum halves and average them, so the roundings differ at
// the 1e-7 level and AdamW's normalisation keeps that small).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <functional>
#include <map>
#include <sstream>
#include <thread>

#include "dist/launcher.h"
#include "nn/conv_layers.h"
#include "nn/gpt.h"
#include "parallel/data_parallel.h"
#include "parallel/testing/tiny_gpt_job.h"

namespace tessel::parallel {
namespace {

using autograd::Variable;

using testing::batch;
using testing::make_adamw;
using testing::test_gpt;

constexpr int64_t kRowsPerRank = 2;
constexpr int kSteps = 20;
constexpr double kLossTolerance = 2e-5;

std::vector<double> reference_losses(int64_t rows) {
  return testing::one_process_losses(rows, kSteps).value();
}

struct RunOptions {
  int ranks = 2;
  DataParallelOptions dp;
  int accumulation = 1;  // micro-steps of kRowsPerRank rows per step and rank
  // Uneven data parallelism: the rows of each rank at a step (empty: kRowsPerRank each). The
  // global batch is cut rank-major; every rank's gradient is weighted by its share.
  std::function<std::vector<int64_t>(int step)> shares = nullptr;
};

// Every rank's losses per step (the mean over its micro-steps).
std::vector<std::vector<double>> run_ranks(const RunOptions& o) {
  auto groups = dist::ProcessGroup::in_process(o.ranks).value();
  std::vector<std::vector<double>> losses(size_t(o.ranks));
  std::vector<std::string> errors(size_t(o.ranks));
  std::vector<std::thread> threads;
  for (int r = 0; r < o.ranks; ++r)
    threads.emplace_back([&, r] {
      auto fail = [&](const Status& s) { errors[size_t(r)] = s.to_string(); };
      nn::GPT model(test_gpt());
      // Other ranks start from other weights: the broadcast from rank 0 must fix that.
      Pcg32 rng(7 + uint64_t(r), 1);
      auto params = nn::FlatParameters::create(model, cpu_device(), rng);
      if (!params.ok()) return fail(params.status());
      auto dp = DataParallel::create(*params, *groups[size_t(r)], make_adamw, o.dp);
      if (!dp.ok()) return fail(dp.status());
      for (int s = 0; s < kSteps; ++s) {
        int64_t micro_rows = kRowsPerRank, rank_first = int64_t(r) * o.accumulation * micro_rows;
        double weight = 1.0;  // of this rank's mean loss in the mean of the ranks' values
        if (o.shares) {
          const std::vector<int64_t> shares = o.shares(s);
          int64_t global = 0;
          rank_first = 0;
          for (int q = 0; q < o.ranks; ++q) {
            if (q < r) rank_first += shares[size_t(q)] * o.accumulation;
            global += shares[size_t(q)];
          }
          micro_rows = shares[size_t(r)];
          weight = double(micro_rows * o.ranks) / double(global);
          Status st = (*dp)->set_batch_share(micro_rows, global);
          if (!st.ok()) return fail(st);
        }
        double sum = 0;
        for (int m = 0; m < o.accumulation; ++m) {
          (*dp)->set_sync(m + 1 == o.accumulation);
          // The global batch is cut rank-major, then micro-step within a rank's rows.
          const int64_t first = rank_first + m * micro_rows;
          if (micro_rows == 0) {  // an excluded rank still joins the collectives
            Status st = (*dp)->pass_without_rows();
            if (!st.ok()) return fail(st);
            continue;
          }
          auto [x, y] = batch(s, first, micro_rows);
          auto logits = model.forward(Variable(x));
          if (!logits.ok()) return fail(logits.status());
          auto loss = model.loss(*logits, Variable(y));
          if (!loss.ok()) return fail(loss.status());
          Tensor seed = Tensor::full(loss->shape(), 1.0 / o.accumulation, DType::kF32).value();
          Status st = loss->backward(seed);
          if (st.ok()) st = (*dp)->finish_backward();
          if (!st.ok()) return fail(st);
          sum += loss->data().to_vector<float>().value().at(0);
        }
        Status st = (*dp)->optimizer().step();
        if (st.ok()) st = params->zero_grad();
        if (!st.ok()) return fail(st);
        losses[size_t(r)].push_back(sum / o.accumulation * weight);
      }
    });
  for (auto& t : threads)
    t.join();
  for (int r = 0; r < o.ranks; ++r)
    EXPECT_EQ(errors[size_t(r)], "") << "rank " << r;
  return losses;
}

// The loss of the whole batch: the mean of the ranks' parts (uneven ones weighted in run_ranks).
std::vector<double> global_losses(const std::vector<std::vector<double>>& per_rank) {
  std::vector<double> out(per_rank.at(0).size(), 0.0);
  for (const auto& rank : per_rank)
    for (size_t s = 0; s < out.size() && s < rank.size(); ++s)
      out[s] += rank[s] / double(per_rank.size());
  return out;
}

void expect_same_losses(const std::vector<double>& got, const std::vector<double>& want,
                        const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t s = 0; s < got.size(); ++s)
    EXPECT_NEAR(got[s], want[s], kLossTolerance) << what << ", step " << s;
  // The run must actually learn, or equal losses would prove little.
  EXPECT_LT(want.back(), want.front() - 0.05) << what;
}

DataParallelOptions small_buckets(int stage, bool overlap = true) {
  // A few KiB per bucket, so the tiny model is cut into several buckets.
  return {.zero_stage = stage,
          .bucket_cap_bytes = 8 << 10,
          .first_bucket_bytes = 2 << 10,
          .overlap = overlap};
}

TEST(DataParallel, TwoRanksEqualOneProcessWithTwiceTheBatch) {
  const auto want = reference_losses(2 * kRowsPerRank);
  expect_same_losses(global_losses(run_ranks({.ranks = 2, .dp = small_buckets(0)})), want,
                     "DDP, 2 ranks");
}

TEST(DataParallel, FourRanksEqualOneProcessWithFourTimesTheBatch) {
  const auto want = reference_losses(4 * kRowsPerRank);
  expect_same_losses(global_losses(run_ranks({.ranks = 4, .dp = small_buckets(0)})), want,
                     "DDP, 4 ranks");
}

TEST(DataParallel, OverlapOffComputesTheSame) {
  const auto want = reference_losses(2 * kRowsPerRank);
  expect_same_losses(global_losses(run_ranks({.ranks = 2, .dp = small_buckets(0, false)})), want,
                     "DDP without overlap");
}

TEST(DataParallel, ZeroStagesEqualDdp) {
  const auto ddp = global_losses(run_ranks({.ranks = 2, .dp = small_buckets(0)}));
  for (int stage = 1; stage <= 3; ++stage)
    expect_same_losses(global_losses(run_ranks({.ranks = 2, .dp = small_buckets(stage)})), ddp,
                       "ZeRO-" + std::to_string(stage) + ", 2 ranks");
}

TEST(DataParallel, ZeroThreeOnFourRanksEqualsOneProcess) {
  const auto want = reference_losses(4 * kRowsPerRank);
  expect_same_losses(global_losses(run_ranks({.ranks = 4, .dp = small_buckets(3)})), want,
                     "ZeRO-3, 4 ranks");
}

TEST(DataParallel, GradientAccumulationEqualsTheWholeBatch) {
  // 2 ranks x 2 micro-steps of B rows = one process with 4 B rows. DDP does not communicate on
  // the inner step; ZeRO-2 reduces it into the shard.
  const auto want = reference_losses(4 * kRowsPerRank);
  for (int stage : {0, 2})
    expect_same_losses(
        global_losses(run_ranks({.ranks = 2, .dp = small_buckets(stage), .accumulation = 2})), want,
        "accumulation, ZeRO stage " + std::to_string(stage));
}

TEST(DataParallel, MemoryFollowsTheZeroAccounting) {
  // Closed form per rank, with L the flat length (padded) in elements and n ranks, f32 AdamW:
  // DDP 4L params + 4L grads + 8L state; ZeRO-1 state / n and a gradient shard 4L/n beside the
  // full gradients; ZeRO-2 gradients 4L/n; ZeRO-3 parameters 4L/n.
  const int n = 2;
  for (int stage = 0; stage <= 3; ++stage) {
    auto groups = dist::ProcessGroup::in_process(n).value();
    std::vector<MemoryAccount> got(n);
    int64_t length = 0;
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r)
      threads.emplace_back([&, r] {
        nn::GPT model(test_gpt());
        Pcg32 rng(7, 1);
        auto params = nn::FlatParameters::create(model, cpu_device(), rng).value();
        if (r == 0) length = params.groups().at(0).values.numel();
        auto dp =
            DataParallel::create(params, *groups[size_t(r)], make_adamw, small_buckets(stage));
        ASSERT_TRUE(dp.ok()) << dp.status().to_string();
        got[size_t(r)] = (*dp)->memory();
        if (stage >= 2) {
          EXPECT_FALSE(params.groups()[0].grads.defined());
        }
        if (stage == 3) {
          EXPECT_FALSE(params.groups()[0].values.defined());
        }
      });
    for (auto& t : threads)
      t.join();
    const int64_t L = length;
    const int64_t want_params = stage == 3 ? 4 * L / n : 4 * L;
    const int64_t want_grads = stage == 0 ? 4 * L : stage == 1 ? 4 * L + 4 * L / n : 4 * L / n;
    const int64_t want_state = stage == 0 ? 8 * L : 8 * L / n;
    for (int r = 0; r < n; ++r) {
      EXPECT_EQ(got[size_t(r)].parameter_bytes, want_params) << "stage " << stage;
      EXPECT_EQ(got[size_t(r)].gradient_bytes, want_grads) << "stage " << stage;
      EXPECT_EQ(got[size_t(r)].optimizer_bytes, want_state) << "stage " << stage;
    }
  }
}

// Runs one step on 2 ranks with a hook around the gradient that arrives last (the token
// embedding, tied to the head, is the first parameter): inside it, backward is not over yet.
// Returns, for rank 0, whether bucket 0's all-reduce had finished by then (waiting up to 20 s for
// it, which it can only do if it started during backward), and the step's stats.
std::pair<bool, StepStats> observe_overlap(bool overlap) {
  auto groups = dist::ProcessGroup::in_process(2).value();
  std::atomic<bool> bucket0_done_in_backward[2] = {false, false};
  StepStats stats;
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      nn::GPT model(test_gpt());
      Pcg32 rng(7, 1);
      auto params = nn::FlatParameters::create(model, cpu_device(), rng).value();
      auto dp =
          DataParallel::create(params, *groups[size_t(r)], make_adamw, small_buckets(0, overlap))
              .value();
      ASSERT_GE(dp->num_buckets(), 3u);
      auto& leaf = *params.entries().at(0).parameter->variable.state();
      auto original = leaf.on_grad_ready;
      leaf.on_grad_ready = [&, r, original](autograd::VariableState& s) -> Status {
        if (overlap) {
          auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
          while (!dp->bucket_reduced(0) && std::chrono::steady_clock::now() < deadline)
            std::this_thread::yield();
        }
        bucket0_done_in_backward[r] = dp->bucket_reduced(0);
        return original(s);
      };
      auto [x, y] = batch(0, r * kRowsPerRank, kRowsPerRank);
      Variable loss = model.loss(model.forward(Variable(x)).value(), Variable(y)).value();
      ASSERT_TRUE(loss.backward().ok());
      ASSERT_TRUE(dp->finish_backward().ok());
      ASSERT_TRUE(dp->optimizer().step().ok());
      if (r == 0) stats = dp->last_stats();
    });
  for (auto& t : threads)
    t.join();
  return {bucket0_done_in_backward[0].load(), stats};
}

TEST(DataParallel, BucketsReduceWhileBackwardRuns) {
  auto [done_on, stats_on] = observe_overlap(true);
  EXPECT_TRUE(done_on) << "bucket 0's all-reduce had not finished before the last gradient";
  EXPECT_EQ(stats_on.launched_during_backward, stats_on.buckets)
      << "every bucket's last gradient comes from backward, so every all-reduce starts there";
  EXPECT_GE(stats_on.finished_during_backward, 1);
  auto [done_off, stats_off] = observe_overlap(false);
  EXPECT_FALSE(done_off) << "with overlap off nothing may start before backward ends";
  EXPECT_EQ(stats_off.launched_during_backward, 0);
}

TEST(DataParallel, AFailedRankIsAnErrorOnTheOthersNotAHang) {
  auto groups = dist::ProcessGroup::in_process(2).value();
  Status rank0;
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      nn::GPT model(test_gpt());
      Pcg32 rng(7, 1);
      auto params = nn::FlatParameters::create(model, cpu_device(), rng).value();
      auto dp =
          DataParallel::create(params, *groups[size_t(r)], make_adamw, small_buckets(2)).value();
      for (int s = 0; s < 5; ++s) {
        if (r == 1 && s == 2) {  // rank 1 fails in step 2
          groups[1]->abort();
          return;
        }
        auto [x, y] = batch(s, r * kRowsPerRank, kRowsPerRank);
        Variable loss = model.loss(model.forward(Variable(x)).value(), Variable(y)).value();
        Status st = loss.backward();
        if (st.ok()) st = dp->finish_backward();
        if (st.ok()) st = dp->optimizer().step();
        if (st.ok()) st = params.zero_grad();
        if (!st.ok()) {
          if (r == 0) rank0 = st;
          return;
        }
      }
    });
  for (auto& t : threads)
    t.join();
  EXPECT_FALSE(rank0.ok()) << "rank 0 finished every step although rank 1 failed";
  EXPECT_NE(rank0.to_string().find("rank 1"), std::string::npos) << rank0.to_string();
}

TEST(DataParallel, ARankProcessThatDiesIsAnErrorOnEveryOtherRank) {
  // Four processes; rank 2 is killed (SIGKILL) between forward and backward of step 2. The
  // others are in the middle of that step's collectives: each must exit with an error naming
  // rank 2, long before the 60 s deadline (which would mean a hang).
  for (int stage : {0, 3}) {
    dist::LaunchOptions launch;
    launch.nranks = 4;
    launch.command = {TESSEL_PARALLEL_RANK_HELPER,
                      "--zero-stage",
                      std::to_string(stage),
                      "--steps",
                      "5",
                      "--die-rank",
                      "2",
                      "--die-step",
                      "2"};
    launch.kill_on_failure = false;  // the survivors must find out by themselves
    launch.capture = true;
    launch.deadline_s = 60;
    auto result = dist::launch(launch);
    ASSERT_TRUE(result.ok()) << result.status().to_string();
    EXPECT_FALSE(result->deadline_passed) << "stage " << stage << ": a rank hung";
    ASSERT_EQ(result->ranks.size(), 4u);
    EXPECT_EQ(result->ranks[2].signal, SIGKILL);
    for (int r : {0, 1, 3}) {
      const auto& outcome = result->ranks[size_t(r)];
      EXPECT_EQ(outcome.exit_code, 1) << "stage " << stage << ", rank " << r << ":\n"
                                      << outcome.output;
      EXPECT_NE(outcome.output.find("rank 2"), std::string::npos)
          << "stage " << stage << ", rank " << r << ":\n"
          << outcome.output;
    }
  }
}

TEST(DataParallel, LocalGradientsAreTheBatchGradientAndASkippedStepChangesNothing) {
  // Reference: one process's gradient of the whole batch of 2 B rows.
  nn::GPT reference(test_gpt());
  Pcg32 rng(7, 1);
  auto ref_params = nn::FlatParameters::create(reference, cpu_device(), rng).value();
  {
    auto [x, y] = batch(0, 0, 2 * kRowsPerRank);
    Variable loss = reference.loss(reference.forward(Variable(x)).value(), Variable(y)).value();
    ASSERT_TRUE(loss.backward().ok());
  }
  const std::vector<float> want = ref_params.groups()[0].grads.to_vector<float>().value();
  const std::vector<float> values = ref_params.groups()[0].values.to_vector<float>().value();
  auto groups = dist::ProcessGroup::in_process(2).value();
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      nn::GPT model(test_gpt());
      Pcg32 init(7, 1);
      auto params = nn::FlatParameters::create(model, cpu_device(), init).value();
      auto dp =
          DataParallel::create(params, *groups[size_t(r)], make_adamw, small_buckets(0)).value();
      for (int s = 0; s < 2; ++s) {
        auto [x, y] = batch(0, r * kRowsPerRank, kRowsPerRank);
        Variable loss = model.loss(model.forward(Variable(x)).value(), Variable(y)).value();
        ASSERT_TRUE(loss.backward().ok());
        ASSERT_TRUE(dp->finish_backward().ok());
        ASSERT_TRUE(dp->wait_gradients().ok());
        std::vector<float> got = dp->local_gradients().at(0).to_vector<float>().value();
        ASSERT_EQ(got.size(), want.size());
        for (size_t i = 0; i < got.size(); ++i)
          ASSERT_NEAR(got[i], want[i], 1e-6 + 1e-4 * std::fabs(want[i])) << "element " << i;
        ASSERT_TRUE(dp->skip_step().ok());
        ASSERT_TRUE(params.zero_grad().ok());
        EXPECT_EQ(params.groups()[0].values.to_vector<float>().value(), values)
            << "a skipped step changed the parameters";
      }
    });
  for (auto& t : threads)
    t.join();
}

TEST(DataParallel, ZeroNeedsARankCountThatDividesTheRows) {
  auto groups = dist::ProcessGroup::in_process(3).value();
  nn::GPT model(test_gpt());
  Pcg32 rng(7, 1);
  auto params = nn::FlatParameters::create(model, cpu_device(), rng).value();
  // Rank 0 alone: the check comes before any collective.
  auto dp = DataParallel::create(params, *groups[0], make_adamw, small_buckets(1));
  ASSERT_FALSE(dp.ok());
  EXPECT_NE(dp.status().message().find("must divide 1024, got 3"), std::string::npos)
      << dp.status().to_string();
}

// Clipping: the norm every stage reports is the whole batch's gradient norm (plain C++ over one
// process's gradient), not a shard's nor a double count of shards; after clipping to a quarter of
// it, the ranks' gradients together (plain C++ sums of squares, added over the ranks; DDP: one
// rank's, since each holds all of them) have norm max_norm.
TEST(DataParallel, ClipGradNormUsesTheWholeGradientUnderEveryStage) {
  nn::GPT reference(test_gpt());
  Pcg32 rng(7, 1);
  auto ref_params = nn::FlatParameters::create(reference, cpu_device(), rng).value();
  {
    auto [x, y] = batch(0, 0, 2 * kRowsPerRank);
    Variable loss = reference.loss(reference.forward(Variable(x)).value(), Variable(y)).value();
    ASSERT_TRUE(loss.backward().ok());
  }
  double want_sq = 0;
  // A named vector: a range-for over `temporary.value()` would read the destroyed Expected.
  const std::vector<float> ref_grads = ref_params.groups()[0].grads.to_vector<float>().value();
  for (float g : ref_grads)
    want_sq += double(g) * g;
  const double want = std::sqrt(want_sq), max_norm = want / 4;
  for (int stage = 0; stage <= 3; ++stage) {
    auto groups = dist::ProcessGroup::in_process(2).value();
    std::vector<double> norms(2), clipped_sq(2);
    std::vector<std::string> errors(2);
    std::vector<std::thread> threads;
    for (int r = 0; r < 2; ++r)
      threads.emplace_back([&, r] {
        auto fail = [&](const Status& s) { errors[size_t(r)] = s.to_string(); };
        nn::GPT model(test_gpt());
        Pcg32 init(7, 1);
        auto params = nn::FlatParameters::create(model, cpu_device(), init).value();
        auto dp =
            DataParallel::create(params, *groups[size_t(r)], make_adamw, small_buckets(stage));
        if (!dp.ok()) return fail(dp.status());
        auto [x, y] = batch(0, r * kRowsPerRank, kRowsPerRank);
        Variable loss = model.loss(model.forward(Variable(x)).value(), Variable(y)).value();
        Status s = loss.backward();
        if (s.ok()) s = (*dp)->finish_backward();
        if (!s.ok()) return fail(s);
        Expected<double> norm = (*dp)->clip_grad_norm(max_norm);
        if (!norm.ok()) return fail(norm.status());
        norms[size_t(r)] = *norm;
        for (const Tensor& t : (*dp)->local_gradients()) {
          const std::vector<float> g = t.to_vector<float>().value();
          for (float v : g)
            clipped_sq[size_t(r)] += double(v) * v;
        }
        s = (*dp)->skip_step();
        if (!s.ok()) return fail(s);
      });
    for (auto& t : threads)
      t.join();
    for (int r = 0; r < 2; ++r) {
      ASSERT_EQ(errors[size_t(r)], "") << "stage " << stage << " rank " << r;
      EXPECT_NEAR(norms[size_t(r)], want, 1e-4 * want) << "stage " << stage << " rank " << r;
    }
    const double after = std::sqrt(stage == 0 ? clipped_sq[0] : clipped_sq[0] + clipped_sq[1]);
    EXPECT_NEAR(after, max_norm, 1e-4 * max_norm) << "stage " << stage;
  }
}

// ZeRO-3 ends every step by starting the gather of the bucket the next forward reads first; a
// DataParallel destroyed right after must wait for that all-gather before its buffers go back
// to the caching allocator, or the exchange writes into memory that the allocator has already
// handed to someone else (what TSan saw as two ranks' progress threads writing one block).
// Rank 1 joins the gather only 100 ms after rank 0 started destroying its DataParallel; by
// then rank 0 has taken every cached block of the gathered buffer's size (the allocator hands
// out its most recently freed block first) and filled it with a sentinel, which must survive.
TEST(DataParallel, DestroyingWaitsForTheCollectivesThatUseItsBuffers) {
  auto groups = dist::ProcessGroup::in_process(2).value();
  std::atomic<bool> destroying{false}, rank1_joined{false};
  std::vector<std::string> errors(2);
  bool returned_before_rank1_joined = false;
  size_t sentinels_overwritten = 0;
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      auto fail = [&](const Status& s) { errors[size_t(r)] = s.to_string(); };
      nn::GPT model(test_gpt());
      Pcg32 init(7, 1);
      auto params = nn::FlatParameters::create(model, cpu_device(), init).value();
      auto dp = DataParallel::create(params, *groups[size_t(r)], make_adamw, small_buckets(3));
      if (!dp.ok()) return fail(dp.status());
      auto [x, y] = batch(0, r * kRowsPerRank, kRowsPerRank);
      Variable loss = model.loss(model.forward(Variable(x)).value(), Variable(y)).value();
      Status s = loss.backward();
      if (s.ok()) s = (*dp)->finish_backward();
      if (!s.ok()) return fail(s);
      const auto [begin, end] = (*dp)->bucket_ranges().back();
      if (r == 1) {
        while (!destroying.load())
          std::this_thread::yield();
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        rank1_joined.store(true);
        s = (*dp)->skip_step();  // queues rank 1's side of the gather
        if (!s.ok()) return fail(s);
        dp->reset();
      } else {
        s = (*dp)->skip_step();  // queues rank 0's side; it cannot finish before rank 1's
        if (!s.ok()) return fail(s);
        destroying.store(true);
        dp->reset();
        returned_before_rank1_joined = !rank1_joined.load();
        std::vector<Tensor> taken;
        for (int i = 0; i < 64; ++i)
          taken.push_back(Tensor::full({end - begin}, -7.0, DType::kF32).value());
        s = groups[0]->barrier();  // after the gather, in this rank's call order
        if (!s.ok()) return fail(s);
        for (const Tensor& t : taken) {
          const std::vector<float> values = t.to_vector<float>().value();
          if (std::any_of(values.begin(), values.end(), [](float v) { return v != -7.0f; }))
            ++sentinels_overwritten;
        }
        return;
      }
      s = groups[1]->barrier();
      if (!s.ok()) return fail(s);
    });
  for (auto& t : threads)
    t.join();
  EXPECT_EQ(errors[0], "");
  EXPECT_EQ(errors[1], "");
  EXPECT_FALSE(returned_before_rank1_joined)
      << "rank 0's DataParallel was destroyed while its all-gather was still queued";
  EXPECT_EQ(sentinels_overwritten, 0u) << "a collective wrote into memory freed by its owner";
}

// BatchNorm's running statistics are buffers, not flat parameters: broadcast_buffers gives every
// rank rank 0's (values set here per rank, rank 0's written out as the expectation).
TEST(DataParallel, BroadcastBuffersGivesEveryRankRankZerosStatistics) {
  const std::vector<float> mean0 = {1, 2, 3, 4}, var0 = {0.5f, 1.5f, 2.5f, 3.5f};
  auto groups = dist::ProcessGroup::in_process(2).value();
  std::vector<std::string> errors(2);
  std::vector<std::map<std::string, std::vector<double>>> got(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      auto fail = [&](const Status& s) { errors[size_t(r)] = s.to_string(); };
      nn::BatchNorm2d bn(4);
      Pcg32 rng(7, 1);
      auto params = nn::FlatParameters::create(bn, cpu_device(), rng);
      if (!params.ok()) return fail(params.status());
      const float other = 10.0f * float(r);  // rank 1's statistics differ from rank 0's
      for (auto& [name, buffer] : bn.named_buffers()) {
        if (name == "running_mean" || name == "running_var") {
          std::vector<float> v = name == "running_mean" ? mean0 : var0;
          for (float& x : v)
            x += other;
          buffer->tensor = Tensor::from_vector<float>(v, {4}).value();
        } else {
          buffer->tensor = Tensor::from_vector<int64_t>({5 + 3 * int64_t(r)}, {}).value();
        }
      }
      auto dp = DataParallel::create(*params, *groups[size_t(r)], make_adamw, small_buckets(0));
      if (!dp.ok()) return fail(dp.status());
      Status s = (*dp)->broadcast_buffers(bn);
      if (!s.ok()) return fail(s);
      for (auto& [name, buffer] : bn.named_buffers()) {
        std::vector<double>& out = got[size_t(r)][name];
        if (buffer->tensor.dtype() == DType::kI64) {
          const std::vector<int64_t> v = buffer->tensor.to_vector<int64_t>().value();
          out.assign(v.begin(), v.end());
        } else {
          const std::vector<float> v = buffer->tensor.to_vector<float>().value();
          out.assign(v.begin(), v.end());
        }
      }
    });
  for (auto& t : threads)
    t.join();
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(errors[size_t(r)], "") << "rank " << r;
    auto& g = got[size_t(r)];
    ASSERT_EQ(g.size(), 3u);
    for (size_t i = 0; i < 4; ++i) {
      EXPECT_EQ(g["running_mean"].at(i), double(mean0[i])) << "rank " << r;
      EXPECT_EQ(g["running_var"].at(i), double(var0[i])) << "rank " << r;
    }
    EXPECT_EQ(g["num_batches_tracked"].at(0), 5.0) << "rank " << r;
  }
}

// Uneven data parallelism: ranks take shares of the global batch that differ from each other and
// change from step to step (as the rebalancer moves them); each rank's gradient is weighted by its
// share, so the job still trains as one process with the whole batch.
std::vector<int64_t> two_rank_shares(int step) {
  static const std::vector<std::vector<int64_t>> cycle = {{1, 5}, {4, 2}, {5, 1}};
  return cycle[size_t(step) % cycle.size()];
}

TEST(DataParallel, UnevenSharesEqualOneProcessUnderDdpAndEveryZeroStage) {
  const auto want = reference_losses(6);
  for (int stage = 0; stage <= 3; ++stage)
    expect_same_losses(global_losses(run_ranks(
                           {.ranks = 2, .dp = small_buckets(stage), .shares = two_rank_shares})),
                       want, "uneven shares, ZeRO stage " + std::to_string(stage));
}

TEST(DataParallel, UnevenSharesOnFourRanksWithZeroThreeEqualOneProcess) {
  const auto want = reference_losses(8);
  auto shares = [](int step) {
    return step % 2 == 0 ? std::vector<int64_t>{1, 2, 4, 1} : std::vector<int64_t>{3, 1, 1, 3};
  };
  for (int stage : {0, 3})
    expect_same_losses(
        global_losses(run_ranks({.ranks = 4, .dp = small_buckets(stage), .shares = shares})), want,
        "uneven shares on 4 ranks, ZeRO stage " + std::to_string(stage));
}

TEST(DataParallel, UnevenSharesWithGradientAccumulationEqualOneProcess) {
  // 2 micro-steps of (1, 5), (4, 2) ... rows: 12 rows a step.
  const auto want = reference_losses(12);
  for (int stage : {0, 2})
    expect_same_losses(global_losses(run_ranks({.ranks = 2,
                                                .dp = small_buckets(stage),
                                                .accumulation = 2,
                                                .shares = two_rank_shares})),
                       want,
                       "uneven shares with accumulation, ZeRO stage " + std::to_string(stage));
}

TEST(DataParallel, AnExcludedRankJoinsTheCollectivesWithoutRows) {
  // Rank 0 takes no rows at every step (pass_without_rows): rank 1's 4 rows are the batch.
  const auto want = reference_losses(4);
  auto shares = [](int) { return std::vector<int64_t>{0, 4}; };
  for (int stage = 0; stage <= 3; ++stage)
    expect_same_losses(
        global_losses(run_ranks({.ranks = 2, .dp = small_buckets(stage), .shares = shares})), want,
        "rank 0 excluded, ZeRO stage " + std::to_string(stage));
}

TEST(DataParallel, RanksOfDifferentThreadCountsRebalanceAndStillEqualOneProcess) {
  // Two processes, rank 0 with 2 kernel threads and rank 1 with 1: the rebalancer moves the 6
  // rows from the ranks' measured compute every step (no hysteresis), and whatever the shares,
  // the losses are one process's. Which way the shares move depends on this machine's load, so
  // the test shows them (SHARES lines) and asserts only what must hold.
  constexpr int kUnevenSteps = 12;
  const auto want = testing::one_process_losses(6, kUnevenSteps).value();
  for (int stage : {0, 3}) {
    dist::LaunchOptions launch;
    launch.nranks = 2;
    launch.command = {TESSEL_PARALLEL_RANK_HELPER,
                      "--threads",
                      "2,1",
                      "--uneven-rows",
                      "6",
                      "--steps",
                      std::to_string(kUnevenSteps),
                      "--zero-stage",
                      std::to_string(stage)};
    launch.capture = true;
    launch.deadline_s = 120;
    auto result = dist::launch(launch);
    ASSERT_TRUE(result.ok()) << result.status().to_string();
    const std::string& out = result->ranks.at(0).output;
    ASSERT_TRUE(result->first_failure.empty()) << result->first_failure << "\n" << out;
    std::vector<double> got;
    std::string shares_seen;
    std::istringstream lines(out);
    std::string line;
    while (std::getline(lines, line)) {
      const size_t loss_at = line.find("LOSS "), shares_at = line.find("SHARES ");
      if (loss_at != std::string::npos) {
        int step = 0;
        double value = 0;
        std::istringstream(line.substr(loss_at + 5)) >> step >> value;
        got.push_back(value);
      } else if (shares_at != std::string::npos) {
        int step = 0;
        std::string cut;
        std::istringstream(line.substr(shares_at + 7)) >> step >> cut;
        shares_seen += cut + " ";
        const size_t colon = cut.find(':');
        ASSERT_NE(colon, std::string::npos) << line;
        const int a = std::stoi(cut.substr(0, colon)), b = std::stoi(cut.substr(colon + 1));
        EXPECT_EQ(a + b, 6) << line;
        EXPECT_GE(std::min(a, b), 1) << line;
      }
    }
    expect_same_losses(
        got, want, "threads 2,1, ZeRO stage " + std::to_string(stage) + ", shares " + shares_seen);
    std::printf("ZeRO-%d shares per step (rank 0:rank 1): %s\n", stage, shares_seen.c_str());
  }
}

TEST(DataParallel, ABatchShareMustFitTheGlobalBatch) {
  auto groups = dist::ProcessGroup::in_process(1).value();
  nn::GPT model(test_gpt());
  Pcg32 rng(7, 1);
  auto params = nn::FlatParameters::create(model, cpu_device(), rng).value();
  auto dp = DataParallel::create(params, *groups[0], make_adamw, small_buckets(0)).value();
  EXPECT_FALSE(dp->set_batch_share(5, 4).ok());
  EXPECT_FALSE(dp->set_batch_share(-1, 4).ok());
  EXPECT_FALSE(dp->set_batch_share(0, 0).ok());
  ASSERT_TRUE(dp->set_batch_share(3, 4).ok());
  EXPECT_DOUBLE_EQ(dp->gradient_weight(), 0.75);
}

}  // namespace
}  // namespace tessel::parallel
