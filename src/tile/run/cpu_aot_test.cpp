// Kernels compiled ahead of time (cpu_aot.h): a specialisation listed in kernels/aot.txt is taken
// from libtessel_cpu_kernels_<isa>.so without running a compiler, and computes what a plain
// triple loop computes; one that is not listed still goes through the JIT.
#include "tile/run/cpu_aot.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

#include "ops/device_kernel.h"
#include "ops/tuned_launch.h"
#include "runtime/cpu/cpu_device.h"
#include "tile/codegen/cpu/cpu_renderer.h"
#include "tile/parse/parser.h"
#include "tile/pipeline.h"
#include "tile/run/test_util.h"

namespace tessel::tile {
namespace {

using testing::expect_close;
using testing::random_floats;

// A CPU device of its own (no kernels built yet) and a JIT cache of its own, empty, so that any
// compile the JIT does leaves a file there.
class CpuAotTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/tessel-aot-test-XXXXXX";
    ASSERT_NE(::mkdtemp(pattern), nullptr);
    cache_ = pattern;
    if (const char* old = std::getenv("TESSEL_CACHE_DIR")) old_cache_ = old;
    ::setenv("TESSEL_CACHE_DIR", cache_.c_str(), 1);
  }
  void TearDown() override {
    if (old_cache_.empty()) {
      ::unsetenv("TESSEL_CACHE_DIR");
    } else {
      ::setenv("TESSEL_CACHE_DIR", old_cache_.c_str(), 1);
    }
    std::filesystem::remove_all(cache_);
  }

  bool jit_compiled_anything() const {
    std::filesystem::path dir = std::filesystem::path(cache_) / "kernels";
    return std::filesystem::exists(dir) && !std::filesystem::is_empty(dir);
  }

  // The op library's copy of a kernel (embedded in libtessel): what it renders must hit.
  Kernel parse(const std::string& name) {
    Expected<const Kernel*> kernel = ops::embedded_kernel(name);
    EXPECT_TRUE(kernel.ok()) << kernel.status().to_string();
    return kernel.ok() ? **kernel : Kernel{};
  }

  std::string cache_, old_cache_;
  CpuDevice device_;
};

// C = A @ B in double over the values the kernel sees (bf16-rounded when `bf16`).
std::vector<double> reference_gemm(const std::vector<float>& a, const std::vector<float>& b,
                                   int64_t m, int64_t n, int64_t k) {
  std::vector<double> c(size_t(m * n), 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t p = 0; p < k; ++p)
      for (int64_t j = 0; j < n; ++j)
        c[size_t(i * n + j)] += double(a[size_t(i * k + p)]) * double(b[size_t(p * n + j)]);
  return c;
}

TEST_F(CpuAotTest, DefaultGemmComesFromTheBuildAndMatchesTheReference) {
  Kernel gemm = parse("gemm");
  // Sizes that are no multiple of any block or micro-tile.
  const int64_t m = 67, n = 45, k = 301;
  std::vector<float> a = random_floats(size_t(m * k), 1), b = random_floats(size_t(k * n), 2);
  for (const char* dtype : {"f32", "bf16"}) {
    SCOPED_TRACE(dtype);
    const bool bf16 = std::string(dtype) == "bf16";
    Expected<ops::DeviceKernel> kernel = ops::DeviceKernel::compile(gemm, &device_, {{"T", dtype}});
    ASSERT_TRUE(kernel.ok()) << kernel.status().to_string();
    EXPECT_TRUE(kernel->ahead_of_time());
    EXPECT_FALSE(jit_compiled_anything());

    std::vector<float> av = a, bv = b;
    std::vector<uint16_t> a16(av.size()), b16(bv.size());
    if (bf16) {
      for (size_t i = 0; i < av.size(); ++i)
        av[i] = testing::from_bf16_bits(a16[i] = testing::to_bf16_bits(a[i]));
      for (size_t i = 0; i < bv.size(); ++i)
        bv[i] = testing::from_bf16_bits(b16[i] = testing::to_bf16_bits(b[i]));
    }
    const ScalarType in = bf16 ? ScalarType::kBF16 : ScalarType::kF32;
    std::vector<float> c(size_t(m * n), 0.0f);
    Status s = kernel->launch(
        {TensorArg{bf16 ? static_cast<void*>(a16.data()) : av.data(), in, {m, k}, {}, 0},
         TensorArg{bf16 ? static_cast<void*>(b16.data()) : bv.data(), in, {k, n}, {}, 0},
         TensorArg{c.data(), ScalarType::kF32, {m, n}, {}, 0},
         TensorArg{nullptr, ScalarType::kF32, {n}, {}, 0}, 1.0, 0.0});
    ASSERT_TRUE(s.ok()) << s.to_string();
    // f32 accumulation of k products of numbers in [-1, 1]: |error| <= k * 2^-23 * k / 4 or so;
    // 1e-4 absolute is far above that at k = 301 and far below any indexing mistake.
    expect_close(c, reference_gemm(av, bv, m, n, k), 1e-4, 1e-5, std::string("gemm ") + dtype);
  }
}

TEST_F(CpuAotTest, UnlistedSpecialisationGoesThroughTheJit) {
  Kernel unary = parse("unary");
  Expected<ops::DeviceKernel> kernel =
      ops::DeviceKernel::compile(unary, &device_, {{"T", "f32"}, {"OP", "5"}});  // exp
  ASSERT_TRUE(kernel.ok()) << kernel.status().to_string();
  EXPECT_FALSE(kernel->ahead_of_time());
  EXPECT_TRUE(jit_compiled_anything());
  std::vector<float> x = random_floats(37, 3), y(37, 0.0f);
  ASSERT_TRUE(kernel
                  ->launch({TensorArg{x.data(), ScalarType::kF32, {1, 1, 37}, {}, 0},
                            TensorArg{y.data(), ScalarType::kF32, {1, 1, 37}, {}, 0}, 1.0})
                  .ok());
  std::vector<double> want(x.size());
  for (size_t i = 0; i < x.size(); ++i)
    want[i] = std::exp(double(x[i]));
  expect_close(y, want, 1e-6, 1e-6, "exp");
}

// The lookup is by the rendered source: other block sizes are another kernel, and miss.
TEST_F(CpuAotTest, LookupIsBySource) {
  Kernel gemm = parse("gemm");
  Expected<Kernel> lowered = lower_for_cpu(gemm, {{"T", "f32"}});
  ASSERT_TRUE(lowered.ok());
  EXPECT_TRUE(aot_cpu_module(render_cpu(*lowered), host_cpu_isa()).ok());
  Expected<Kernel> blocked = lower_for_cpu(gemm, {{"T", "f32"}, {"BM", "96"}});
  ASSERT_TRUE(blocked.ok());
  EXPECT_EQ(aot_cpu_module(render_cpu(*blocked), host_cpu_isa()).status().code(), Code::kNotFound);
}

}  // namespace
}  // namespace tessel::tile
