// The op library reads the tuning database at launch: an entry for a shape changes the
// specialisation a launch compiles (exact shape, then the nearest tuned one), results stay equal
// to a plain sum, and without a database nothing changes.
#include "ops/tuned_launch.h"

#include <gtest/gtest.h>

#include <random>

#include "ops/ops.h"
#include "ops/testing/temp_tune_db.h"
#include "support/hash.h"
#include "tile/codegen/render.h"
#include "tune/choices.h"
#include "tune/space_points.h"

namespace tessel::ops {
namespace {

class TunedLaunchTest : public testing::TempTuneDbTest {};

Tensor random_matrix(int64_t m, int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> v(static_cast<size_t>(m * n));
  for (float& x : v)
    x = u(rng);
  return *Tensor::from_vector(v, {m, n});
}

// Row sums in double, the independent reference.
std::vector<double> row_sums(const Tensor& x) {
  std::vector<float> v = *x.to_vector<float>();
  const int64_t m = x.size(0), n = x.size(1);
  std::vector<double> out(static_cast<size_t>(m), 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j)
      out[i] += v[i * n + j];
  return out;
}

void expect_row_sums(const Tensor& x) {
  auto y = sum(x, {1});
  ASSERT_TRUE(y.ok()) << y.status().message();
  std::vector<float> got = *y->to_vector<float>();
  std::vector<double> want = row_sums(x);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], 1e-4) << i;
}

TEST_F(TunedLaunchTest, ADatabaseEntryChangesTheSpecialisationAndResultsStayRight) {
  const Tensor x = random_matrix(37, 300, 1);
  // The key the op library will compute for sum(x, {1}): reduce_rows over [37, 300].
  Expected<const tile::Kernel*> kernel = embedded_kernel("reduce_rows");
  ASSERT_TRUE(kernel.ok());
  auto launch = tunable_launch(cpu_device(), **kernel, {{"T", "f32"}, {"OP", "0"}},
                               {View{x, {37, 300}, {300, 1}}, x});
  ASSERT_TRUE(launch.ok()) << launch.status().message();
  ASSERT_EQ(launch->key.kernel, "reduce_rows");
  EXPECT_EQ(launch->key.shape, (std::vector<int64_t>{37, 300}));
  EXPECT_EQ(launch->key.fixed, "");  // OP=0 is the default
  {
    auto db = tune::TuneDb::open(file_);
    ASSERT_TRUE(db.ok());
    // BR = 3 and BC = 40 are in no list and no default: only this entry can bring them.
    ASSERT_TRUE((*db)->record({launch->key, "BC=40 BR=3", "ok", 1e-6, ""}).ok());
  }
  // Without the database: the defaults.
  tune::TuneChoices::global().use_database("");
  expect_row_sums(x);
  const int64_t before = kernel_cache_stats().compiled;
  expect_row_sums(x);
  EXPECT_EQ(kernel_cache_stats().compiled, before);
  // With it: a new specialisation for this shape, and for a near shape (nearest entry).
  tune::TuneChoices::global().use_database(file_);
  auto chosen = tune::TuneChoices::global().choose(launch->key);
  ASSERT_TRUE(chosen.ok());
  EXPECT_EQ(*chosen, "BC=40 BR=3");
  expect_row_sums(x);
  EXPECT_EQ(kernel_cache_stats().compiled, before + 1);
  expect_row_sums(random_matrix(41, 280, 2));
  EXPECT_EQ(kernel_cache_stats().compiled, before + 1);  // the same choice, compiled already
}

TEST_F(TunedLaunchTest, RecordsTheTunableLaunchesOfAStep) {
  record_tunable_launches(true);
  const Tensor x = random_matrix(5, 64, 3);
  ASSERT_TRUE(sum(x, {1}).ok());
  ASSERT_TRUE(sum(x, {1}).ok());  // the same key once
  ASSERT_TRUE(relu(x).ok());      // no space: not recorded
  record_tunable_launches(false);
  std::vector<TunableLaunch> launches = recorded_tunable_launches();
  ASSERT_EQ(launches.size(), 1u);
  EXPECT_EQ(launches[0].key.kernel, "reduce_rows");
  EXPECT_EQ(launches[0].sizes.at("M"), 5);
  EXPECT_EQ(launches[0].sizes.at("N"), 64);
  EXPECT_EQ(launches[0].device, "cpu");
}

