// `tessel bench precision` as a user runs it (the built command, in a child process): a bad
// precision is an error naming it, and the JSON rows are consistent with themselves (ratios are
// step times over fp32's, throughput is the batch over the step time). Also `tessel bench gemm
// --threads`, which must size tessel's own thread pool too, and its `--stat`. Nothing is timed
// here.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "cli/run_tessel_for_test.h"

namespace {

using Result = tessel::cli::testing::CliRun;
using tessel::cli::testing::run_tessel;

TEST(BenchPrecision, AnUnknownPrecisionIsNamed) {
  Result r = run_tessel("bench precision --workloads mlp --precisions fp32,fp8");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("--precisions: 'fp8' is not one of fp32, bf16, fp16"), std::string::npos)
      << r.output;
}

TEST(BenchPrecision, JsonRowsAreConsistent) {
  Result r = run_tessel("bench precision --workloads mlp --warmup 0 --rounds 1 --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::vector<nlohmann::json> rows;
  std::istringstream lines(r.output);
  for (std::string line; std::getline(lines, line);)
    if (!line.empty() && line[0] == '{') rows.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(rows.size(), 2u) << r.output;
  EXPECT_EQ(rows[0]["precision"], "fp32");
  EXPECT_EQ(rows[1]["precision"], "bf16");
  const double fp32_ms = rows[0]["step_ms"], fp32_cpu = rows[0]["cpu_ms"];
  for (const nlohmann::json& row : rows) {
    EXPECT_EQ(row["workload"], "mlp");
    EXPECT_EQ(row["unit"], "samples/s");
    const double step_ms = row["step_ms"];
    EXPECT_GT(step_ms, 0.0);
    EXPECT_NEAR(double(row["throughput"]), 128.0 / (step_ms / 1000.0),
                1e-6 * double(row["throughput"]));
    EXPECT_NEAR(double(row["ratio_to_fp32"]), step_ms / fp32_ms, 1e-9);
    EXPECT_NEAR(double(row["cpu_ratio_to_fp32"]), double(row["cpu_ms"]) / fp32_cpu, 1e-9);
    // One round: the phases are that round's, and they add up to the step.
    EXPECT_NEAR(
        double(row["forward_ms"]) + double(row["backward_ms"]) + double(row["optimizer_ms"]),
        step_ms, 1e-6 * step_ms);
  }
}

// --threads N runs tessel-cpu on N threads as well as the peers, even where TESSEL_THREADS says
// otherwise (before, only the peers got N), and every implementation's result agrees.
TEST(BenchGemm, ThreadsSizesTesselsPoolToo) {
  ::setenv("TESSEL_THREADS", "2", 1);
  Result r = run_tessel(
      "bench gemm --no-opencl --sizes 33x20x17 --dtypes f32 --threads 1 --seconds 0.01 --json");
  ::unsetenv("TESSEL_THREADS");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  int tessel_rows = 0;
  std::istringstream lines(r.output);
  for (std::string line; std::getline(lines, line);) {
    if (line.empty() || line[0] != '{') continue;
    const nlohmann::json row = nlohmann::json::parse(line);
    EXPECT_EQ(row["threads"], 1) << line;
    EXPECT_TRUE(bool(row["agrees"])) << line;
    if (row["impl"] == "tessel-cpu") ++tessel_rows;
  }
  EXPECT_EQ(tessel_rows, 1) << r.output;
}

// --layouts times each shape with A or B stored transposed (tessel reading strided views, the
// peers told to transpose); every row names its layout and agrees with the first peer's result
// (or tessel-cpu's own where no peer loads), and --batched adds batched_gemm with Z = 1.
// --clock cpu is refused without --threads 1.
TEST(BenchGemm, LayoutsTransposeOperandsAndAgree) {
  Result r = run_tessel(
      "bench gemm --no-opencl --sizes 33x20x17 --dtypes f32 --threads 1 --seconds 0.01 --json "
      "--layouts nt,tn --batched --clock cpu");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::map<std::string, int> tessel_rows;
  std::istringstream lines(r.output);
  for (std::string line; std::getline(lines, line);) {
    if (line.empty() || line[0] != '{') continue;
    const nlohmann::json row = nlohmann::json::parse(line);
    EXPECT_TRUE(bool(row["agrees"])) << line;
    EXPECT_EQ(row["clock"], "cpu") << line;
    if (row["impl"] == "tessel-cpu" || row["impl"] == "tessel-cpu-batched")
      ++tessel_rows[std::string(row["layout"])];
  }
  for (const char* layout : {"nt", "tn"})
    EXPECT_EQ(tessel_rows[layout], 2) << layout << "\n" << r.output;
  Result bad = run_tessel("bench gemm --no-opencl --sizes 8 --dtypes f32 --layouts nx");
  EXPECT_EQ(bad.exit_code, 1) << bad.output;
  EXPECT_NE(bad.output.find("--layouts: 'nx'"), std::string::npos) << bad.output;
  Result two = run_tessel("bench gemm --no-opencl --sizes 8 --dtypes f32 --threads 2 --clock cpu");
  EXPECT_EQ(two.exit_code, 1) << two.output;
}

// --stat min makes each figure the fastest turn: `gflops` is then `gflops_min_time`, which no
// turn's median can beat; both are in every row. An unknown statistic is named.
TEST(BenchGemm, StatMinIsAcceptedAndReported) {
  Result r = run_tessel(
      "bench gemm --no-opencl --sizes 33x20x17 --dtypes f32 --threads 1 --seconds 0.01 --stat min "
      "--json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  int rows = 0;
  std::istringstream lines(r.output);
  for (std::string line; std::getline(lines, line);) {
    if (line.empty() || line[0] != '{') continue;
    const nlohmann::json row = nlohmann::json::parse(line);
    ++rows;
    EXPECT_EQ(row["stat"], "min") << line;
    EXPECT_EQ(double(row["gflops"]), double(row["gflops_min_time"])) << line;
    EXPECT_GE(double(row["gflops_min_time"]), double(row["gflops_median"])) << line;
    EXPECT_GT(double(row["gflops_median"]), 0.0) << line;
  }
  EXPECT_GE(rows, 1) << r.output;
  Result bad = run_tessel("bench gemm --no-opencl --sizes 8 --dtypes f32 --stat mean");
  EXPECT_EQ(bad.exit_code, 1) << bad.output;
  EXPECT_NE(bad.output.find("--stat: 'mean' is not one of median, min"), std::string::npos)
      << bad.output;
}

}  // namespace
