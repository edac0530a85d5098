// The measured-figures machinery: each peak kernel that can run here does exactly the arithmetic
// (and so the flop count) it claims, checked against the same recurrence in plain C++; the
// on-disk cache round-trips, ignores files for other CPUs or damaged files, and leaves no
// temporary files behind. Speed itself is not tested here (see hw_bench).
#include "hw/measure.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>

#include "hw/peak_kernels.h"

namespace tessel {
namespace {

std::vector<const hw_detail::PeakKernel*> runnable_kernels(const CpuFeatureSet& f) {
  std::vector<const hw_detail::PeakKernel*> out = {&hw_detail::kFmaF32Scalar};
#if defined(__x86_64__)
  if (f.has(CpuFeature::kAvx512f)) out.push_back(&hw_detail::kFmaF32Avx512);
  if (f.has(CpuFeature::kAvx2) && f.has(CpuFeature::kFma)) out.push_back(&hw_detail::kFmaF32Avx2);
  if (f.has(CpuFeature::kAvx512Bf16)) out.push_back(&hw_detail::kDotBf16Avx512);
#elif defined(__aarch64__)
  if (f.has(CpuFeature::kAsimd)) out.push_back(&hw_detail::kFmaF32Neon);
#endif
  (void)f;
  return out;
}

TEST(PeakKernels, DoTheArithmeticTheyCount) {
  // a = 1 and b = 1 (f32) or a*b = 0.5 (bf16, so a pair of products adds 1) keep every value an
  // exact small integer: accumulator j ends at start + j + iterations whatever the rounding.
  const std::int64_t iterations = 37;
  const float start = 5.0f;
  for (const hw_detail::PeakKernel* k : runnable_kernels(detect_cpu_features())) {
    SCOPED_TRACE(k->name);
    bool bf16 = k->flops_per_lane_per_round == 4;
    float a = 1.0f, b = bf16 ? 0.5f : 1.0f;
    float expected = 0.0f;
    for (int j = 0; j < k->accumulators; ++j) {
      float acc = start + static_cast<float>(j);
      for (std::int64_t i = 0; i < iterations; ++i)
        acc = bf16 ? acc + a * b + a * b : acc * a + b;
      expected += acc;
    }
    float sum = -1.0f;
    double flops = k->run(iterations, start, a, b, &sum);
    EXPECT_EQ(sum, expected);
    EXPECT_EQ(flops, static_cast<double>(iterations) * k->accumulators * k->lanes *
                         k->flops_per_lane_per_round);
  }
}

TEST(Measure, TriadArraysAreFarLargerThanTheLastLevelCache) {
  CpuInfo cpu = detect_cpu_info();
  std::int64_t bytes = triad_bytes_per_array(cpu);
  // At least 4x the last-level cache and 64 MiB, unless that would take over 1/16 of memory.
  std::int64_t cap = cpu.memory_bytes / 16;
  EXPECT_GE(bytes, std::min<std::int64_t>(64ll << 20, cap));
  EXPECT_GE(bytes, std::min<std::int64_t>(4 * cpu.caches.l3_bytes, cap));
  EXPECT_LE(bytes, cap);
}

class MeasureCache : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("tessel_measure_cache_test_" + std::to_string(getpid()));
    std::filesystem::remove_all(dir_);
    cpu_ = detect_cpu_info();
    figures_.bandwidth_gbs = 12.5;
    figures_.peak_f32_gflops = 321.25;
    figures_.peak_bf16_gflops = 654.5;
    figures_.f32_kernel = "avx512_fma";
    figures_.bf16_kernel = "avx512_bf16_dot";
    figures_.threads = 2;
    figures_.triad_bytes_per_array = 128ll << 20;
    figures_.measured_at = "2025-01-02T03:04:05Z";
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::filesystem::path dir_;
  CpuInfo cpu_;
  MeasuredFigures figures_;
};

TEST_F(MeasureCache, RoundTripsAndLeavesNoTemporaryFiles) {
  ASSERT_TRUE(store_measured_figures(dir_, cpu_, figures_).ok());
  auto loaded = load_measured_figures(dir_, cpu_);
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  ASSERT_TRUE(loaded->has_value());
  const MeasuredFigures& m = **loaded;
  EXPECT_EQ(m.bandwidth_gbs, 12.5);
  EXPECT_EQ(m.peak_f32_gflops, 321.25);
  EXPECT_EQ(m.peak_bf16_gflops, 654.5);
  EXPECT_EQ(m.f32_kernel, "avx512_fma");
  EXPECT_EQ(m.bf16_kernel, "avx512_bf16_dot");
  EXPECT_EQ(m.threads, 2);
  EXPECT_EQ(m.triad_bytes_per_array, 128ll << 20);
  EXPECT_EQ(m.measured_at, "2025-01-02T03:04:05Z");

  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir_)) {
    ++files;
    EXPECT_EQ(e.path(), measured_cache_path(dir_, cpu_));
  }
  EXPECT_EQ(files, 1);
}

