// Faults with ranks as processes: a rank killed with SIGKILL in the middle of an all-reduce, a
// rank that stops (SIGSTOP), one that passes a different count, one that leaves or aborts, one
// that never joins. Each test asserts the result code and message every other rank got, how
// long it took, that the next call fails too, and that nothing is left in /dev/shm.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "dist/launcher.h"
#include "dist/testing/shm_leaks.h"
#include "dist/tessel_comm.h"

namespace tessel::dist {
namespace {

// What a surviving rank printed (rank_helper.cpp's RESULT and MESSAGE lines).
struct Report {
  int result = -1;
  uint64_t at_ns = 0;
  int next = -1;
  double next_s = 0;
  std::string message;
};

std::map<int, Report> reports(const LaunchResult& launched) {
  std::map<int, Report> out;
  for (const RankOutcome& rank : launched.ranks) {
    std::istringstream lines(rank.output);
    std::string line;
    while (std::getline(lines, line)) {
      size_t at = line.find("RESULT ");
      if (at != std::string::npos) {
        Report& r = out[rank.rank];
        unsigned long long ns = 0;
        int who = -1;
        std::sscanf(line.c_str() + at, "RESULT rank=%d result=%d at_ns=%llu next=%d next_s=%lf",
                    &who, &r.result, &ns, &r.next, &r.next_s);
        r.at_ns = ns;
      }
      at = line.find("MESSAGE ");
      if (at != std::string::npos) out[rank.rank].message = line.substr(at + 8);
    }
  }
  return out;
}

uint64_t stamp(const LaunchResult& launched, const char* word) {
  for (const RankOutcome& rank : launched.ranks) {
    size_t at = rank.output.find(word);
    if (at != std::string::npos)
      return std::strtoull(rank.output.c_str() + at + std::strlen(word) + 7, nullptr, 10);
  }
  return 0;
}

LaunchResult run_ranks(int nranks, std::vector<std::string> args, double timeout_s) {
  LaunchOptions options;
  options.nranks = nranks;
  options.command = {TESSEL_DIST_RANK_HELPER};
  options.command.insert(options.command.end(), args.begin(), args.end());
  options.capture = true;
  options.kill_on_failure = false;  // the survivors must see the fault themselves
  options.deadline_s = 60;
  options.env = {{"TESSEL_COMM_TIMEOUT", std::to_string(timeout_s)}};
  auto result = launch(options);
  EXPECT_TRUE(result.ok()) << result.status().to_string();
  return result.ok() ? *result : LaunchResult{};
}

class Faults : public ::testing::Test {
 protected:
  void SetUp() override { before_ = testing::tessel_shm_entries(); }
  void TearDown() override {
    EXPECT_EQ(testing::leaked_shm_entries(before_), std::vector<std::string>{})
        << "shared memory left behind";
  }
  std::vector<std::string> before_;
};

TEST_F(Faults, KillNineMidAllReduceFailsEveryOtherRankWithinTheTimeout) {
  // The timeout bounds detection; a dead process is seen within milliseconds.
  constexpr double kTimeout = 10;
  for (auto [nranks, victim] : {std::pair{3, 1}, std::pair{2, 0}, std::pair{4, 3}}) {
    LaunchResult launched =
        run_ranks(nranks, {"kill", std::to_string(victim), "4194304"}, kTimeout);
    ASSERT_FALSE(launched.deadline_passed) << "a rank hung";
    ASSERT_EQ(launched.ranks.size(), static_cast<size_t>(nranks));
    EXPECT_EQ(launched.ranks[victim].signal, 9);
    const uint64_t killed_at = stamp(launched, "KILLED");
    ASSERT_GT(killed_at, 0u);
    auto got = reports(launched);
    ASSERT_EQ(got.size(), static_cast<size_t>(nranks - 1));
    for (auto& [rank, report] : got) {
      EXPECT_FALSE(launched.ranks[rank].failed()) << launched.ranks[rank].output;
      EXPECT_EQ(report.result, tesselRemoteError) << report.message;
      const std::string dead =
          fmt::format("rank {} (pid {}) died", victim, launched.ranks[victim].pid);
      EXPECT_NE(report.message.find(dead), std::string::npos) << report.message;
      EXPECT_NE(report.message.find("all_reduce(count=4194304, f32, max)"), std::string::npos)
          << report.message;
      double detected_s = (report.at_ns - killed_at) / 1e9;
      EXPECT_LT(detected_s, kTimeout) << report.message;
      // The next call fails at once with the same error.
      EXPECT_EQ(report.next, tesselRemoteError);
      EXPECT_LT(report.next_s, 0.5);
    }
    EXPECT_EQ(launched.leaked_segments_removed, 0) << "a segment kept its name in /dev/shm";
  }
}

TEST_F(Faults, WrongCountOnOneRankIsReportedWithWhatEachRankCalled) {
  LaunchResult launched = run_ranks(3, {"mismatch", "1000"}, 10);
  ASSERT_FALSE(launched.deadline_passed) << "a rank hung";
  auto got = reports(launched);
  ASSERT_EQ(got.size(), 3u);
  for (auto& [rank, report] : got) {
    EXPECT_EQ(report.result, tesselInvalidUsage) << report.message;
    EXPECT_NE(report.message.find("mismatched collective #1 across ranks: ranks 0, 1 called "
                                  "all_reduce(count=1000, f32, sum); rank 2 called "
                                  "all_reduce(count=999, f32, sum)"),
              std::string::npos)
        << report.message;
    EXPECT_EQ(report.next, tesselInvalidUsage);
    EXPECT_LT(report.next_s, 0.5);
  }
  // Detection needs no timeout: every rank compares the calls as soon as all have arrived.
  for (const RankOutcome& rank : launched.ranks)
    EXPECT_LT(rank.seconds, 5.0);
}

TEST_F(Faults, StoppedRankIsDeclaredUnresponsiveAfterTheTimeout) {
  constexpr double kTimeout = 2;
  LaunchResult launched = run_ranks(3, {"stop", "1"}, kTimeout);
  ASSERT_FALSE(launched.deadline_passed) << "a rank hung";
  const uint64_t stopped_at = stamp(launched, "STOPPED");
  auto got = reports(launched);
  ASSERT_EQ(got.size(), 2u);
  for (auto& [rank, report] : got) {
    EXPECT_EQ(report.result, tesselRemoteError) << report.message;
    EXPECT_NE(report.message.find("rank 1 (pid"), std::string::npos) << report.message;
    EXPECT_NE(report.message.find("stopped responding"), std::string::npos) << report.message;
    double detected_s = (report.at_ns - stopped_at) / 1e9;
    // Not before the timeout (a slow rank is not dead), and not much after it.
    EXPECT_GE(detected_s, kTimeout - 0.2);
    EXPECT_LT(detected_s, kTimeout + 3);
  }
}

// A healthy rank that is slower than the others (fewer threads, a busier core) arrives last at
// every call, so it never waits; it must not be taken for dead. Before liveness had a thread of
// its own, such a rank stopped refreshing its heartbeat and was declared unresponsive after
// the timeout. Here: a 1 s timeout and 3 s of calls, each 20 ms late on rank 0.
TEST_F(Faults, RankThatAlwaysArrivesLastIsNotDeclaredDead) {
  constexpr double kTimeout = 1;
  LaunchResult launched = run_ranks(2, {"slow", "0", "3"}, kTimeout);
  ASSERT_FALSE(launched.deadline_passed) << "a rank hung";
  ASSERT_EQ(launched.ranks.size(), 2u);
  for (const RankOutcome& rank : launched.ranks) {
    EXPECT_FALSE(rank.failed()) << rank.output;
    EXPECT_NE(rank.output.find("OK slow "), std::string::npos) << rank.output;
    EXPECT_GE(rank.seconds, 3.0 - 0.1);  // it ran past three timeouts
  }
}

TEST_F(Faults, RankThatDestroysOrAbortsItsCommunicatorIsNamed) {
  for (const char* how : {"leave", "abort"}) {
    LaunchResult launched = run_ranks(3, {how, "2"}, 10);
    ASSERT_FALSE(launched.deadline_passed) << "a rank hung";
    auto got = reports(launched);
    ASSERT_EQ(got.size(), 2u);
    for (auto& [rank, report] : got) {
      EXPECT_EQ(report.result, tesselRemoteError) << report.message;
      std::string expected = std::string("rank 2 (pid ") + std::to_string(launched.ranks[2].pid) +
                             ") " + (how[0] == 'l' ? "destroyed" : "aborted") + " its communicator";
      EXPECT_NE(report.message.find(expected), std::string::npos) << report.message;
    }
  }
}

TEST_F(Faults, RankThatNeverJoinsFailsInitOnTheOthers) {
  constexpr double kTimeout = 2;
  LaunchResult launched = run_ranks(3, {"absent", "2"}, kTimeout);
  ASSERT_FALSE(launched.deadline_passed) << "a rank hung";
  auto got = reports(launched);
  ASSERT_EQ(got.size(), 2u);
  for (auto& [rank, report] : got) {
    EXPECT_EQ(report.result, tesselRemoteError) << report.message;
    EXPECT_NE(report.message.find("1 of 3 ranks never joined (missing: 2)"), std::string::npos)
        << report.message;
    EXPECT_LT(launched.ranks[rank].seconds, kTimeout + 3);
  }
}

}  // namespace
}  // namespace tessel::dist
