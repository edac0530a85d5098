// Collectives with ranks as processes: every collective x type x reduction x size on 2, 3, 4
// and 8 processes, send/recv rings and in-place variants, each rank checking its own output
// against testing/collective_check.h (inputs are a function of rank and index; expectations a
// fold over ranks in double or exact integers). The ranks are copies of
// tessel_dist_rank_helper started by launch().
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "dist/launcher.h"
#include "dist/testing/shm_leaks.h"

namespace tessel::dist {
namespace {

LaunchResult run_ranks(int nranks, std::vector<std::string> args,
                       std::vector<std::pair<std::string, std::string>> env = {}) {
  LaunchOptions options;
  options.nranks = nranks;
  options.command = {TESSEL_DIST_RANK_HELPER};
  options.command.insert(options.command.end(), args.begin(), args.end());
  options.capture = true;
  options.deadline_s = 120;  // a hang fails the test instead of stopping the suite
  options.env = std::move(env);
  auto result = launch(options);
  EXPECT_TRUE(result.ok()) << result.status().to_string();
  return result.ok() ? *result : LaunchResult{};
}

void expect_all_ok(const LaunchResult& result, int nranks) {
  ASSERT_EQ(result.ranks.size(), static_cast<size_t>(nranks));
  EXPECT_FALSE(result.deadline_passed);
  for (const RankOutcome& rank : result.ranks) {
    EXPECT_FALSE(rank.failed()) << rank.describe() << "\n" << rank.output;
    EXPECT_NE(rank.output.find("] OK "), std::string::npos) << rank.output;
    EXPECT_EQ(rank.output.find("FAIL"), std::string::npos) << rank.output;
  }
  EXPECT_EQ(result.leaked_segments_removed, 0);
}

class CollectivesOnProcesses : public ::testing::TestWithParam<int> {};

TEST_P(CollectivesOnProcesses, EveryCollectiveTypeReductionAndSize) {
  const int nranks = GetParam();
  auto before = testing::tessel_shm_entries();
  // Sizes 0, 1, 7 elements and 1 MiB + 3 elements (the latter runs the pipelined algorithm;
  // the others the slot one), 740 cases per rank count, plus send/recv rings.
  expect_all_ok(run_ranks(nranks, {"matrix", "0", "1", "7", "1048576+3"}), nranks);
  EXPECT_EQ(testing::leaked_shm_entries(before), std::vector<std::string>{})
      << "shared memory left in /dev/shm";
}

INSTANTIATE_TEST_SUITE_P(Ranks, CollectivesOnProcesses, ::testing::Values(2, 3, 4, 8));

// 64 MiB buffers, sampled: a run over the whole matrix would take minutes on two cores and
// exercises no code path that 1 MiB + 3 does not (both are many pipeline chunks with a ragged
// end). The sample covers every collective once, in place and out of place, the 16-bit types
// whose reduction runs in f32, and each rank count.
TEST(CollectivesOnProcesses, SixtyFourMebibytesSampled) {
  const std::string mib64 = std::to_string(64u << 20);
  expect_all_ok(
      run_ranks(2, {"cases", "all_reduce:f32:sum:16777216", "all_reduce:bf16:avg:33554432:inplace",
                    "reduce_scatter:f32:max:8388608", "all_gather:u8:sum:33554432",
                    "broadcast:f64:sum:8388608", "reduce:i32:prod:16777216"}),
      2);
  expect_all_ok(run_ranks(3, {"cases", "all_reduce:f16:sum:33554432"}), 3);
  expect_all_ok(run_ranks(4, {"cases", "all_reduce:f64:min:8388608",
                              "reduce_scatter:bf16:sum:8388608:inplace"}),
                4);
  expect_all_ok(run_ranks(8, {"cases", "all_reduce:f32:sum:16777216"}), 8);
}

}  // namespace
}  // namespace tessel::dist
