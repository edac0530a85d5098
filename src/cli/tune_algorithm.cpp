// Timing the algorithms of one choice point against each other (see tune_algorithm.h).
#include "cli/tune_algorithm.h"

#include <algorithm>
#include <chrono>
#include <functional>

namespace tessel::cli {

namespace {

using Clock = std::chrono::steady_clock;

// Rounds: at least kMinRounds, then until kRoundSeconds of rounds have run, at most kMaxRounds.
constexpr int kMinRounds = 7;
constexpr int kMaxRounds = 28;
constexpr double kRoundSeconds = 1.0;
constexpr double kMargin = 0.97;
constexpr double kFasterShare = 0.8;

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t h = v.size() / 2;
  return v.size() % 2 ? v[h] : 0.5 * (v[h - 1] + v[h]);
}

}  // namespace

std::string algorithm_sizes_text(const ops::AlgorithmLaunch& launch) {
  std::string text;
  const ops::AlgorithmPoint& p = *launch.point;
  std::vector<std::string> names = p.shape_names;
  names.insert(names.end(), p.fixed_names.begin(), p.fixed_names.end());
  for (size_t i = 0; i < launch.sizes.size() && i < names.size(); ++i) {
    if (!text.empty()) text += ' ';
    text += names[i];
    text += '=';
    text += std::to_string(launch.sizes[i]);
  }
  return text;
}

Expected<AlgorithmOutcome> tune_algorithm(const ops::AlgorithmLaunch& launch, tune::TuneDb* db,
                                          std::FILE* progress) {
  const ops::AlgorithmPoint& point = *launch.point;
  AlgorithmOutcome out;
  out.launch = launch;
  out.rule = launch.rule;
  out.chosen = launch.rule;
  out.key = ops::algorithm_key(point, launch.device, launch.dtype, launch.sizes);
  // The rule first, then the other algorithms that apply; each run once untimed (compiles,
  // first-touch of its buffers).
  std::vector<std::string> order{launch.rule};
  for (const std::string& a : point.algorithms)
    if (a != launch.rule && point.applies(a, launch.device, launch.sizes)) order.push_back(a);
  std::vector<std::function<Status()>> runners;
  for (const std::string& a : order) {
    AlgorithmTiming t;
    t.algorithm = a;
    Expected<std::function<Status()>> runner =
        point.make_runner(a, launch.device, launch.dtype, launch.sizes);
    Status warm = runner.ok() ? (*runner)() : runner.status();
    if (warm.ok()) warm = launch.device->synchronize();
    if (!warm.ok()) {
      if (a == launch.rule) return warm.with_context("{} with its rule, {}", point.name, a);
      t.error = warm.message();
    }
    out.timings.push_back(t);
    runners.push_back(warm.ok() ? *runner : std::function<Status()>());
  }
  // Rounds: every runnable algorithm once, in an order that rotates, so none always runs first.
  std::vector<std::vector<double>> seconds(order.size());
  const Clock::time_point start = Clock::now();
  for (int round = 0; round < kMaxRounds; ++round) {
    if (round >= kMinRounds &&
        std::chrono::duration<double>(Clock::now() - start).count() >= kRoundSeconds)
      break;
    for (size_t j = 0; j < order.size(); ++j) {
      const size_t i = (j + static_cast<size_t>(round)) % order.size();
      if (!runners[i]) continue;
      const Clock::time_point t0 = Clock::now();
      Status s = runners[i]();
      if (s.ok()) s = launch.device->synchronize();
      if (!s.ok()) return s.with_context("{} with {}", point.name, order[i]);
      seconds[i].push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    }
    ++out.rounds;
  }
  // Each alternative against the rule, round by round.
  double best_ratio = kMargin;
  for (size_t i = 0; i < order.size(); ++i) {
    AlgorithmTiming& t = out.timings[i];
    if (!t.error.empty()) continue;
    t.median_seconds = median(seconds[i]);
    std::vector<double> ratios;
    int faster = 0;
    for (size_t r = 0; r < seconds[i].size(); ++r) {
      ratios.push_back(seconds[i][r] / seconds[0][r]);
      if (seconds[i][r] < seconds[0][r]) ++faster;
    }
    t.median_ratio = median(ratios);
    t.faster_share = ratios.empty() ? 0 : double(faster) / double(ratios.size());
    if (i > 0 && t.median_ratio <= best_ratio && t.faster_share >= kFasterShare) {
      best_ratio = t.median_ratio;
      out.chosen = t.algorithm;
    }
  }
  if (db != nullptr) {
    std::vector<tune::Trial> trials;
    for (const AlgorithmTiming& t : out.timings) {
      tune::Trial trial{out.key, ops::algorithm_params(t.algorithm), "ok", t.median_seconds, ""};
      if (!t.error.empty()) {
        trial.status = "crash";
        trial.detail = t.error;
      } else {
        char detail[96];
        std::snprintf(detail, sizeof detail, "%.3fx the rule (%s), faster in %.0f%% of %d rounds",
                      t.median_ratio, out.rule.c_str(), t.faster_share * 100, out.rounds);
        trial.detail = detail;
      }
      trials.push_back(trial);
    }
    TESSEL_TRY(db->record_all(trials));
    for (tune::Trial& t : trials) {
      if (t.params != ops::algorithm_params(out.chosen)) continue;
      t.detail = std::string(tune::kChosenPrefix) + " " + t.detail;
      TESSEL_TRY(db->choose(t));
    }
  }
  if (progress != nullptr) {
    std::fprintf(progress, "%s %s %s:", point.name.c_str(), out.key.dtype.c_str(),
                 algorithm_sizes_text(launch).c_str());
    for (const AlgorithmTiming& t : out.timings) {
      if (t.error.empty())
        std::fprintf(progress, " %s %.3f ms (%.2fx)", t.algorithm.c_str(), t.median_seconds * 1e3,
                     t.median_ratio);
      else
        std::fprintf(progress, " %s failed", t.algorithm.c_str());
    }
    std::fprintf(progress, " -> %s%s\n", out.chosen.c_str(),
                 out.chosen == out.rule ? " (the rule)" : "");
  }
  return out;
}

}  // namespace tessel::cli
