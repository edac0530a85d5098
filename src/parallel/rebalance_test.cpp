// The rebalancer's arithmetic against closed forms: shares are whole rows adding up to the global
// batch, each the floor or the ceiling of its proportional value G * t_r / sum(t) (at least one
// row for a rank that takes part), the step time they predict is the slowest rank's, and the
// shares move only past the hysteresis, from smoothed measurements. Also RankShard's uneven cut.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <thread>

#include "parallel/rank_shard.h"
#include "parallel/rebalance.h"

namespace tessel::parallel {
namespace {

int64_t sum(const std::vector<int64_t>& v) {
  return std::accumulate(v.begin(), v.end(), int64_t(0));
}

TEST(Rebalance, SharesAreProportionalWholeRowsThatAddUp) {
  EXPECT_EQ(proportional_shares(12, {2.0, 1.0}).value(), (std::vector<int64_t>{8, 4}));
  EXPECT_EQ(proportional_shares(32, {1.0, 1.0}).value(), (std::vector<int64_t>{16, 16}));
  // 8 * 2/3 = 5.33 and 2.67: the larger remainder (rank 1's .67) gets the left-over row.
  EXPECT_EQ(proportional_shares(8, {2.0, 1.0}).value(), (std::vector<int64_t>{5, 3}));
  // A tie in remainders goes to the lower rank.
  EXPECT_EQ(proportional_shares(3, {1.0, 1.0}).value(), (std::vector<int64_t>{2, 1}));
  // Many cases against the closed form: floor or ceiling of the ideal share, sum G.
  Pcg32 rng(5, 1);
  for (int trial = 0; trial < 200; ++trial) {
    const size_t n = 1 + rng.below(6);
    std::vector<double> t(n);
    double total = 0;
    for (double& v : t)
      total += (v = 0.5 + 10.0 * rng.next_float());
    const int64_t g = int64_t(n) * 2 + int64_t(rng.below(200));
    const std::vector<int64_t> s = proportional_shares(g, t).value();
    ASSERT_EQ(sum(s), g);
    for (size_t r = 0; r < n; ++r) {
      const double ideal = double(g) * t[r] / total;
      if (ideal >= 1.0) {
        EXPECT_GE(s[r], int64_t(std::floor(ideal))) << "trial " << trial << " rank " << r;
        EXPECT_LE(s[r], int64_t(std::ceil(ideal))) << "trial " << trial << " rank " << r;
      } else {
        EXPECT_EQ(s[r], 1) << "trial " << trial << " rank " << r;
      }
    }
  }
}

TEST(Rebalance, EveryRankThatTakesPartGetsARowAndAnExcludedOneNone) {
  // Rank 1 is 100 times slower: its ideal 0.099 rows becomes one, taken from rank 0.
  EXPECT_EQ(proportional_shares(10, {100.0, 1.0}).value(), (std::vector<int64_t>{9, 1}));
  EXPECT_EQ(proportional_shares(10, {1000.0, 1.0, 1.0}).value(), (std::vector<int64_t>{8, 1, 1}));
  EXPECT_EQ(proportional_shares(6, {1.0, 0.0, 2.0}).value(), (std::vector<int64_t>{2, 0, 4}));
  EXPECT_FALSE(proportional_shares(1, {1.0, 1.0}).ok());  // fewer rows than ranks
  EXPECT_FALSE(proportional_shares(4, {0.0, 0.0}).ok());
  EXPECT_FALSE(proportional_shares(4, {1.0, -1.0}).ok());
  EXPECT_FALSE(proportional_shares(4, {1.0, std::nan("")}).ok());
}

TEST(Rebalance, PredictedStepIsTheSlowestRanks) {
  EXPECT_DOUBLE_EQ(predicted_step_seconds({4, 4}, {2.0, 1.0}), 4.0);
  EXPECT_DOUBLE_EQ(predicted_step_seconds({6, 2}, {2.0, 1.0}), 3.0);
  EXPECT_DOUBLE_EQ(predicted_step_seconds({6, 0}, {2.0, 0.0}), 3.0);
  EXPECT_TRUE(std::isinf(predicted_step_seconds({6, 1}, {2.0, 0.0})));
  EXPECT_EQ(even_shares(7, 3), (std::vector<int64_t>{3, 2, 2}));
}

TEST(Rebalance, MovesToTheMeasuredSpeedsAndStaysWithinTheHysteresis) {
  Rebalancer b = Rebalancer::create(12, 2, {.hysteresis = 0.05, .smoothing = 1.0}).value();
  EXPECT_EQ(b.shares(), (std::vector<int64_t>{6, 6}));
  // Equal speeds: nothing to gain.
  EXPECT_FALSE(b.observe({6, 6}, {1.0, 1.0}).value());
  // Rank 1 at half the speed: 6 rows in 2 s. Shares 8:4 predict 4 s instead of 6 s.
  EXPECT_TRUE(b.observe({6, 6}, {1.0, 2.0}).value());
  EXPECT_EQ(b.shares(), (std::vector<int64_t>{8, 4}));
  EXPECT_DOUBLE_EQ(b.throughput()[0], 6.0);
  EXPECT_DOUBLE_EQ(b.throughput()[1], 3.0);
  // Rank 1 now 20% faster (3.6 rows/s): the ideal 7.5 : 4.5 rounds to 8:4 again, so they stay.
  EXPECT_FALSE(b.observe({8, 4}, {8.0 / 6.0, 4.0 / 3.6}).value());
  EXPECT_EQ(b.shares(), (std::vector<int64_t>{8, 4}));
}

TEST(Rebalance, HysteresisHoldsSmallGains) {
  // Throughputs 6.6 and 5.0 rows/s: the ideal 6.83 : 5.17 rounds to 7:5, which predicts
  // max(7/6.6, 5/5) = 1.06 s against 6:6's 1.2 s, 11.6% shorter: a move with hysteresis 0.1,
  // none with 0.2.
  for (double hysteresis : {0.1, 0.2}) {
    Rebalancer b = Rebalancer::create(12, 2, {.hysteresis = hysteresis, .smoothing = 1.0}).value();
    const bool moved = b.observe({6, 6}, {6.0 / 6.6, 6.0 / 5.0}).value();
    EXPECT_EQ(moved, hysteresis < 0.116) << "hysteresis " << hysteresis;
    EXPECT_EQ(b.shares(), moved ? (std::vector<int64_t>{7, 5}) : (std::vector<int64_t>{6, 6}));
  }
}

TEST(Rebalance, ThroughputIsSmoothed) {
  Rebalancer b = Rebalancer::create(8, 2, {.hysteresis = 0.0, .smoothing = 0.25}).value();
  ASSERT_TRUE(b.observe({4, 4}, {1.0, 1.0}).ok());  // first measurement taken as it is: 4, 4
  ASSERT_TRUE(b.observe({4, 4}, {0.5, 1.0}).ok());  // rank 0 measures 8: 0.75 * 4 + 0.25 * 8
  EXPECT_DOUBLE_EQ(b.throughput()[0], 5.0);
  EXPECT_DOUBLE_EQ(b.throughput()[1], 4.0);
  // 8 * 5/9 = 4.44: 4:4 still.
  EXPECT_EQ(b.shares(), (std::vector<int64_t>{4, 4}));
  EXPECT_FALSE(b.observe({4, 4}, {1.0, 0.0}).ok()) << "a rank with rows and no time";
}

TEST(Rebalance, ExcludedRanksTakeNoRows) {
  Rebalancer b =
      Rebalancer::create(9, 3, {.hysteresis = 0.0, .smoothing = 1.0, .excluded = {1}}).value();
  EXPECT_EQ(b.shares(), (std::vector<int64_t>{5, 0, 4}));
  EXPECT_TRUE(b.observe({5, 0, 4}, {1.0, 0.0, 2.0}).value());  // 5/s and 2/s
  EXPECT_EQ(b.shares(), (std::vector<int64_t>{6, 0, 3}));      // 9 * 5/7 = 6.4, 2.6
  EXPECT_FALSE(Rebalancer::create(9, 2, {.excluded = {0, 1}}).ok());
  EXPECT_FALSE(Rebalancer::create(9, 2, {.excluded = {2}}).ok());
  EXPECT_FALSE(Rebalancer::create(1, 2, {}).ok());
  EXPECT_FALSE(Rebalancer::create(8, 2, {.hysteresis = 1.0}).ok());
}

TEST(Rebalance, RanksAgreeThroughTheExchange) {
  auto groups = dist::ProcessGroup::in_process(2).value();
  std::vector<std::vector<int64_t>> got(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      Rebalancer b = Rebalancer::create(12, 2, {.hysteresis = 0.0, .smoothing = 1.0}).value();
      // Rank 1 computes its 6 rows in 2 s, rank 0 in 1 s: each knows only its own figure.
      ASSERT_TRUE(b.exchange(*groups[size_t(r)], 6, r == 0 ? 1.0 : 2.0).value());
      got[size_t(r)] = b.shares();
    });
  for (auto& t : threads)
    t.join();
  EXPECT_EQ(got[0], (std::vector<int64_t>{8, 4}));
  EXPECT_EQ(got[1], got[0]);
}

// A source of numbered rows: row i of batch k holds k * 100 + i.
class CountingSource : public BatchSource {
 public:
  explicit CountingSource(int64_t rows) : rows_(rows) {}
  Expected<Batch> next() override {
    std::vector<int64_t> v(static_cast<size_t>(rows_));
    for (int64_t i = 0; i < rows_; ++i)
      v[size_t(i)] = int64_t(batch_) * 100 + i;
    ++batch_;
    TESSEL_ASSIGN_OR_RETURN(Tensor t, Tensor::from_vector<int64_t>(v, {rows_}));
    return Batch{t, t};
  }
  DataPosition position() const override { return {0, batch_, Pcg32()}; }
  Status restore(const DataPosition& p) override {
    batch_ = p.batch;
    return ok_status();
  }

