// The privacy cost of DP-SGD: Rényi differential privacy of the sampled Gaussian mechanism
// (Mironov, Talwar and Zhang, "Rényi Differential Privacy of the Sampled Gaussian Mechanism",
// 2019), composed over steps and converted to (epsilon, delta) as Opacus and TF-Privacy do.
//
//   RdpAccountant accountant;
//   accountant.step(/*noise_multiplier=*/1.1, /*sample_rate=*/256.0 / 60000);   // every step
//   double epsilon = accountant.epsilon(/*delta=*/1e-5);
//
// For each order alpha the RDP of one step is log(A_alpha) / (alpha - 1), where A_alpha is the
// alpha-th moment of the mixture's likelihood ratio: a finite binomial sum for integer alpha, the
// two erfc-weighted series of the paper's Section 3.3 for fractional alpha (summed until the
// terms fall below e^-30). Steps add. epsilon(delta) minimises, over the orders,
// rdp - (log delta + log alpha) / (alpha - 1) + log((alpha - 1) / alpha) (Balle et al. 2020,
// the conversion Opacus uses). The default orders are Opacus's: 1.1, 1.2, ..., 10.9, 12, ..., 63.
#pragma once

#include <cstdint>
#include <vector>

namespace tessel::secure {

// The RDP of `steps` steps of the sampled Gaussian mechanism at each order.
std::vector<double> sampled_gaussian_rdp(double sample_rate, double noise_multiplier, int64_t steps,
                                         const std::vector<double>& orders);
// The smallest epsilon over the orders for this delta, and the order that gives it.
struct PrivacySpent {
  double epsilon;
  double order;
};
PrivacySpent rdp_to_epsilon(const std::vector<double>& orders, const std::vector<double>& rdp,
                            double delta);
std::vector<double> default_rdp_orders();

class RdpAccountant {
 public:
  explicit RdpAccountant(std::vector<double> orders = default_rdp_orders());
  // One step (or `steps` steps) of sampling at `sample_rate` with noise of standard deviation
  // noise_multiplier x the clipping norm.
  void step(double noise_multiplier, double sample_rate, int64_t steps = 1);
  double epsilon(double delta) const;
  PrivacySpent spent(double delta) const;
  int64_t steps() const { return steps_; }

 private:
  std::vector<double> orders_;
  std::vector<double> rdp_;  // summed over the steps so far
  int64_t steps_ = 0;
  // Consecutive steps with the same parameters share one RDP evaluation.
  double last_noise_ = -1, last_rate_ = -1;
  std::vector<double> last_rdp_;
};

}  // namespace tessel::secure
