// The CPU target's tile budget: the L2 per core, but never below 1 MiB, so that the kernels'
// CPU defaults (sized for a 1 MiB L2) compile on a core with less (a Zen 3 has 512 KiB); and a
// block over the budget is still an error naming it (errors_test.cpp, TileTooLargeForCpu).
#include "tile/target.h"

#include <gtest/gtest.h>

namespace tessel::tile {
namespace {

TEST(Target, TheCpuTileBudgetIsTheL2ButNeverLessThanOneMiB) {
  EXPECT_EQ(cpu_tile_budget(512 << 10), 1 << 20);  // Zen 3
  EXPECT_EQ(cpu_tile_budget(1 << 20), 1 << 20);    // Zen 4
  EXPECT_EQ(cpu_tile_budget(2 << 20), 2 << 20);    // Sapphire Rapids
  EXPECT_EQ(cpu_tile_budget(0), 1 << 20);          // unknown
  Expected<Target> host = target_from_name("cpu");
  ASSERT_TRUE(host.ok());
  EXPECT_GE(host->fast_memory_bytes, 1 << 20);
}

}  // namespace
}  // namespace tessel::tile
