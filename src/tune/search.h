// The tuner's search over a finite list of valid points (a kernel's space after its constraints):
// a cost model learned from the measurements so far ranks the candidates of an evolutionary step
// (neighbours of the best points measured, plus a few random ones), and the best-ranked is
// measured next; from the 20th trial on, the neighbours of the best point alone (then a point far
// from all).
//
//   Search search(points, features, /*seed=*/1, /*first=*/default_index);
//   while (!search.done()) {
//     int p = search.next();
//     search.report(p, measure(points[p]));   // seconds; infinity for a failed trial
//   }
//
// The model is ridge regression of log(cost) on each point's features (the caller's: block sizes,
// tile bytes over the device's fast memory, wasted edge work, blocks per thread...) with their
// squares and pairwise products. Until it has seen a few points it picks points far apart. The
// search stops early when `patience` trials in a row did not improve the best by 1%.
#pragma once

#include <cstdint>
#include <limits>
#include <random>
#include <set>
#include <vector>

namespace tessel::tune {

struct SearchOptions {
  uint64_t seed = 1;
  int first = -1;      // a point to measure first (the kernel's defaults), -1 for none
  int patience = 12;   // trials without a 1% improvement before done(); 0: never stop early
  int min_trials = 8;  // done() is never true before this many
};

class Search {
 public:
  // `coords[i]` is point i's position in the space: one index per parameter into its list of
  // values (neighbours differ by one step in one parameter). `features[i]` are its model inputs.
  Search(std::vector<std::vector<int>> coords, std::vector<std::vector<double>> features,
         SearchOptions options);

  // The next point to measure; -1 when every point has been measured.
  int next();
  void report(int point, double cost);
  bool done() const;

  int trials() const { return static_cast<int>(measured_.size()); }
  int best() const { return best_; }
  double best_cost() const { return best_cost_; }

 private:
  std::vector<double> model_inputs(int point) const;
  void fit();
  double predict(int point) const;
  int farthest_unmeasured();
  void add_immigrants(std::set<int>* candidates);

  std::vector<std::vector<int>> coords_;
  std::vector<std::vector<double>> features_;
  SearchOptions options_;
  std::mt19937_64 rng_;
  std::vector<char> is_measured_;
  std::vector<std::pair<int, double>> measured_;  // in order
  std::vector<double> weights_;
  int best_ = -1;
  double best_cost_ = std::numeric_limits<double>::infinity();
  int since_improvement_ = 0;
};

// The tuner's confirmation rule. `ratios` are rounds of (candidate time / defaults time), each
// round timing the two in turns, launch by launch, so that a neighbour's load hits both alike.
// The candidate replaces the defaults only when all `rounds` ran, their median is at most
// 1 - margin, and no round had it slower (ratio >= 1): a tuned launch is then never slower than
// an untuned one beyond noise.
bool confirmed_faster(std::vector<double> ratios, int rounds, double margin);
double median_of(std::vector<double> values);  // 0 for none; the upper middle for an even count

// Plain baselines for comparisons: a seeded random order and the grid's own order.
std::vector<int> random_order(int points, uint64_t seed);

}  // namespace tessel::tune