TEST_F(MeasureCache, AbsentBf16StaysAbsent) {
  figures_.peak_bf16_gflops.reset();
  figures_.bf16_kernel.clear();
  ASSERT_TRUE(store_measured_figures(dir_, cpu_, figures_).ok());
  auto loaded = load_measured_figures(dir_, cpu_);
  ASSERT_TRUE(loaded.ok() && loaded->has_value());
  EXPECT_FALSE((*loaded)->peak_bf16_gflops.has_value());
}

TEST_F(MeasureCache, MissingFileIsAMissNotAnError) {
  auto loaded = load_measured_figures(dir_, cpu_);
  ASSERT_TRUE(loaded.ok());
  EXPECT_FALSE(loaded->has_value());
}

TEST_F(MeasureCache, AnotherCpuModelDoesNotSeeTheFigures) {
  ASSERT_TRUE(store_measured_figures(dir_, cpu_, figures_).ok());
  CpuInfo other = cpu_;
  other.model += " (other)";
  EXPECT_NE(measured_cache_path(dir_, other), measured_cache_path(dir_, cpu_));
  auto loaded = load_measured_figures(dir_, other);
  ASSERT_TRUE(loaded.ok());
  EXPECT_FALSE(loaded->has_value());
  // Same model, fewer usable cores: a different measurement too.
  CpuInfo pinned = cpu_;
  pinned.topology.usable_cores = cpu_.topology.usable_cores + 1;
  EXPECT_FALSE(load_measured_figures(dir_, pinned)->has_value());
}

TEST_F(MeasureCache, DamagedFileIsIgnored) {
  ASSERT_TRUE(store_measured_figures(dir_, cpu_, figures_).ok());
  std::ofstream(measured_cache_path(dir_, cpu_)) << "{\"format_version\": 1, \"key\": ";
  auto loaded = load_measured_figures(dir_, cpu_);
  ASSERT_TRUE(loaded.ok());
  EXPECT_FALSE(loaded->has_value());
}

TEST_F(MeasureCache, LookupUsesTheCachedFigures) {
  ASSERT_TRUE(store_measured_figures(dir_, cpu_, figures_).ok());
  MeasuredLookup m = measured_figures(cpu_, /*remeasure=*/false, dir_);
  EXPECT_TRUE(m.from_cache);
  EXPECT_EQ(m.figures.peak_f32_gflops, 321.25);
  EXPECT_EQ(m.cache_path, measured_cache_path(dir_, cpu_));
}

TEST(MeasureCacheDir, FollowsXdgThenHome) {
  const char* old_xdg = std::getenv("XDG_CACHE_HOME");
  std::string saved = old_xdg ? old_xdg : "";
  setenv("XDG_CACHE_HOME", "/tmp/xdg-test", 1);
  EXPECT_EQ(*hardware_cache_dir(), std::filesystem::path("/tmp/xdg-test/tessel"));
  unsetenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  if (home) {
    EXPECT_EQ(*hardware_cache_dir(), std::filesystem::path(home) / ".cache/tessel");
  }
  if (old_xdg) setenv("XDG_CACHE_HOME", saved.c_str(), 1);
}

}  // namespace
}  // namespace tessel
