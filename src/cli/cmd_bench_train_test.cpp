// `tessel bench train` as a user runs it (the built command, in a child process): argument
// errors, the worker's JSON line, the rows when PyTorch is missing.
// Nothing here times anything: the figures are checked for consistency only (throughput is the
// batch over the step time; the worker's peak RSS lies between what its flat buffers need and what
// the kernel reports for the whole child).
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

namespace {

struct Result {
  int exit_code = -1;
  std::string output;
  double child_maxrss_mb = 0;  // from wait4: the child and the processes it waited for
};

Result run_tessel(const std::string& arguments) {
  Result r;
  int fds[2];
  if (::pipe(fds) != 0) return r;
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(fds[1], 1);
    ::dup2(fds[1], 2);
    ::close(fds[0]);
    const std::string command = std::string("exec '") + TESSEL_CLI_PATH + "' " + arguments;
    ::execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::close(fds[1]);
  char buffer[4096];
  ssize_t n;
  while ((n = ::read(fds[0], buffer, sizeof(buffer))) > 0)
    r.output.append(buffer, static_cast<size_t>(n));
  ::close(fds[0]);
  int status = 0;
  rusage usage{};
  ::wait4(pid, &status, 0, &usage);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.child_maxrss_mb = static_cast<double>(usage.ru_maxrss) / 1024.0;
  return r;
}

std::vector<nlohmann::json> json_lines(const std::string& output) {
  std::vector<nlohmann::json> rows;
  std::istringstream lines(output);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.empty() || line[0] != '{') continue;
    auto row = nlohmann::json::parse(line, nullptr, false);
    if (!row.is_discarded()) rows.push_back(row);
  }
  return rows;
}

TEST(BenchTrain, RejectsAnUnknownWorkloadNamingTheKnownOnes) {
  Result r = run_tessel("bench train --workloads mlp,vgg");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("vgg"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("gpt_tiny"), std::string::npos) << r.output;
}

TEST(BenchTrain, RejectsNegativeSteps) {
  Result r = run_tessel("bench train --steps -1");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--steps"), std::string::npos) << r.output;
}

TEST(BenchTrain, WorkerPrintsOneConsistentJsonLine) {
  Result r = run_tessel("bench train --worker mlp --steps 3 --warmup 1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::vector<nlohmann::json> rows = json_lines(r.output);
  ASSERT_EQ(rows.size(), 1u) << r.output;
  const nlohmann::json& row = rows[0];
  EXPECT_EQ(row["workload"], "mlp");
  EXPECT_EQ(row["impl"], "tessel");
  EXPECT_EQ(row["unit"], "samples/s");
  EXPECT_EQ(row["steps"], 3);
  EXPECT_EQ(row["warmup"], 1);
  EXPECT_EQ(row["parameters"], 784 * 512 + 512 + 512 * 256 + 256 + 256 * 10 + 10);
  const double step_ms = row["step_ms"];
  ASSERT_GT(step_ms, 0);
  EXPECT_NEAR(row["throughput"].get<double>(), 128 / (step_ms / 1e3),
              1e-6 * row["throughput"].get<double>());
  // Values, gradients and AdamW's two moments are four f32 copies of the parameters at least.
  const double peak = row["peak_rss_mb"];
  EXPECT_GT(peak, 4.0 * 4 * row["parameters"].get<double>() / (1 << 20));
  EXPECT_LE(peak, r.child_maxrss_mb + 0.01);
  EXPECT_TRUE(std::isfinite(row["loss"].get<double>()));
}

// --precision bf16 reaches the worker: its gemms multiply in bf16, so the first step's loss (the
// same seed, the same batch) moves off f32's by bf16 rounding, and no further.
TEST(BenchTrain, Bf16PrecisionRunsTheStepInMixedPrecision) {
  Result f32 = run_tessel("bench train --worker mlp --steps 1 --warmup 0");
  Result bf16 = run_tessel("bench train --worker mlp --steps 1 --warmup 0 --precision bf16");
  ASSERT_EQ(f32.exit_code, 0) << f32.output;
  ASSERT_EQ(bf16.exit_code, 0) << bf16.output;
  std::vector<nlohmann::json> a = json_lines(f32.output), b = json_lines(bf16.output);
  ASSERT_EQ(a.size(), 1u) << f32.output;
  ASSERT_EQ(b.size(), 1u) << bf16.output;
  EXPECT_EQ(a[0]["precision"], "fp32");
  EXPECT_EQ(b[0]["precision"], "bf16");
  const double loss_f32 = a[0]["loss"], loss_bf16 = b[0]["loss"];
  EXPECT_NE(loss_f32, loss_bf16);
  EXPECT_NEAR(loss_bf16, loss_f32, 2e-2 * std::fabs(loss_f32));
}

TEST(BenchTrain, RejectsAnUnknownPrecision) {
  Result r = run_tessel("bench train --precision fp8");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--precision"), std::string::npos) << r.output;
}

TEST(BenchTrain, SaysSoWhenPyTorchIsMissing) {
  Result r = run_tessel(
      "bench train --json --workloads mlp --steps 1 --warmup 0 --python /nonexistent/python3");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::vector<nlohmann::json> rows = json_lines(r.output);
  ASSERT_EQ(rows.size(), 2u) << r.output;
  EXPECT_EQ(rows[0]["impl"], "tessel");
  EXPECT_EQ(rows[0]["workload"], "mlp");
  EXPECT_TRUE(rows[0].contains("throughput"));
  EXPECT_FALSE(rows[0].contains("throughput_ratio"));
  EXPECT_EQ(rows[1]["impl"], "pytorch");
  EXPECT_EQ(rows[1]["available"], false);
  EXPECT_NE(rows[1]["note"].get<std::string>().find("/nonexistent/python3"), std::string::npos);
}

}  // namespace