// The blocks a matmul passes for a small product (ops/gemm_precision.h cpu_gemm_blocks) are the
// launch's baseline. A database choice of the kernel's own defaults (a tuner that found nothing
// faster than them) leaves the op's blocks alone; any other choice replaces them.
TEST_F(TunedLaunchTest, AChoiceOfTheKernelsDefaultsKeepsTheBlocksTheOpPassed) {
  Expected<const tile::Kernel*> kernel = embedded_kernel("gemm");
  ASSERT_TRUE(kernel.ok());
  const Tensor a = random_matrix(100, 40, 4), b = random_matrix(40, 70, 5);
  const Tensor c = *Tensor::from_vector(std::vector<float>(100 * 70, 0.0f), {100, 70});
  const Tensor bias = *Tensor::from_vector(std::vector<float>(70, 0.0f), {70});
  const std::vector<KernelArg> args = {a, b, c, bias, 1.0, 0.0};
  const KernelParams op_params = {{"T", "f32"}, {"BM", "48"}, {"BN", "64"}};
  auto launch = tunable_launch(cpu_device(), **kernel, op_params, args);
  ASSERT_TRUE(launch.ok()) << launch.status().message();
  EXPECT_EQ(launch->baseline, (KernelParams{{"BM", "48"}, {"BN", "64"}}));
  EXPECT_EQ(launch->fixed, (KernelParams{{"T", "f32"}}));
  const std::string defaults = tune::params_string(tune::kernel_space_defaults(
      *tile::find_space(kernel_tune_spaces(), "gemm", "cpu"), **kernel, "cpu"));
  EXPECT_EQ(defaults, "BK=256 BM=192 BN=256");
  auto chosen_after = [&](const std::string& choice, KernelParams params) {
    {
      auto db = tune::TuneDb::open(file_);
      EXPECT_TRUE(db.ok());
      EXPECT_TRUE((*db)->choose({launch->key, choice, "ok", 1e-6, "chosen: test"}).ok());
    }
    tune::TuneChoices::global().use_database(file_);
    EXPECT_TRUE(apply_tuned_params(cpu_device(), **kernel, args, params).ok());
    tune::TuneChoices::global().use_database("");
    return params;
  };
  EXPECT_EQ(chosen_after(defaults, op_params), op_params);
  EXPECT_EQ(chosen_after(defaults, {{"T", "f32"}}),
            (KernelParams{{"T", "f32"}, {"BK", "256"}, {"BM", "192"}, {"BN", "256"}}));
  EXPECT_EQ(chosen_after("BK=128 BM=96 BN=128", op_params),
            (KernelParams{{"T", "f32"}, {"BK", "128"}, {"BM", "96"}, {"BN", "128"}}));
}

// The tuner searches from the launch's baseline: on the grid it is that point; off the grid
// (gemm's CPU space has no BM = 48) it is appended as a point of its own, so the search measures
// it first and a choice has to beat it.
TEST(TuneSpacePoints, TheBaselineIsThePointTheSearchStartsFrom) {
  Expected<const tile::Kernel*> kernel = embedded_kernel("gemm");
  ASSERT_TRUE(kernel.ok());
  const tile::TuneSpace* space = tile::find_space(kernel_tune_spaces(), "gemm", "cpu");
  ASSERT_NE(space, nullptr);
  const std::map<std::string, int64_t> sizes = {{"M", 128}, {"N", 128}, {"K", 768}};
  const DeviceLimits limits = cpu_device()->limits();
  auto baseline_of = [&](const std::map<std::string, std::string>& baseline) {
    auto points =
        tune::space_points(*space, **kernel, {{"T", "f32"}}, "cpu", limits, 2, sizes, baseline);
    EXPECT_TRUE(points.ok()) << points.status().message();
    EXPECT_GE(points->default_index, 0);
    EXPECT_EQ(points->defaults, points->points[points->default_index]);
    return tune::params_string(points->points[points->default_index]);
  };
  EXPECT_EQ(baseline_of({}), "BK=256 BM=192 BN=256");
  EXPECT_EQ(baseline_of({{"BM", "96"}, {"BN", "128"}}), "BK=256 BM=96 BN=128");

  auto off_grid = tune::space_points(*space, **kernel, {{"T", "f32"}}, "cpu", limits, 2, sizes,
                                     {{"BM", "48"}, {"BN", "64"}});
  ASSERT_TRUE(off_grid.ok());
  EXPECT_EQ(off_grid->default_index, static_cast<int>(off_grid->points.size()) - 1);
  EXPECT_EQ(tune::params_string(off_grid->points.back()), "BK=256 BM=48 BN=64");
  // Its coordinates (BM, BN, BK as declared) are the nearest grid values': 96, 128, 256.
  EXPECT_EQ(off_grid->coords.back(), (std::vector<int>{0, 0, 1}));
  EXPECT_EQ(off_grid->features.back().size(), off_grid->features.front().size());
}

// A kernel's key hash covers its file and the code generator, so choices tuned under another
// renderer (or another version of the file) are not found.
TEST(TunedLaunchKey, TheSourceHashCoversTheFileAndTheCodeGenerator) {
  const std::string codegen = tile::codegen_hash();
  ASSERT_EQ(codegen.size(), 16u);
  EXPECT_EQ(codegen.find_first_not_of("0123456789abcdef"), std::string::npos) << codegen;
  std::string file_text;
  for (const auto& [file, text] : embedded_kernel_files())
    if (file == "reduce.tile") file_text = text;
  ASSERT_FALSE(file_text.empty());
  const std::string key = kernel_source_hash("reduce_rows");
  EXPECT_EQ(key, hash_hex(hash_text(file_text + "\n" + codegen)));
  EXPECT_NE(key, hash_hex(hash_text(file_text)));
  EXPECT_EQ(kernel_source_hash("no_such_kernel"), "");
}

}  // namespace
}  // namespace tessel::ops