 private:
  int64_t rows_;
  uint64_t batch_ = 0;
};

TEST(Rebalance, RankShardCutsTheSameGlobalBatchesBySharesRankMajor) {
  std::vector<std::vector<int64_t>> rows(3);
  for (int r = 0; r < 3; ++r) {
    RankShard shard(std::make_unique<CountingSource>(9), r, 3);
    // Named vectors: a range-for over `temporary.value()` would read a destroyed Expected.
    auto take = [&] {
      const std::vector<int64_t> got = shard.next().value().inputs.to_vector<int64_t>().value();
      rows[size_t(r)].insert(rows[size_t(r)].end(), got.begin(), got.end());
    };
    take();  // even: 3 each
    ASSERT_TRUE(shard.set_shares({5, 1, 3}).ok());
    take();
    ASSERT_TRUE(shard.set_shares({2, 0, 7}).ok());
    take();
    EXPECT_EQ(shard.position().batch, 3u);
    ASSERT_TRUE(shard.set_shares({2, 2, 2}).ok());
    EXPECT_FALSE(shard.next().ok()) << "shares that do not add up to the batch";
    EXPECT_FALSE(shard.set_shares({1, 2}).ok());
    EXPECT_FALSE(shard.set_shares({-1, 5, 5}).ok());
  }
  EXPECT_EQ(rows[0], (std::vector<int64_t>{0, 1, 2, 100, 101, 102, 103, 104, 200, 201}));
  EXPECT_EQ(rows[1], (std::vector<int64_t>{3, 4, 5, 105}));
  EXPECT_EQ(rows[2],
            (std::vector<int64_t>{6, 7, 8, 106, 107, 108, 202, 203, 204, 205, 206, 207, 208}));
}

}  // namespace
}  // namespace tessel::parallel
