// Shares of the global batch proportional to measured throughput (see rebalance.h).
#include "parallel/rebalance.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace tessel::parallel {

Expected<std::vector<int64_t>> proportional_shares(int64_t global_rows,
                                                   const std::vector<double>& throughput) {
  double total = 0.0;
  int64_t taking_part = 0;
  for (size_t r = 0; r < throughput.size(); ++r) {
    if (!std::isfinite(throughput[r]) || throughput[r] < 0)
      return invalid_argument("rank {}'s throughput must be finite and >= 0, got {}", r,
                              throughput[r]);
    total += throughput[r];
    taking_part += throughput[r] > 0 ? 1 : 0;
  }
  if (taking_part == 0) return invalid_argument("no rank has a positive throughput");
  if (global_rows < taking_part)
    return invalid_argument("{} rows cannot give each of {} ranks at least one", global_rows,
                            taking_part);
  const size_t n = throughput.size();
  std::vector<double> ideal(n);
  std::vector<int64_t> shares(n, 0);
  int64_t given = 0;
  for (size_t r = 0; r < n; ++r) {
    if (throughput[r] <= 0) continue;
    ideal[r] = double(global_rows) * throughput[r] / total;
    shares[r] = std::max<int64_t>(1, int64_t(std::floor(ideal[r])));
    given += shares[r];
  }
  // Left over rows go to the largest remainders; rows given twice (the at-least-one rule) come
  // back from the ranks furthest above their ideal share.
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  while (given < global_rows) {
    size_t best = n;
    for (size_t r : order)
      if (throughput[r] > 0 &&
          (best == n || ideal[r] - double(shares[r]) > ideal[best] - double(shares[best])))
        best = r;
    ++shares[best];
    ++given;
  }
  while (given > global_rows) {
    size_t best = n;
    for (size_t r : order)
      if (shares[r] > 1 &&
          (best == n || double(shares[r]) - ideal[r] > double(shares[best]) - ideal[best]))
        best = r;
    --shares[best];
    --given;
  }
  return shares;
}

double predicted_step_seconds(const std::vector<int64_t>& shares,
                              const std::vector<double>& throughput) {
  double slowest = 0.0;
  for (size_t r = 0; r < shares.size() && r < throughput.size(); ++r) {
    if (shares[r] == 0) continue;
    if (throughput[r] <= 0) return std::numeric_limits<double>::infinity();
    slowest = std::max(slowest, double(shares[r]) / throughput[r]);
  }
  return slowest;
}

std::vector<int64_t> even_shares(int64_t global_rows, int world) {
  std::vector<int64_t> shares(size_t(world), global_rows / world);
  for (int64_t r = 0; r < global_rows % world; ++r)
    ++shares[size_t(r)];
  return shares;
}

Expected<Rebalancer> Rebalancer::create(int64_t global_rows, int world, RebalanceOptions options) {
  if (world < 1) return invalid_argument("a job needs at least one rank, got {}", world);
  if (!(options.hysteresis >= 0 && options.hysteresis < 1))
    return invalid_argument("hysteresis must be in [0, 1), got {}", options.hysteresis);
  if (!(options.smoothing > 0 && options.smoothing <= 1))
    return invalid_argument("smoothing must be in (0, 1], got {}", options.smoothing);
  Rebalancer b(global_rows, options);
  b.taking_part_.assign(size_t(world), true);
  for (int r : options.excluded) {
    if (r < 0 || r >= world)
      return invalid_argument("excluded rank {} is not a rank of a job of {}", r, world);
    b.taking_part_[size_t(r)] = false;
  }
  const int64_t active = std::count(b.taking_part_.begin(), b.taking_part_.end(), true);
  if (active == 0) return invalid_argument("every rank of the job is excluded");
  if (global_rows < active)
    return invalid_argument("a global batch of {} rows cannot give each of {} ranks a row",
                            global_rows, active);
  // The even split, over the ranks that take part.
  const std::vector<int64_t> even = even_shares(global_rows, int(active));
  b.shares_.assign(size_t(world), 0);
  b.throughput_.assign(size_t(world), 0.0);
  size_t next = 0;
  for (int r = 0; r < world; ++r)
    if (b.taking_part_[size_t(r)]) b.shares_[size_t(r)] = even[next++];
  return b;
}

Expected<bool> Rebalancer::observe(const std::vector<int64_t>& rows,
                                   const std::vector<double>& seconds) {
  const size_t n = shares_.size();
  if (rows.size() != n || seconds.size() != n)
    return invalid_argument("a measurement needs one (rows, seconds) per rank: {} ranks, got {}", n,
                            rows.size());
  for (size_t r = 0; r < n; ++r) {
    if (!taking_part_[r] || rows[r] == 0) continue;
    if (!(seconds[r] > 0) || !std::isfinite(seconds[r]))
      return invalid_argument("rank {} computed {} rows in {} s: the time must be > 0", r, rows[r],
                              seconds[r]);
    const double measured = double(rows[r]) / seconds[r];
    throughput_[r] = throughput_[r] == 0.0 ? measured
                                           : (1 - options_.smoothing) * throughput_[r] +
                                                 options_.smoothing * measured;
  }
  for (size_t r = 0; r < n; ++r)
    if (taking_part_[r] && throughput_[r] == 0.0) return false;  // not every rank measured yet
  TESSEL_ASSIGN_OR_RETURN(std::vector<int64_t> candidate,
                          proportional_shares(global_rows_, throughput_));
  const double now = predicted_step_seconds(shares_, throughput_);
  const double then = predicted_step_seconds(candidate, throughput_);
  if (candidate == shares_ || !(then < (1.0 - options_.hysteresis) * now)) return false;
  shares_ = std::move(candidate);
  return true;
}

Expected<bool> Rebalancer::exchange(dist::ProcessGroup& group, int64_t rows, double seconds) {
  const size_t n = shares_.size();
  if (size_t(group.size()) != n)
    return invalid_argument("the rebalancer was made for {} ranks, the group has {}", n,
                            group.size());
  const double mine[2] = {double(rows), seconds};
  std::vector<double> all(2 * n);
  TESSEL_ASSIGN_OR_RETURN(dist::Work w,
                          group.all_gather(mine, all.data(), 2, dist::DataType::kFloat64));
  Status s = w.wait();
  if (!s.ok()) return s.with_context("gathering the ranks' throughput");
  std::vector<int64_t> all_rows(n);
  std::vector<double> all_seconds(n);
  for (size_t r = 0; r < n; ++r) {
    all_rows[r] = int64_t(all[2 * r]);
    all_seconds[r] = all[2 * r + 1];
  }
  return observe(all_rows, all_seconds);
}

}  // namespace tessel::parallel
