// The search on a synthetic cost whose optimum is known: it reaches 95% of the best in fewer
// trials than random search (expected over seeds), and reports what it measured.
#include "tune/search.h"

#include <gtest/gtest.h>

#include <cmath>

namespace tessel::tune {
namespace {

// A 3-parameter space of 8 x 8 x 6 points; cost is smooth in log block sizes with an optimum
// off-centre, plus a cliff (failed trials) where "tiles" pass a memory budget.
struct Synthetic {
  std::vector<std::vector<int>> coords;
  std::vector<std::vector<double>> features;
  std::vector<double> cost;
  double best = INFINITY;
};

Synthetic synthetic() {
  Synthetic s;
  for (int a = 0; a < 8; ++a)
    for (int b = 0; b < 8; ++b)
      for (int c = 0; c < 6; ++c) {
        const double x = a / 7.0, y = b / 7.0, z = c / 5.0;
        double cost = 1.0 + 3.0 * (x - 0.7) * (x - 0.7) + 2.0 * (y - 0.3) * (y - 0.3) +
                      1.5 * (z - 0.6) * (z - 0.6) + 0.8 * (x - 0.7) * (y - 0.3) +
                      0.02 * std::sin(17.0 * a + 5.0 * b + 3.0 * c);
        if (x + y + z > 2.2) cost = INFINITY;  // does not fit
        s.coords.push_back({a, b, c});
        s.features.push_back({x, y, z, x + y + z});
        s.cost.push_back(cost);
        s.best = std::min(s.best, cost);
      }
  return s;
}

int trials_to_95(const std::vector<int>& order, const Synthetic& s) {
  double found = INFINITY;
  for (size_t t = 0; t < order.size(); ++t) {
    found = std::min(found, s.cost[order[t]]);
    if (s.best / found >= 0.95) return static_cast<int>(t) + 1;
  }
  return static_cast<int>(order.size());
}

TEST(Search, BeatsRandomSearchInExpectedTrials) {
  const Synthetic s = synthetic();
  double search_mean = 0, random_mean = 0;
  constexpr int kSeeds = 20;
  for (int seed = 1; seed <= kSeeds; ++seed) {
    SearchOptions options;
    options.seed = seed;
    options.patience = 0;
    Search search(s.coords, s.features, options);
    std::vector<int> order;
    for (int p = search.next(); p >= 0 && order.size() < 64; p = search.next()) {
      order.push_back(p);
      search.report(p, s.cost[p]);
    }
    search_mean += trials_to_95(order, s) / double(kSeeds);
    random_mean +=
        trials_to_95(random_order(static_cast<int>(s.cost.size()), seed), s) / double(kSeeds);
  }
  // 384 points of which about 10% are within 95%: random needs about 10 in expectation.
  EXPECT_LT(search_mean, random_mean) << "search " << search_mean << ", random " << random_mean;
}

// From the 20th trial on, each point measured is a neighbour (one step in at most two parameters)
// of the best point so far, until that point's neighbourhood is measured.
TEST(Search, LateTrialsMeasureTheBestPointsNeighbours) {
  const Synthetic s = synthetic();
  SearchOptions options;
  options.patience = 0;
  Search search(s.coords, s.features, options);
  auto neighbours = [&](int p, int q) {
    int steps = 0;
    for (size_t k = 0; k < s.coords[p].size(); ++k) {
      const int d = std::abs(s.coords[p][k] - s.coords[q][k]);
      if (d > 1) return false;
      steps += d > 0;
    }
    return steps <= 2;
  };
  std::vector<char> measured(s.cost.size(), 0);
  int local_trials = 0;
  for (int t = 0; t < 40; ++t) {
    const int best = search.best();
    const int p = search.next();
    ASSERT_GE(p, 0);
    if (t >= 20) {
      bool unmeasured_neighbour = false;
      for (size_t q = 0; q < s.cost.size(); ++q)
        unmeasured_neighbour |= !measured[q] && neighbours(static_cast<int>(q), best);
      if (unmeasured_neighbour) {
        EXPECT_TRUE(neighbours(p, best)) << "trial " << t + 1;
        ++local_trials;
      }
    }
    measured[p] = 1;
    search.report(p, s.cost[p]);
  }
  EXPECT_GT(local_trials, 0);
}

TEST(Search, MeasuresEveryPointOnceAndKeepsTheBest) {
  const Synthetic s = synthetic();
  SearchOptions options;
  options.first = 5;
  options.patience = 0;
  Search search(s.coords, s.features, options);
  std::vector<char> seen(s.cost.size(), 0);
  EXPECT_EQ(search.next(), 5);  // the defaults first
  search.report(5, s.cost[5]);
  seen[5] = 1;
  for (int p = search.next(); p >= 0; p = search.next()) {
    ASSERT_FALSE(seen[p]) << p;
    seen[p] = 1;
    search.report(p, s.cost[p]);
  }
  EXPECT_EQ(search.trials(), static_cast<int>(s.cost.size()));
  EXPECT_DOUBLE_EQ(search.best_cost(), s.best);
  EXPECT_TRUE(search.done());
}

TEST(Search, StopsEarlyWhenNothingImproves) {
  std::vector<std::vector<int>> coords;
  std::vector<std::vector<double>> features;
  for (int i = 0; i < 100; ++i) {
    coords.push_back({i});
    features.push_back({i / 99.0});
  }
  SearchOptions options;
  options.patience = 5;
  options.min_trials = 8;
  Search search(coords, features, options);
  while (!search.done())
    search.report(search.next(), 1.0);  // a flat cost
  EXPECT_EQ(search.trials(), 8);
}

TEST(Confirmation, KeepsACandidateOnlyWhenEveryRoundIsFasterAndTheMedianByTheMargin) {
  EXPECT_TRUE(confirmed_faster({0.90, 0.95, 0.92}, 3, 0.03));
  EXPECT_FALSE(confirmed_faster({0.90, 0.95, 1.01}, 3, 0.03));   // one round slower
  EXPECT_FALSE(confirmed_faster({0.98, 0.975, 0.99}, 3, 0.03));  // within the noise margin
  EXPECT_FALSE(confirmed_faster({0.90, 0.90}, 3, 0.03));         // a round did not run
  EXPECT_FALSE(confirmed_faster({}, 0, 0.03));
  EXPECT_FALSE(confirmed_faster({0.9, std::nan(""), 0.9}, 3, 0.03));
  EXPECT_DOUBLE_EQ(median_of({3, 1, 2}), 2);
  EXPECT_DOUBLE_EQ(median_of({}), 0);
}

}  // namespace
}  // namespace tessel::tune
