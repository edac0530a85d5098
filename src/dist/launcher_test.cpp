// The launcher: rank variables, output prefixed by rank, exit codes, stopping the other ranks
// when one fails, removing what a crashed job left in /dev/shm, and mpirun for the mpi backend.
#include "dist/launcher.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>

namespace tessel::dist {
namespace {

LaunchResult run_shell(int nranks, const std::string& script, bool kill_on_failure = true,
                       Backend backend = Backend::kShm) {
  LaunchOptions options;
  options.nranks = nranks;
  options.backend = backend;
  options.command = {"/bin/sh", "-c", script};
  options.capture = true;
  options.kill_on_failure = kill_on_failure;
  options.kill_grace_s = 1;
  options.deadline_s = 60;
  auto result = launch(options);
  EXPECT_TRUE(result.ok()) << result.status().to_string();
  return result.ok() ? *result : LaunchResult{};
}

TEST(Launcher, RanksSeeTheirVariablesAndOutputIsPrefixed) {
  auto result =
      run_shell(3,
                "echo rank=$TESSEL_RANK of $TESSEL_WORLD_SIZE local=$TESSEL_LOCAL_RANK "
                "store=$TESSEL_MASTER_ADDR:$TESSEL_MASTER_PORT agent=$TESSEL_USE_AGENT_STORE; "
                "echo to-stderr >&2; printf 'no newline'");
  ASSERT_EQ(result.ranks.size(), 3u);
  EXPECT_EQ(result.exit_code, 0);
  for (int r = 0; r < 3; ++r) {
    const std::string& out = result.ranks[r].output;
    EXPECT_NE(out.find(fmt::format("[rank {}] rank={} of 3 local={} store=127.0.0.1:", r, r, r)),
              std::string::npos)
        << out;
    EXPECT_NE(out.find(fmt::format("[rank {}] to-stderr\n", r)), std::string::npos) << out;
    EXPECT_NE(out.find(fmt::format("[rank {}] no newline\n", r)), std::string::npos) << out;
    EXPECT_NE(out.find("agent=1"), std::string::npos);
  }
}

TEST(Launcher, AFailingRankStopsTheOthersAndSetsTheExitCode) {
  auto start = std::chrono::steady_clock::now();
  auto result = run_shell(3, "if [ $TESSEL_RANK = 1 ]; then exit 7; fi; exec sleep 30");
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(result.exit_code, 7);
  EXPECT_NE(result.first_failure.find("rank 1 (pid"), std::string::npos) << result.first_failure;
  EXPECT_NE(result.first_failure.find("exited with code 7"), std::string::npos);
  EXPECT_EQ(result.ranks[0].signal, SIGTERM);
  EXPECT_EQ(result.ranks[2].signal, SIGTERM);
  EXPECT_LT(seconds, 10);
}

TEST(Launcher, RanksThatIgnoreSigtermAreKilledAfterTheGracePeriod) {
  // Rank 1 ignores SIGTERM, then tells rank 0 (through a file) to die.
  auto result = run_shell(2,
                          "ready=/tmp/tessel-launcher-test-$TESSEL_JOB_ID; "
                          "if [ $TESSEL_RANK = 0 ]; then while [ ! -e $ready ]; do sleep 0.01; "
                          "done; rm -f $ready; kill -9 $$; fi; trap '' TERM; touch $ready; "
                          "while true; do sleep 0.05; done");
  EXPECT_EQ(result.exit_code, 128 + SIGKILL);
  EXPECT_NE(result.first_failure.find("killed by signal 9"), std::string::npos);
  EXPECT_EQ(result.ranks[1].signal, SIGKILL);
}

TEST(Launcher, KeepGoingLetsTheOthersFinish) {
  auto result = run_shell(2, "if [ $TESSEL_RANK = 0 ]; then exit 3; fi; sleep 0.3; echo done",
                          /*kill_on_failure=*/false);
  EXPECT_EQ(result.exit_code, 3);
  EXPECT_EQ(result.ranks[1].exit_code, 0);
  EXPECT_NE(result.ranks[1].output.find("[rank 1] done"), std::string::npos);
}

TEST(Launcher, RemovesSharedMemoryOfItsJobOnly) {
  // A rank that died before removing its segment leaves /dev/shm/tessel-<job>-...; the launcher
  // removes those of its own job and nothing else.
  const std::string other = "/dev/shm/tessel-notthisjob-0-keep";
  FILE* f = fopen(other.c_str(), "w");
  ASSERT_NE(f, nullptr);
  fclose(f);
  auto result = run_shell(2, "touch /dev/shm/tessel-$TESSEL_JOB_ID-$$-left");
  EXPECT_EQ(result.exit_code, 0);
  EXPECT_EQ(result.leaked_segments_removed, 2);
  EXPECT_EQ(access(other.c_str(), F_OK), 0);
  unlink(other.c_str());
}

TEST(Launcher, MissingProgramFailsItsRank) {
  LaunchOptions options;
  options.nranks = 2;
  options.command = {"/nonexistent/program"};
  options.capture = true;
  auto result = launch(options);
  ASSERT_TRUE(result.ok());
  EXPECT_EQ(result->exit_code, 127);
  // Whichever rank fails first stops the other, possibly before it has written anything, so the
  // message is looked for in every rank's output.
  bool said = false;
  for (const auto& rank : result->ranks)
    said = said || rank.output.find("cannot run the command") != std::string::npos;
  EXPECT_TRUE(said);
}

TEST(Launcher, MpiBackendGoesThroughMpirun) {
  if (system("command -v mpirun > /dev/null 2>&1") != 0) GTEST_SKIP() << "no mpirun";
  auto result =
      run_shell(2, "echo world=$OMPI_COMM_WORLD_SIZE backend=$TESSEL_BACKEND", true, Backend::kMpi);
  ASSERT_EQ(result.ranks.size(), 2u);
  EXPECT_EQ(result.exit_code, 0) << result.first_failure;
  for (int r = 0; r < 2; ++r)
    EXPECT_NE(result.ranks[r].output.find(fmt::format("[rank {}] world=2 backend=mpi", r)),
              std::string::npos)
        << result.ranks[r].output;
}

}  // namespace
}  // namespace tessel::dist
