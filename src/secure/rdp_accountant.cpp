// The sampled Gaussian mechanism's RDP (see rdp_accountant.h), in log space throughout.
#include "secure/rdp_accountant.h"

#include <cmath>
#include <limits>

#include "support/status.h"

namespace tessel::secure {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// log(e^a + e^b) and log(e^a - e^b) (a >= b) without overflow.
double log_add(double a, double b) {
  if (a == -kInf) return b;
  if (b == -kInf) return a;
  const double hi = std::max(a, b), lo = std::min(a, b);
  return hi + std::log1p(std::exp(lo - hi));
}
double log_sub(double a, double b) {
  if (b == -kInf) return a;
  if (a == b) return -kInf;
  TESSEL_CHECK(a > b, "log_sub of a smaller term");
  return a + std::log1p(-std::exp(b - a));
}

// log(erfc(x)), also where erfc underflows (its asymptotic series).
double log_erfc(double x) {
  if (x < 25.0) return std::log(std::erfc(x));
  const double x2 = x * x;
  return -x2 - std::log(x) - 0.5 * std::log(M_PI) +
         std::log1p(-1.0 / (2 * x2) + 3.0 / (4 * x2 * x2) - 15.0 / (8 * x2 * x2 * x2));
}

double log_a_integer(double q, double sigma, int64_t alpha) {
  double log_a = -kInf;
  for (int64_t i = 0; i <= alpha; ++i) {
    const double log_binom = std::lgamma(double(alpha) + 1) - std::lgamma(double(i) + 1) -
                             std::lgamma(double(alpha - i) + 1);
    const double log_coef =
        log_binom + double(i) * std::log(q) + double(alpha - i) * std::log1p(-q);
    log_a = log_add(log_a, log_coef + double(i * i - i) / (2 * sigma * sigma));
  }
  return log_a;
}

double log_a_fractional(double q, double sigma, double alpha) {
  double log_a0 = -kInf, log_a1 = -kInf;
  const double z0 = sigma * sigma * std::log(1 / q - 1) + 0.5;
  double coef = 1.0;  // the generalised binomial coefficient (alpha choose i)
  for (int64_t k = 0;; ++k) {
    const double i = double(k), j = alpha - i;
    const double log_coef = std::log(std::abs(coef));
    const double log_t0 = log_coef + i * std::log(q) + j * std::log1p(-q);
    const double log_t1 = log_coef + j * std::log(q) + i * std::log1p(-q);
    const double log_e0 = std::log(0.5) + log_erfc((i - z0) / (M_SQRT2 * sigma));
    const double log_e1 = std::log(0.5) + log_erfc((z0 - j) / (M_SQRT2 * sigma));
    const double log_s0 = log_t0 + (i * i - i) / (2 * sigma * sigma) + log_e0;
    const double log_s1 = log_t1 + (j * j - j) / (2 * sigma * sigma) + log_e1;
    if (coef > 0) {
      log_a0 = log_add(log_a0, log_s0);
      log_a1 = log_add(log_a1, log_s1);
    } else {
      log_a0 = log_sub(log_a0, log_s0);
      log_a1 = log_sub(log_a1, log_s1);
    }
    if (std::max(log_s0, log_s1) < -30) break;
    coef *= (alpha - i) / (i + 1);
  }
  return log_add(log_a0, log_a1);
}

double rdp_one_step(double q, double sigma, double alpha) {
  if (q == 0) return 0;
  if (sigma == 0) return kInf;
  if (q == 1.0) return alpha / (2 * sigma * sigma);
  if (std::isinf(alpha)) return kInf;
  const bool integer = alpha == std::floor(alpha);
  const double log_a =
      integer ? log_a_integer(q, sigma, int64_t(alpha)) : log_a_fractional(q, sigma, alpha);
  return log_a / (alpha - 1);
}

}  // namespace

std::vector<double> default_rdp_orders() {
  std::vector<double> orders;
  for (int x = 1; x < 100; ++x)
    orders.push_back(1 + x / 10.0);
  for (int a = 12; a < 64; ++a)
    orders.push_back(a);
  return orders;
}

std::vector<double> sampled_gaussian_rdp(double sample_rate, double noise_multiplier, int64_t steps,
                                         const std::vector<double>& orders) {
  std::vector<double> rdp;
  rdp.reserve(orders.size());
  for (double alpha : orders)
    rdp.push_back(rdp_one_step(sample_rate, noise_multiplier, alpha) * double(steps));
  return rdp;
}

PrivacySpent rdp_to_epsilon(const std::vector<double>& orders, const std::vector<double>& rdp,
                            double delta) {
  PrivacySpent best{kInf, 0.0};
  for (size_t k = 0; k < orders.size(); ++k) {
    const double a = orders[k];
    const double eps = rdp[k] - (std::log(delta) + std::log(a)) / (a - 1) + std::log((a - 1) / a);
    if (!std::isnan(eps) && eps < best.epsilon) best = {eps, a};
  }
  return best;
}

RdpAccountant::RdpAccountant(std::vector<double> orders)
    : orders_(std::move(orders)), rdp_(orders_.size(), 0.0) {}

void RdpAccountant::step(double noise_multiplier, double sample_rate, int64_t steps) {
  if (noise_multiplier != last_noise_ || sample_rate != last_rate_) {
    last_rdp_ = sampled_gaussian_rdp(sample_rate, noise_multiplier, 1, orders_);
    last_noise_ = noise_multiplier;
    last_rate_ = sample_rate;
  }
  for (size_t k = 0; k < rdp_.size(); ++k)
    rdp_[k] += last_rdp_[k] * double(steps);
  steps_ += steps;
}

PrivacySpent RdpAccountant::spent(double delta) const {
  return rdp_to_epsilon(orders_, rdp_, delta);
}
double RdpAccountant::epsilon(double delta) const {
  return spent(delta).epsilon;
}

}  // namespace tessel::secure
