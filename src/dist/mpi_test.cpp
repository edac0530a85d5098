// The mpi backend: the collective matrix and a mismatch through mpirun (ranks are copies of
// tessel_dist_rank_helper with TESSEL_BACKEND=mpi), and the plug-in arrangement that keeps MPI
// out of libtessel itself.
#include <dlfcn.h>
#include <elf.h>
#include <gtest/gtest.h>
#include <link.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "dist/launcher.h"
#include "dist/tessel_comm.h"

namespace tessel::dist {
namespace {

bool have_mpirun() {
  return std::system("command -v mpirun > /dev/null 2>&1") == 0;
}

LaunchResult run_mpi(int nranks, std::vector<std::string> args) {
  LaunchOptions options;
  options.nranks = nranks;
  options.backend = Backend::kMpi;
  options.command = {TESSEL_DIST_RANK_HELPER};
  options.command.insert(options.command.end(), args.begin(), args.end());
  options.capture = true;
  options.deadline_s = 120;
  options.env = {{"TESSEL_COMM_TIMEOUT", "20"}};
  auto result = launch(options);
  EXPECT_TRUE(result.ok()) << result.status().to_string();
  return result.ok() ? *result : LaunchResult{};
}

// Two ranks get the full matrix (1 MiB + 3 elements included); three ranks the small sizes, which
// already take every code path of the backend (in-place forms, avg through int64, f16/bf16
// operators) at a third of the time.
TEST(Mpi, EveryCollectiveTypeAndReductionThroughMpirun) {
  if (!have_mpirun()) GTEST_SKIP() << "no mpirun";
  for (auto [nranks, sizes] :
       {std::pair<int, std::vector<std::string>>{2, {"0", "1", "7", "1048576+3"}},
        {3, {"0", "1", "7", "1000"}}}) {
    std::vector<std::string> args = {"matrix"};
    args.insert(args.end(), sizes.begin(), sizes.end());
    LaunchResult result = run_mpi(nranks, args);
    EXPECT_EQ(result.exit_code, 0) << result.first_failure;
    ASSERT_EQ(result.ranks.size(), static_cast<size_t>(nranks));
    for (const RankOutcome& rank : result.ranks) {
      EXPECT_NE(rank.output.find("] OK 740 cases"), std::string::npos) << rank.output;
      EXPECT_EQ(rank.output.find("FAIL"), std::string::npos) << rank.output;
    }
  }
}

TEST(Mpi, MismatchedCallsAreReportedOnEveryRank) {
  if (!have_mpirun()) GTEST_SKIP() << "no mpirun";
  LaunchResult result = run_mpi(3, {"mismatch", "1000"});
  EXPECT_FALSE(result.deadline_passed);
  for (const RankOutcome& rank : result.ranks) {
    EXPECT_NE(rank.output.find("result=5"), std::string::npos) << rank.output;  // InvalidUsage
    EXPECT_NE(rank.output.find("ranks 0, 1 called all_reduce(count=1000, f32, sum); rank 2 called "
                               "all_reduce(count=999, f32, sum)"),
              std::string::npos)
        << rank.output;
  }
}

// libtessel must start where MPI is not installed: it may not list libmpi among the libraries it
// needs, and this test process (which uses libtessel) must not have loaded it.
TEST(Mpi, LibtesselDoesNotNeedMpi) {
  void* handle = dlopen(TESSEL_BINARY_DIR "/libtessel.so", RTLD_NOW | RTLD_NOLOAD);
  ASSERT_NE(handle, nullptr) << dlerror();
  link_map* map = nullptr;
  ASSERT_EQ(dlinfo(handle, RTLD_DI_LINKMAP, &map), 0);
  const char* strings = nullptr;
  for (const ElfW(Dyn)* d = map->l_ld; d->d_tag != DT_NULL; ++d)
    if (d->d_tag == DT_STRTAB) strings = reinterpret_cast<const char*>(d->d_un.d_ptr);
  ASSERT_NE(strings, nullptr);
  std::vector<std::string> needed;
  for (const ElfW(Dyn)* d = map->l_ld; d->d_tag != DT_NULL; ++d)
    if (d->d_tag == DT_NEEDED) needed.push_back(strings + d->d_un.d_val);
  EXPECT_FALSE(needed.empty());
  for (const std::string& lib : needed)
    EXPECT_EQ(lib.find("libmpi"), std::string::npos) << lib;
  dlclose(handle);
  EXPECT_EQ(dlopen("libmpi.so.40", RTLD_NOW | RTLD_NOLOAD), nullptr);
}

TEST(Mpi, MissingPluginIsReportedWithWhereItLooked) {
  setenv("TESSEL_MPI_PLUGIN", "/nonexistent/libtessel_mpi.so", 1);
  tesselConfig_t config = TESSEL_CONFIG_INITIALIZER;
  config.backend = tesselBackendMpi;
  setenv("TESSEL_RANK", "0", 1);
  setenv("TESSEL_WORLD_SIZE", "1", 1);
  tesselComm_t comm = nullptr;
  EXPECT_EQ(tesselCommInitFromEnv(&comm, &config), tesselSystemError);
  std::string error = tesselGetLastError(nullptr);
  EXPECT_NE(error.find("mpi backend is not available"), std::string::npos) << error;
  EXPECT_NE(error.find("/nonexistent/libtessel_mpi.so"), std::string::npos) << error;
  unsetenv("TESSEL_MPI_PLUGIN");
  unsetenv("TESSEL_RANK");
  unsetenv("TESSEL_WORLD_SIZE");
}

}  // namespace
}  // namespace tessel::dist
