// PCG32 against the reference implementation's published output, and the permutations built on it.
#include "support/random.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>

namespace tessel {
namespace {

TEST(Pcg32, MatchesReferenceDemoOutput) {
  // pcg32-demo (pcg-c-basic) seeds with pcg32_srandom_r(&rng, 42u, 54u) and prints these.
  Pcg32 rng(42, 54);
  const uint32_t expected[] = {0xa15c02b7, 0x7b47f409, 0xba1d3330,
                               0x83d2f293, 0xbfa4784b, 0xcbed606e};
  for (uint32_t e : expected)
    EXPECT_EQ(rng.next_u32(), e);
}

TEST(Pcg32, StateStringRestoresTheStream) {
  Pcg32 rng(7, 3);
  for (int i = 0; i < 10; ++i)
    rng.next_u32();
  const std::string saved = rng.state_string();
  std::vector<uint32_t> expected;
  for (int i = 0; i < 20; ++i)
    expected.push_back(rng.next_u32());
  Expected<Pcg32> again = Pcg32::from_state_string(saved);
  ASSERT_TRUE(again.ok()) << again.status().to_string();
  for (uint32_t e : expected)
    EXPECT_EQ(again->next_u32(), e);

  for (const char* bad :
       {"", "pcg32:12", "mt:0000000000000000:0000000000000001",
        "pcg32:000000000000000g:0000000000000001", "pcg32:0000000000000000:0000000000000002"}) {
    Expected<Pcg32> parsed = Pcg32::from_state_string(bad);
    ASSERT_FALSE(parsed.ok()) << bad;
    EXPECT_NE(parsed.status().message().find("expected 'pcg32:"), std::string::npos);
  }
}

TEST(Pcg32, BelowIsUniformAndInRange) {
  Pcg32 rng(1, 2);
  std::map<uint32_t, int> counts;
  const int draws = 60000;
  for (int i = 0; i < draws; ++i) {
    const uint32_t r = rng.below(6);
    ASSERT_LT(r, 6u);
    ++counts[r];
  }
  // Each face 10000 expected; the binomial standard deviation is ~91, so 6 sigma is ~550.
  for (auto& [face, count] : counts)
    EXPECT_NEAR(count, draws / 6, 550) << face;
  for (int i = 0; i < 1000; ++i)
    EXPECT_LT(rng.below_u64(uint64_t{1} << 40 | 3), (uint64_t{1} << 40 | 3));
  for (int i = 0; i < 1000; ++i) {
    const float f = rng.next_float();
    EXPECT_GE(f, 0.0f);
    EXPECT_LT(f, 1.0f);
  }
}

TEST(Shuffle, IsAPermutationReproducibleFromTheSeed) {
  Pcg32 a(99, 0), b(99, 0), c(100, 0);
  const std::vector<int64_t> pa = shuffled_indices(1000, a);
  const std::vector<int64_t> pb = shuffled_indices(1000, b);
  const std::vector<int64_t> pc = shuffled_indices(1000, c);
  EXPECT_EQ(pa, pb);
  EXPECT_NE(pa, pc);
  std::vector<int64_t> sorted = pa;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t i = 0; i < 1000; ++i)
    ASSERT_EQ(sorted[i], i);
  int fixed_points = 0;
  for (int64_t i = 0; i < 1000; ++i)
    fixed_points += pa[i] == i;
  EXPECT_LT(fixed_points, 10);  // a uniform permutation has 1 on average
  Pcg32 d(5, 5);
  EXPECT_TRUE(shuffled_indices(0, d).empty());
  EXPECT_EQ(shuffled_indices(1, d), std::vector<int64_t>{0});
}

TEST(Shuffle, EveryOrderOfThreeIsEquallyLikely) {
  Pcg32 rng(3, 4);
  std::map<std::vector<int64_t>, int> counts;
  for (int i = 0; i < 6000; ++i)
    ++counts[shuffled_indices(3, rng)];
  ASSERT_EQ(counts.size(), 6u);
  for (auto& [order, count] : counts)
    EXPECT_NEAR(count, 1000, 180);  // ~6 sigma
}

}  // namespace
}  // namespace tessel
