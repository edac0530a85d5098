// Model-guided evolutionary search (see search.h).
#include "tune/search.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>

namespace tessel::tune {

namespace {

// Measured points before the model is trusted; until then points are spread over the space.
constexpr int kSpreadTrials = 4;
// Random points added to each generation's candidates, so the model can steer away from a
// neighbourhood it has exhausted.
constexpr int kImmigrants = 16;
// A failed trial's cost in the model, relative to the worst good one: bad, but finite.
constexpr double kFailurePenalty = 4.0;
// From this trial on, a generation is the best point's unmeasured neighbours only (once they are
// all measured, the point farthest from every measured one): the model ranks a whole space well
// enough to reach the best region, but within it the last few percent are decided by neighbours it
// cannot tell apart. Replayed over nine measured PoCL gemm spaces (72 points each,
// `--compare-exhaustive --reuse`), the worst of 10 seeds was within 95% of the exhaustive best in 4
// of them without this and 7 with it (the mean of those worst ratios 0.924 -> 0.964); starting at
// trial 18-19 gave 5-6, 20-22 gave 7.
constexpr int kLocalAfterTrials = 20;

// True when `p` is one step away from `center` in at most two parameters.
bool is_neighbour(const std::vector<int>& p, const std::vector<int>& center) {
  int steps = 0;
  for (size_t k = 0; k < p.size(); ++k) {
    const int d = std::abs(p[k] - center[k]);
    if (d > 1) return false;
    steps += d > 0;
  }
  return steps <= 2;
}

// Solves (X^T X + lambda I) w = X^T y by Gaussian elimination with partial pivoting.
std::vector<double> ridge(const std::vector<std::vector<double>>& x, const std::vector<double>& y,
                          double lambda) {
  const size_t d = x.empty() ? 0 : x[0].size();
  std::vector<std::vector<double>> a(d, std::vector<double>(d + 1, 0.0));
  for (size_t r = 0; r < x.size(); ++r)
    for (size_t i = 0; i < d; ++i) {
      for (size_t j = 0; j < d; ++j)
        a[i][j] += x[r][i] * x[r][j];
      a[i][d] += x[r][i] * y[r];
    }
  for (size_t i = 1; i < d; ++i)  // the intercept (column 0) is not shrunk
    a[i][i] += lambda;
  a[0][0] += 1e-9;
  for (size_t c = 0; c < d; ++c) {
    size_t pivot = c;
    for (size_t r = c + 1; r < d; ++r)
      if (std::fabs(a[r][c]) > std::fabs(a[pivot][c])) pivot = r;
    std::swap(a[c], a[pivot]);
    if (std::fabs(a[c][c]) < 1e-12) continue;
    for (size_t r = 0; r < d; ++r) {
      if (r == c) continue;
      const double f = a[r][c] / a[c][c];
      for (size_t k = c; k <= d; ++k)
        a[r][k] -= f * a[c][k];
    }
  }
  std::vector<double> w(d, 0.0);
  for (size_t i = 0; i < d; ++i)
    w[i] = std::fabs(a[i][i]) < 1e-12 ? 0.0 : a[i][d] / a[i][i];
  return w;
}

}  // namespace

Search::Search(std::vector<std::vector<int>> coords, std::vector<std::vector<double>> features,
               SearchOptions options)
    : coords_(std::move(coords)),
      features_(std::move(features)),
      options_(options),
      rng_(options.seed),
      is_measured_(coords_.size(), 0) {}

std::vector<double> Search::model_inputs(int point) const {
  const std::vector<double>& f = features_[point];
  std::vector<double> in{1.0};
  in.insert(in.end(), f.begin(), f.end());
  for (size_t i = 0; i < f.size(); ++i)
    for (size_t j = i; j < f.size(); ++j)
      in.push_back(f[i] * f[j]);
  return in;
}

void Search::fit() {
  double worst = 0;
  for (const auto& [p, cost] : measured_)
    if (std::isfinite(cost)) worst = std::max(worst, cost);
  std::vector<std::vector<double>> x;
  std::vector<double> y;
  for (const auto& [p, cost] : measured_) {
    x.push_back(model_inputs(p));
    y.push_back(std::log(std::isfinite(cost) ? cost : worst * kFailurePenalty + 1e-30));
  }
  weights_ = ridge(x, y, 1e-2);
}

double Search::predict(int point) const {
  const std::vector<double> in = model_inputs(point);
  double s = 0;
  for (size_t i = 0; i < in.size() && i < weights_.size(); ++i)
    s += in[i] * weights_[i];
  return s;
}

int Search::farthest_unmeasured() {
  int best = -1;
  double best_distance = -1;
  std::uniform_real_distribution<double> jitter(0.0, 1e-3);
  for (size_t p = 0; p < coords_.size(); ++p) {
    if (is_measured_[p]) continue;
    double nearest = std::numeric_limits<double>::infinity();
    for (const auto& [q, cost] : measured_) {
      double d = 0;
      for (size_t k = 0; k < coords_[p].size(); ++k)
        d += std::abs(coords_[p][k] - coords_[q][k]);
      nearest = std::min(nearest, d);
    }
    if (measured_.empty()) nearest = 0;
    nearest += jitter(rng_);
    if (nearest > best_distance) {
      best_distance = nearest;
      best = static_cast<int>(p);
    }
  }
  return best;
}

void Search::add_immigrants(std::set<int>* candidates) {
  const int n = static_cast<int>(coords_.size());
  std::uniform_int_distribution<int> any(0, n - 1);
  for (int i = 0; i < kImmigrants * 4 && static_cast<int>(candidates->size()) < n; ++i) {
    const int p = any(rng_);
    if (!is_measured_[p]) candidates->insert(p);
    if (i >= kImmigrants && !candidates->empty()) break;
  }
}

int Search::next() {
  const int n = static_cast<int>(coords_.size());
  if (trials() >= n) return -1;
  if (trials() == 0 && options_.first >= 0 && options_.first < n) return options_.first;
  if (trials() < kSpreadTrials) return farthest_unmeasured();
  fit();
  // This generation's candidates: every unmeasured neighbour (one step in one or two
  // parameters) of the best measured points, and random immigrants; late in the search, the
  // best point's neighbours alone.
  std::vector<std::pair<double, int>> ranked_measured;
  for (const auto& [p, cost] : measured_)
    ranked_measured.push_back({cost, p});
  std::sort(ranked_measured.begin(), ranked_measured.end());
  std::set<int> candidates;
  if (trials() >= kLocalAfterTrials) {
    for (int p = 0; p < n; ++p)
      if (!is_measured_[p] && is_neighbour(coords_[p], coords_[ranked_measured[0].second]))
        candidates.insert(p);
  } else {
    const size_t elites = std::min<size_t>(4, ranked_measured.size());
    for (size_t e = 0; e < elites; ++e)
      for (int p = 0; p < n; ++p)
        if (!is_measured_[p] && is_neighbour(coords_[p], coords_[ranked_measured[e].second]))
          candidates.insert(p);
    add_immigrants(&candidates);
  }
  // A best point whose neighbourhood is measured is a local optimum: look far from everything.
  if (candidates.empty()) return farthest_unmeasured();
  int pick = -1;
  double pick_score = std::numeric_limits<double>::infinity();
  for (int p : candidates) {
    const double score = predict(p);
    if (score < pick_score) {
      pick_score = score;
      pick = p;
    }
  }
  return pick;
}

void Search::report(int point, double cost) {
  if (point < 0 || point >= static_cast<int>(coords_.size()) || is_measured_[point]) return;
  is_measured_[point] = 1;
  measured_.push_back({point, cost});
  if (std::isfinite(cost) && cost < best_cost_ * 0.99) {
    since_improvement_ = 0;
  } else {
    ++since_improvement_;
  }
  if (std::isfinite(cost) && cost < best_cost_) {
    best_cost_ = cost;
    best_ = point;
  }
}

bool Search::done() const {
  if (trials() >= static_cast<int>(coords_.size())) return true;
  return options_.patience > 0 && trials() >= options_.min_trials &&
         since_improvement_ >= options_.patience;
}

double median_of(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

bool confirmed_faster(std::vector<double> ratios, int rounds, double margin) {
  if (ratios.empty() || static_cast<int>(ratios.size()) != rounds) return false;
  for (double r : ratios)
    if (!(r > 0 && r < 1.0)) return false;
  return median_of(ratios) <= 1.0 - margin;
}

std::vector<int> random_order(int points, uint64_t seed) {
  std::vector<int> order(points);
  std::iota(order.begin(), order.end(), 0);
  std::mt19937_64 rng(seed);
  std::shuffle(order.begin(), order.end(), rng);
  return order;
}

}  // namespace tessel::tune
