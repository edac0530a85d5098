// `tessel launch --hosts ... --netns SUBNET` on machines simulated in network namespaces
// (dist/netns_cluster.h): ranks that reach each other only over TCP, through mpirun and the mpi
// backend, with rate-limited links.
//   - a small GPT trained on 2 and on 4 machines (one rank each) computes the losses of one
//     process with the whole batch (reference: `tessel train` alone; tolerance 2e-5, sums of
//     parts vs one sum);
//   - 2 machines x 2 ranks take the hierarchical all-reduce (TESSEL_HIERARCHICAL=1 makes it an
//     error not to), and every collective's result equals the plain C++ reference of
//     dist/testing/collective_cases.h, as the flat run's does;
//   - a rank killed on one machine ends the job within 30 s with an error naming it.
// Skipped, saying why, where namespaces cannot be made (not root, no iproute2) or MPI is absent.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "dist/netns_cluster.h"
#include "support/subprocess.h"

namespace {

using tessel::ProgramRun;
using tessel::run_program;
using tessel::dist::LinkShape;
using tessel::dist::NetnsCluster;

// Skips the test when simulated machines or MPI are not available here.
#define SKIP_WITHOUT_CLUSTER()                                                          \
  do {                                                                                  \
    tessel::Status available = NetnsCluster::available();                               \
    if (!available.ok()) GTEST_SKIP() << available.to_string();                         \
    if (tessel::find_program_in_path({"mpirun"}).empty())                               \
      GTEST_SKIP() << "mpirun is not installed (Debian: openmpi-bin)";                  \
    if (!std::filesystem::exists(std::filesystem::path(TESSEL_CLI_PATH).parent_path() / \
                                 "libtessel_mpi.so"))                                   \
      GTEST_SKIP() << "the mpi plug-in was not built (no MPI development files)";       \
  } while (0)

// 100 Mbit/s links: slow enough to be a real limit, fast enough for a test.
constexpr LinkShape kLink{.rate_bytes_per_s = 12.5e6, .delay_s = 0};

ProgramRun launch(const NetnsCluster& cluster, int nranks, const std::vector<std::string>& command,
                  const std::vector<std::pair<std::string, std::string>>& env = {}) {
  std::string hosts;
  for (const std::string& host : cluster.hosts())
    hosts += (hosts.empty() ? "" : ",") + host;
  std::vector<std::string> argv = {
      TESSEL_CLI_PATH, "launch",         "-n", std::to_string(nranks), "--hosts", hosts,
      "--netns",       cluster.subnet(), "--"};
  argv.insert(argv.end(), command.begin(), command.end());
  return run_program(argv, env);
}

class TempDir {
 public:
  TempDir() {
    path_ = std::filesystem::temp_directory_path() /
            ("tessel_netns_" + std::to_string(::getpid()) + "_" + std::to_string(counter_++));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  static inline int counter_ = 0;
  std::filesystem::path path_;
};

// A tiny GPT on Tiny Shakespeare: `batch` rows per rank, 3 AdamW steps, every loss logged.
std::string gpt_config(const TempDir& dir, const std::string& name, int batch, bool distributed) {
  const std::string path = dir.file(name + ".toml");
  std::ofstream(path) << "seed = 3\n[model]\nname = \"gpt\"\nn_layer = 2\nn_head = 2\nn_embd = 32\n"
                      << "[data]\nname = \"text\"\npath = \"" << TESSEL_SOURCE_DIR
                      << "/data/tinyshakespeare/input.txt\"\nblock_size = 16\nbatch_size = "
                      << batch << "\neval_batch_size = 4\neval_batches = 1\n"
                      << "[optimizer]\nname = \"adamw\"\nlr = 1e-3\n"
                      << "[train]\nsteps = 3\nlog_interval = 1\ncheckpoint_path = \"\"\n"
                      << "metrics_path = \"" << dir.file(name + ".jsonl") << "\"\n"
                      << "[sample]\ntokens = 0\n"
                      << (distributed ? "[distributed]\nbackend = \"mpi\"\nbucket_cap_mb = 0.01\n"
                                      : "");
  return path;
}

std::vector<double> losses(const std::string& metrics_path) {
  std::vector<double> out;
  std::ifstream in(metrics_path);
  std::string line;
  while (std::getline(in, line)) {
    auto row = nlohmann::json::parse(line);
    if (row.contains("loss")) out.push_back(row["loss"]);
  }
  return out;
}

TEST(LaunchNetns, GptOnTwoAndFourMachinesTrainsAsOneProcess) {
  SKIP_WITHOUT_CLUSTER();
  TempDir dir;
  ProgramRun single = run_program({TESSEL_CLI_PATH, "train", gpt_config(dir, "one", 8, false)});
  ASSERT_EQ(single.exit_code, 0) << single.output;
  const std::vector<double> want = losses(dir.file("one.jsonl"));
  ASSERT_EQ(want.size(), 3u);
  for (int machines : {2, 4}) {
    auto cluster = NetnsCluster::create(machines, kLink);
    ASSERT_TRUE(cluster.ok()) << cluster.status().to_string();
    const std::string name = "ranks" + std::to_string(machines);
    ProgramRun run = launch(**cluster, machines,
                            {TESSEL_CLI_PATH, "train", gpt_config(dir, name, 8 / machines, true)});
    ASSERT_EQ(run.exit_code, 0) << (*cluster)->shaping() << "\n" << run.output;
    EXPECT_NE(run.output.find(std::to_string(machines) + " ranks (mpi)"), std::string::npos)
        << run.output;
    const std::vector<double> got = losses(dir.file(name + ".jsonl"));
    ASSERT_EQ(got.size(), want.size()) << run.output;
    for (size_t s = 0; s < want.size(); ++s)
      EXPECT_NEAR(got[s], want[s], 2e-5) << machines << " machines, step " << s + 1;
  }
}

TEST(LaunchNetns, HierarchicalAllReduceOnTwoMachinesOfTwoRanksEqualsTheReference) {
  SKIP_WITHOUT_CLUSTER();
  auto cluster = NetnsCluster::create(2, kLink);
  ASSERT_TRUE(cluster.ok()) << cluster.status().to_string();
  const std::vector<std::string> command = {
      TESSEL_DIST_RANK_HELPER,     "cases",
      "all_reduce:f32:sum:100003", "all_reduce:f32:avg:1001:inplace",
      "all_reduce:i32:max:7",      "all_reduce:i64:avg:3",
      "all_reduce:f64:prod:2",     "all_reduce:u8:min:1",
      "broadcast:f32:sum:77",      "reduce_scatter:f32:sum:9"};
  for (const char* hierarchical : {"1", "0"}) {
    ProgramRun run = launch(**cluster, 4, command,
                            {{"TESSEL_BACKEND", "mpi"}, {"TESSEL_HIERARCHICAL", hierarchical}});
    ASSERT_EQ(run.exit_code, 0) << "TESSEL_HIERARCHICAL=" << hierarchical << "\n" << run.output;
    for (int r = 0; r < 4; ++r)
      EXPECT_NE(run.output.find(fmt::format("[rank {}] OK 8 cases", r)), std::string::npos)
          << "TESSEL_HIERARCHICAL=" << hierarchical << "\n"
          << run.output;
  }
}

TEST(LaunchNetns, KilledRankOnOneMachineEndsTheJobNamingIt) {
  SKIP_WITHOUT_CLUSTER();
  auto cluster = NetnsCluster::create(2, kLink);
  ASSERT_TRUE(cluster.ok()) << cluster.status().to_string();
  const auto start = std::chrono::steady_clock::now();
  ProgramRun run =
      launch(**cluster, 2,
             {TESSEL_PARALLEL_RANK_HELPER, "--steps", "50", "--die-rank", "1", "--die-step", "2"},
             {{"TESSEL_BACKEND", "mpi"}});
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_NE(run.exit_code, 0) << run.output;
  EXPECT_LT(seconds, 30.0) << run.output;
  // The launcher's summary names the rank, its machine and how it ended.
  const std::string named = "process rank 1 with PID";
  const size_t at = run.output.find("tessel launch: " + named);
  ASSERT_NE(at, std::string::npos) << run.output;
  const std::string summary = run.output.substr(at, run.output.find('\n', at) - at);
  EXPECT_NE(summary.find("on node " + (*cluster)->hosts()[1]), std::string::npos) << summary;
  EXPECT_NE(summary.find("signal 9"), std::string::npos) << summary;
}

}  // namespace
