// Uneven data parallelism: how many rows of each global batch every rank takes when the ranks do
// not run at the same speed (a CPU beside a GPU, machines of different sizes, a core shared with
// another job), re-measured and re-balanced while training runs.
//
//   TESSEL_ASSIGN_OR_RETURN(Rebalancer balance, Rebalancer::create(/*global_batch=*/64, world,
//   {}));
//   // every step: rows = balance.shares()[rank]; time forward + backward (compute only), then
//   TESSEL_ASSIGN_OR_RETURN(bool moved, balance.exchange(group, rows, seconds));
//
// Shares are whole rows that add up to the global batch, proportional to each rank's measured
// throughput (rows per second of its own compute), by largest remainders: a share is the floor
// or the ceiling of its ideal value G * t_r / sum(t). Every rank that takes part gets at least one
// row (a rank leaves only when it is excluded explicitly: it then gets none and still joins the
// collectives with a zero gradient). Throughput is smoothed (an exponential moving average), and
// the shares move only when the new ones predict a step time (the slowest rank's rows / its
// throughput) at least `hysteresis` shorter than the current ones: noise on a shared machine does
// not make the split thrash, and every move has to pay for itself.
//
// Every rank computes the shares from the same all-gathered measurements with the same code, so
// all ranks agree on them without a further message.
#pragma once

#include <cstdint>
#include <vector>

#include "dist/process_group.h"
#include "support/status.h"

namespace tessel::parallel {

struct RebalanceOptions {
  // The shares move only when they would shorten the predicted step by more than this fraction.
  double hysteresis = 0.05;
  // Weight of the newest measurement in the smoothed throughput (1: no smoothing).
  double smoothing = 0.5;
  // Ranks that take no rows (their throughput is ignored); at least one rank must remain.
  std::vector<int> excluded = {};
};

// Whole-row shares of `global_rows` proportional to `throughput` (largest remainders, ties to the
// lower rank), at least one row for every rank with throughput > 0, none for a rank with
// throughput 0. An error if no rank has a positive throughput, a throughput is negative or not
// finite, or there are fewer rows than ranks that take part.
Expected<std::vector<int64_t>> proportional_shares(int64_t global_rows,
                                                   const std::vector<double>& throughput);

// The step time `shares` predict: the slowest rank's rows / throughput (ranks with no rows count
// 0; a rank with rows and no throughput makes it infinite).
double predicted_step_seconds(const std::vector<int64_t>& shares,
                              const std::vector<double>& throughput);

// The even split: global_rows / world each, the first global_rows % world ranks one more.
std::vector<int64_t> even_shares(int64_t global_rows, int world);

class Rebalancer {
 public:
  // Starts from the even split over the ranks that are not excluded.
  static Expected<Rebalancer> create(int64_t global_rows, int world, RebalanceOptions options);

  const std::vector<int64_t>& shares() const { return shares_; }
  // The smoothed rows per second of each rank (0 before its first measurement, and excluded).
  const std::vector<double>& throughput() const { return throughput_; }
  int64_t global_rows() const { return global_rows_; }

  // One measurement per rank: the rows it computed and the seconds that took. Updates the
  // smoothed throughput and, past the hysteresis, the shares. Returns whether the shares moved.
  // A rank with rows > 0 and seconds <= 0 (or not finite) is an error naming it.
  Expected<bool> observe(const std::vector<int64_t>& rows, const std::vector<double>& seconds);
  // Every rank: all-gathers this rank's (rows, seconds) and observes the result.
  Expected<bool> exchange(dist::ProcessGroup& group, int64_t rows, double seconds);

 private:
  Rebalancer(int64_t global_rows, RebalanceOptions options)
      : global_rows_(global_rows), options_(std::move(options)) {}

  int64_t global_rows_;
  RebalanceOptions options_;
  std::vector<bool> taking_part_;
  std::vector<int64_t> shares_;
  std::vector<double> throughput_;
};

}  // namespace tessel::parallel
