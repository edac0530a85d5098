// The step-time model against closed forms worked by hand, and the link parser.
#include "plan/step_model.h"

#include <gtest/gtest.h>

namespace tessel::plan {
namespace {

TEST(StepModel, ParsesLinks) {
  Link a = parse_link("25GB/s,5us").value();
  EXPECT_DOUBLE_EQ(a.bytes_per_s, 25e9);
  EXPECT_DOUBLE_EQ(a.latency_s, 5e-6);
  Link b = parse_link("200Gbit/s, 1.5ms").value();
  EXPECT_DOUBLE_EQ(b.bytes_per_s, 25e9);
  EXPECT_DOUBLE_EQ(b.latency_s, 1.5e-3);
  Link c = parse_link("100Mbit/s").value();
  EXPECT_DOUBLE_EQ(c.bytes_per_s, 12.5e6);
  EXPECT_DOUBLE_EQ(c.latency_s, 0);
  EXPECT_FALSE(parse_link("fast").ok());
  EXPECT_FALSE(parse_link("10GB/s,soon").ok());
  EXPECT_FALSE(parse_link("-1GB/s").ok());
  EXPECT_NE(parse_link("3 furlongs").status().message().find("3 furlongs"), std::string::npos);
}

// 1 MB/s and 1 ms links make the arithmetic readable: S bytes take S us of bandwidth time.
constexpr Link kLink{.bytes_per_s = 1e6, .latency_s = 1e-3};

TEST(StepModel, AllReduceCostsFollowTheAlgorithms) {
  Network ring{.ranks = 4, .link = kLink, .algorithm = Algorithm::kRing, .check_calls = false};
  // 2 (p-1) alpha + 2 (p-1)/p S beta = 6 ms + 1.5 * 1000 us.
  EXPECT_NEAR(all_reduce_seconds(1000, ring), 6e-3 + 1.5e-3, 1e-12);
  Network doubling = ring;
  doubling.algorithm = Algorithm::kDoubling;
  doubling.ranks = 5;  // ceil(log2 5) = 3 rounds of a whole buffer
  EXPECT_NEAR(all_reduce_seconds(1000, doubling), 3 * (1e-3 + 1e-3), 1e-12);
  Network hier = ring;
  hier.algorithm = Algorithm::kHierarchical;
  hier.ranks = 8;
  hier.ranks_per_machine = 4;
  hier.local = {.bytes_per_s = 1e9, .latency_s = 1e-6};
  // Inside: 2 (1 us + 1 us); between 2 machines: ring of 2 = 2 ms + 1000 us.
  EXPECT_NEAR(all_reduce_seconds(1000, hier), 4e-6 + 2e-3 + 1e-3, 1e-12);
  Network one = ring;
  one.ranks = 1;
  EXPECT_EQ(all_reduce_seconds(1000, one), 0);
  // The descriptor check: one latency per doubling round.
  ring.check_calls = true;
  EXPECT_NEAR(all_reduce_seconds(1000, ring), 2e-3 + 6e-3 + 1.5e-3, 1e-12);
}

TEST(StepModel, AutoPicksWhatOpenMpisNonBlockingAllReducePicks) {
  Network n{.ranks = 2, .link = kLink};
  EXPECT_EQ(algorithm_for(1 << 20, n), Algorithm::kDoubling);  // fewer than 4 ranks
  n.ranks = 4;
  EXPECT_EQ(algorithm_for(1000, n), Algorithm::kDoubling);  // under 64 KiB
  EXPECT_EQ(algorithm_for(1 << 20, n), Algorithm::kRing);
}

TEST(StepModel, OverlapHidesWhatBackwardCovers) {
  // Backward 10 ms; bucket A (1000 B) ready at 2 ms, bucket B (3000 B) at 10 ms. Ring of 2
  // ranks without check: S beta + 2 alpha = 1 ms + 2 ms for A, 3 ms + 2 ms for B. The optimizer
  // (1 ms) updates A (0.25 ms, by bytes) once A is reduced, then B (0.75 ms) once B is.
  ComputeProfile profile{.forward_s = 5e-3,
                         .backward_s = 10e-3,
                         .optimizer_s = 1e-3,
                         .buckets = {{1000, 2e-3}, {3000, 10e-3}}};
  Network n{.ranks = 2, .link = kLink, .algorithm = Algorithm::kRing, .check_calls = false};
  StepPrediction off = predict_step(profile, n, false);
  EXPECT_NEAR(off.compute_s, 16e-3, 1e-12);
  EXPECT_NEAR(off.comm_s, 8e-3, 1e-12);
  // A 10..13 ms, its update 13..13.25 while B runs 13..18, B's update 18..18.75.
  EXPECT_NEAR(off.step_s, 5e-3 + 18.75e-3, 1e-12);
  EXPECT_NEAR(off.exposed_s, 7.75e-3, 1e-12);
  StepPrediction on = predict_step(profile, n, true);
  // A 2..5 ms, hidden; its update 10..10.25; B 10..15, its update 15..15.75.
  EXPECT_NEAR(on.step_s, 5e-3 + 15.75e-3, 1e-12);
  EXPECT_NEAR(on.exposed_s, 4.75e-3, 1e-12);
  EXPECT_NEAR(on.overhead(), 4.75 / 20.75, 1e-12);
  // A late first bucket holds up the next: A 8..11 ms, B 11..16 ms.
  profile.buckets[0].ready_s = 8e-3;
  EXPECT_NEAR(predict_step(profile, n, true).exposed_s, 5.75e-3, 1e-12);
  // A device twice as fast halves compute and readiness, not communication: A 4..7 ms, B 7..12
  // ms, backward ends at 5, updates 7..7.125 and 12..12.375.
  StepPrediction fast = predict_step(scaled(profile, 2), n, true);
  EXPECT_NEAR(fast.compute_s, 8e-3, 1e-12);
  EXPECT_NEAR(fast.exposed_s, 6.875e-3, 1e-12);
}

TEST(StepModel, SharedCoresSlowComputeAndCommunicationSlowsItMore) {
  // 4 ranks on 2 cores: compute at half speed (forward 1 -> 2 ms, backward 4 -> 8 ms). While a
  // collective runs, the communication threads (share 0.5) make 6 runnable threads on 2 cores:
  // 3x instead of 2x, so compute advances at 2/3 of its contended rate.
  const Contention c{.ranks = 4, .cores = 2, .comm_share = 0.5};
  EXPECT_DOUBLE_EQ(c.compute_slowdown(), 2);
  EXPECT_DOUBLE_EQ(c.compute_slowdown_in_comm(), 3);
  ComputeProfile profile{
      .forward_s = 1e-3, .backward_s = 4e-3, .optimizer_s = 0, .buckets = {{1000, 1e-3}}};
  Network n{.ranks = 2, .link = kLink, .algorithm = Algorithm::kRing, .check_calls = false};
  // Overlap: the bucket is ready after 2 ms of contended work, reduces 2..5 ms (3 ms); in those
  // 3 ms backward does 2 ms of its work, then the last 4 ms alone: backward ends at 9 ms.
  StepPrediction on = predict_step(profile, n, true, c);
  EXPECT_NEAR(on.backward_s, 9e-3, 1e-12);
  EXPECT_NEAR(on.step_s, 2e-3 + 9e-3, 1e-12);
  EXPECT_NEAR(on.exposed_s, 0, 1e-12);
  // Without overlap: backward 8 ms, then the all-reduce 8..11 ms.
  StepPrediction off = predict_step(profile, n, false, c);
  EXPECT_NEAR(off.backward_s, 8e-3, 1e-12);
  EXPECT_NEAR(off.step_s, 2e-3 + 11e-3, 1e-12);
  EXPECT_NEAR(off.exposed_s, 3e-3, 1e-12);
  // Ranks that fit their cores compute at full speed, communication or not.
  const Contention roomy{.ranks = 2, .cores = 8, .comm_share = 1};
  EXPECT_NEAR(predict_step(profile, n, true, roomy).backward_s, 4e-3, 1e-12);
}

TEST(StepModel, ACollectiveBesideBackwardCanProgressSlower) {
  // Bucket A (5000 B: 7 ms) ready at 2 ms, B (3000 B: 5 ms) at 10 ms, backward 10 ms, optimizer
  // 1 ms split 5:3 by bytes. Alone (eta = 1): A 2..9, B 10..15, updates 10..10.625, 15..15.375.
  ComputeProfile profile{.forward_s = 5e-3,
                         .backward_s = 10e-3,
                         .optimizer_s = 1e-3,
                         .buckets = {{5000, 2e-3}, {3000, 10e-3}}};
  Network n{.ranks = 2, .link = kLink, .algorithm = Algorithm::kRing, .check_calls = false};
  EXPECT_NEAR(predict_step(profile, n, true).step_s, 5e-3 + 15.375e-3, 1e-12);
  // At half speed beside backward, A does 4 ms of its 7 by 10 ms and ends at 13; B 13..18.
  const Contention c{.comm_rate_in_compute = 0.5};
  StepPrediction slow = predict_step(profile, n, true, c);
  EXPECT_NEAR(slow.backward_s, 10e-3, 1e-12);
  EXPECT_NEAR(slow.step_s, 5e-3 + 18.375e-3, 1e-12);
  EXPECT_NEAR(slow.exposed_s, 18.375e-3 - 10e-3 - 1e-3, 1e-12);
  // Without overlap nothing runs beside backward: eta changes nothing.
  EXPECT_NEAR(predict_step(profile, n, false, c).step_s, predict_step(profile, n, false).step_s,
              1e-12);
}

TEST(StepModel, FitsTheLinkThatExplainsAllReducesOfSeveralSizes) {
  // Times made by the model from a known link come back to that link, for each algorithm the
  // sizes fall under (4 ranks: doubling below 64 KiB, ring above).
  for (int ranks : {2, 4, 16}) {
    Network n{.ranks = ranks, .link = {.bytes_per_s = 3e6, .latency_s = 700e-6}};
    std::vector<std::pair<double, double>> timings;
    for (double bytes : {8.0, 16384.0, 65536.0, 262144.0, 1048576.0})
      timings.push_back({bytes, all_reduce_seconds(bytes, n)});
    Link fitted = fit_link(n, timings).value();
    EXPECT_NEAR(fitted.bytes_per_s, 3e6, 1e-3) << ranks;
    EXPECT_NEAR(fitted.latency_s, 700e-6, 1e-12) << ranks;
    // 10% noise either way on alternate sizes moves the fit by about that much, not more.
    for (size_t i = 0; i < timings.size(); ++i)
      timings[i].second *= i % 2 ? 1.1 : 0.9;
    Link noisy = fit_link(n, timings).value();
    EXPECT_NEAR(noisy.bytes_per_s, 3e6, 0.2 * 3e6) << ranks;
  }
  Network n{.ranks = 2, .link = {}};
  EXPECT_FALSE(fit_link(n, {{8, 1.0}, {1 << 19, 0.5}}).ok());  // more bytes in less time
}

}  // namespace
}  // namespace tessel::plan
