// `tessel tune --trial` as the tuner runs it (the built command, in a child process): a trial
// timed against the kernel's defaults reports both times and their ratio, and a specialisation
// that does not compile is an answer naming where, not a failed process. The gemm launches here
// use the AOT defaults (no JIT compile), so the file runs in well under a second. Nothing is
// asserted about speed.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include <unistd.h>

#include <filesystem>

#include "cli/run_tessel_for_test.h"
#include "tune/tune_db.h"

namespace {

using Result = tessel::cli::testing::CliRun;

Result run_trial(const nlohmann::json& request) {
  return tessel::cli::testing::run_tessel("tune --trial '" + request.dump() + "'");
}

// The last line of the child's output, which is its answer.
nlohmann::json answer(const Result& r) {
  const size_t end = r.output.find_last_not_of('\n');
  if (end == std::string::npos) return {};
  const size_t start = r.output.rfind('\n', end);
  return nlohmann::json::parse(r.output.substr(start == std::string::npos ? 0 : start + 1, end + 1),
                               nullptr, false);
}

nlohmann::json gemm_request(nlohmann::json params) {
  return {{"kernel", "gemm"},
          {"device", "cpu"},
          {"params", std::move(params)},
          {"sizes", {{"M", 96}, {"N", 80}, {"K", 72}}},
          {"seconds", 0.02},
          {"versus_defaults", true}};
}

TEST(TuneTrial, APairedTrialReportsBothTimesAndTheirRatio) {
  Result r = run_trial(gemm_request({{"T", "f32"}}));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  nlohmann::json j = answer(r);
  ASSERT_TRUE(j.is_object()) << r.output;
  EXPECT_EQ(j["status"], "ok") << r.output;
  EXPECT_GT(double(j["seconds"]), 0.0);
  EXPECT_GT(double(j["default_seconds"]), 0.0);
  // A ratio was measured (its value is a timing, which a test does not judge: a busy machine
  // moved it outside 0.5-2 once under ctest -j2).
  EXPECT_GT(double(j["ratio"]), 0.0) << r.output;
  EXPECT_TRUE(std::isfinite(double(j["ratio"]))) << r.output;
}

TEST(TuneTrial, ASpecialisationThatDoesNotCompileIsAnAnswerNamingWhere) {
  Result r = run_trial(gemm_request({{"T", "f32"}, {"BM", "7"}}));
  EXPECT_EQ(r.exit_code, 1) << r.output;  // the trial failed; the process did not crash
  nlohmann::json j = answer(r);
  ASSERT_TRUE(j.is_object()) << r.output;
  EXPECT_EQ(j["status"], "compile_error");
  EXPECT_NE(std::string(j["detail"]).find("kernels/gemm.tile:"), std::string::npos) << r.output;
}

// An algorithm choice point named on the command line: every algorithm that applies is timed,
// each is recorded, and exactly one (the rule or a faster one) is the shape's choice.
TEST(TuneAlgorithm, ANamedPointTimesEveryAlgorithmAndRecordsOneChoice) {
  const std::string db = (std::filesystem::temp_directory_path() /
                          ("tessel_tune_algorithm_" + std::to_string(getpid()) + ".db"))
                             .string();
  std::filesystem::remove(db);
  // A 3x3 / stride 1 layer 16 channels deep: implicit (the rule), im2col, unfolded and winograd
  // all apply.
  Result r = tessel::cli::testing::run_tessel(
      "tune conv2d.forward --shape 1x16x8x8x16x3x3x1x1x1x1x1x1x1 --json --db '" + db + "'");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  nlohmann::json j = answer(r);
  ASSERT_TRUE(j.is_object()) << r.output;
  EXPECT_EQ(j["point"], "conv2d.forward");
  EXPECT_EQ(j["rule"], "implicit");
  ASSERT_EQ(j["algorithms"].size(), 4u) << r.output;
  std::set<std::string> timed;
  for (const nlohmann::json& a : j["algorithms"]) {
    EXPECT_GT(double(a["median_seconds"]), 0.0) << r.output;
    timed.insert(std::string(a["algorithm"]));
  }
  EXPECT_EQ(timed, (std::set<std::string>{"implicit", "im2col", "unfolded", "winograd"}));
  EXPECT_GE(int(j["rounds"]), 7);
  auto opened = tessel::tune::TuneDb::open(db);
  ASSERT_TRUE(opened.ok());
  auto rows = (*opened)->all();
  ASSERT_TRUE(rows.ok());
  int chosen = 0;
  for (const tessel::tune::Trial& t : *rows) {
    EXPECT_EQ(t.key.kernel, "conv2d.forward");
    EXPECT_EQ(t.key.shape, (std::vector<int64_t>{1, 16, 8, 8, 16}));
    EXPECT_EQ(t.key.fixed, "DH=1 DW=1 G=1 KH=3 KW=3 PH=1 PW=1 SH=1 SW=1");
    if (t.detail.rfind(tessel::tune::kChosenPrefix, 0) == 0) {
      ++chosen;
      EXPECT_EQ(t.params, "ALGO=" + std::string(j["chosen"]));
    }
  }
  EXPECT_EQ(rows->size(), 4u);  // one row per algorithm
  EXPECT_EQ(chosen, 1);
  opened->reset();
  std::filesystem::remove(db);
  std::filesystem::remove(db + "-wal");
  std::filesystem::remove(db + "-shm");
}

TEST(TuneAlgorithm, ASizeListOfTheWrongLengthIsAnErrorSayingWhatItNeeds) {
  const std::string db = (std::filesystem::temp_directory_path() /
                          ("tessel_tune_sizes_" + std::to_string(getpid()) + ".db"))
                             .string();
  Result r =
      tessel::cli::testing::run_tessel("tune conv2d.forward --shape 1x16x8x8 --db '" + db + "'");
  std::filesystem::remove(db);
  std::filesystem::remove(db + "-wal");
  std::filesystem::remove(db + "-shm");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("needs 14 sizes"), std::string::npos) << r.output;
}

}  // namespace
