// The RDP accountant against Opacus (epsilons its RDPAccountant printed for the same sample
// rate, noise multiplier, steps and delta: src/secure/testdata/rdp_reference.json, made by
// tools/pytorch/dp_accountant_reference.py), within 1%; and against the closed form of the
// unsampled Gaussian mechanism, RDP(alpha) = alpha / (2 sigma^2) per step.
#include "secure/rdp_accountant.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

namespace tessel::secure {
namespace {

TEST(RdpAccountant, MatchesOpacusWithinOnePercent) {
  // ctest sets TESSEL_SOURCE_DIR; run by hand, the source tree is where this file was compiled.
  const char* source = std::getenv("TESSEL_SOURCE_DIR");
  const std::filesystem::path root = source
                                         ? std::filesystem::path(source)
                                         : std::filesystem::path(__FILE__).parent_path() / "../..";
  std::ifstream in(root / "src/secure/testdata/rdp_reference.json");
  ASSERT_TRUE(in) << "missing fixture rdp_reference.json";
  const nlohmann::json fixture = nlohmann::json::parse(in);
  ASSERT_GE(fixture["cases"].size(), 8u);
  for (const auto& c : fixture["cases"]) {
    RdpAccountant accountant;
    const int64_t steps = c["steps"].get<int64_t>();
    // Step by step for part of it, then in bulk: composition is a sum either way.
    const int64_t one_by_one = std::min<int64_t>(steps, 50);
    for (int64_t s = 0; s < one_by_one; ++s)
      accountant.step(c["noise_multiplier"].get<double>(), c["sample_rate"].get<double>());
    accountant.step(c["noise_multiplier"].get<double>(), c["sample_rate"].get<double>(),
                    steps - one_by_one);
    const PrivacySpent spent = accountant.spent(c["delta"].get<double>());
    const double want = c["epsilon"].get<double>();
    EXPECT_NEAR(spent.epsilon, want, 0.01 * want) << c.dump();
    EXPECT_EQ(spent.order, c["order"].get<double>()) << c.dump();
    std::printf("q %.5f sigma %.2f steps %6lld delta %g: epsilon %.6f (Opacus %.6f), order %g\n",
                c["sample_rate"].get<double>(), c["noise_multiplier"].get<double>(),
                (long long)steps, c["delta"].get<double>(), spent.epsilon, want, spent.order);
  }
}

TEST(RdpAccountant, UnsampledGaussianIsTheClosedForm) {
  const std::vector<double> orders = {1.5, 2, 8, 32};
  const std::vector<double> rdp = sampled_gaussian_rdp(1.0, 2.0, 10, orders);
  for (size_t k = 0; k < orders.size(); ++k)
    EXPECT_DOUBLE_EQ(rdp[k], 10 * orders[k] / (2 * 4.0));
  // Smaller sampling rates and more noise cost less; more steps cost more.
  const auto eps = [](double q, double sigma, int64_t steps) {
    RdpAccountant a;
    a.step(sigma, q, steps);
    return a.epsilon(1e-5);
  };
  EXPECT_LT(eps(0.01, 1.0, 100), eps(0.02, 1.0, 100));
  EXPECT_LT(eps(0.01, 1.5, 100), eps(0.01, 1.0, 100));
  EXPECT_LT(eps(0.01, 1.0, 100), eps(0.01, 1.0, 200));
}

}  // namespace
}  // namespace tessel::secure
