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
  // ranks without check: S beta + 2 alpha = 1 ms + 2 ms for A, 3 ms + 2 ms for B.
  ComputeProfile profile{.forward_s = 5e-3,
                         .backward_s = 10e-3,
                         .optimizer_s = 1e-3,
                         .buckets = {{1000, 2e-3}, {3000, 10e-3}}};
  Network n{.ranks = 2, .link = kLink, .algorithm = Algorithm::kRing, .check_calls = false};
  StepPrediction off = predict_step(profile, n, false);
  EXPECT_NEAR(off.compute_s, 16e-3, 1e-12);
  EXPECT_NEAR(off.comm_s, 8e-3, 1e-12);
  EXPECT_NEAR(off.exposed_s, 8e-3, 1e-12);  // all of it after backward
  EXPECT_NEAR(off.step_s, 24e-3, 1e-12);
  StepPrediction on = predict_step(profile, n, true);
  EXPECT_NEAR(on.exposed_s, 5e-3, 1e-12);  // A ends at 5 ms, hidden; B runs 10..15 ms
  EXPECT_NEAR(on.step_s, 21e-3, 1e-12);
  EXPECT_NEAR(on.overhead(), 5.0 / 21.0, 1e-12);
  // A late first bucket holds up the next: A 8..11 ms, B 11..16 ms.
  profile.buckets[0].ready_s = 8e-3;
  EXPECT_NEAR(predict_step(profile, n, true).exposed_s, 6e-3, 1e-12);
  // A device twice as fast halves compute and readiness, not communication.
  StepPrediction fast = predict_step(scaled(profile, 2), n, true);
  EXPECT_NEAR(fast.compute_s, 8e-3, 1e-12);
  EXPECT_NEAR(fast.exposed_s, 7e-3, 1e-12);  // A 4..7 ms, B 7..12 ms; backward ends at 5
}

}  // namespace
}  // namespace tessel::plan
