// Every kernel in kernels/*.tile, compiled for CUDA with NVRTC (no GPU needed): the generated
// CUDA C++ must compile, and the PTX must define the kernel's entry point. Skipped where NVRTC
// cannot be loaded. Running the kernels needs a GPU (see docs/TILE.md for the manual check).
#include "tile/run/cuda_kernel.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "hw/cuda_api.h"
#include "tile/parse/parser.h"
#include "tile/run/test_util.h"

namespace tessel::tile {
namespace {

TEST(CudaKernel, EveryKernelCompilesWithNvrtc) {
  auto rtc = nvrtc_api();
  if (!rtc.ok()) GTEST_SKIP() << rtc.status().to_string();
  int compiled = 0;
  for (const auto& entry : std::filesystem::directory_iterator(testing::kernels_dir())) {
    if (entry.path().extension() != ".tile") continue;
    auto kernels = parse_tile_file(entry.path().string());
    ASSERT_TRUE(kernels.ok()) << kernels.status().to_string();
    for (const Kernel& k : *kernels) {
      // The kernel's own GPU defaults; each 16-bit input type once.
      std::vector<std::map<std::string, std::string>> variants = {{}};
      if (k.find_param("T")) {
        auto base = variants[0];
        for (const char* t : {"bf16", "f16"}) {
          auto v = base;
          v["T"] = t;
          variants.push_back(v);
        }
      }
      for (const auto& params : variants) {
        SCOPED_TRACE(fmt::format("{} {}", k.name, params.count("T") ? params.at("T") : "f32"));
        auto c = CudaKernel::compile(k, Target::cuda(), params);
        ASSERT_TRUE(c.ok()) << c.status().to_string();
        EXPECT_NE(c->ptx().find(".entry tessel_" + k.name), std::string::npos) << c->ptx().substr(0, 2000);
        ++compiled;
      }
    }
  }
  EXPECT_GE(compiled, 8 * 3);  // eight kernels, each in three input types
}

TEST(CudaKernel, LaunchWithoutGpuSaysSo) {
  auto rtc = nvrtc_api();
  if (!rtc.ok()) GTEST_SKIP() << rtc.status().to_string();
  if (cuda_driver_api().ok()) GTEST_SKIP() << "a CUDA device is present";
  auto k = parse_kernel("kernel k(x: f32[N]) { grid (N) as (b) { } }", "k.tile");
  ASSERT_TRUE(k.ok());
  auto c = CudaKernel::compile(*k);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  Status s = c->launch({TensorArg{nullptr, ScalarType::kF32, {4}, {}}});
  EXPECT_EQ(s.code(), Code::kUnavailable) << s.to_string();
}

}  // namespace
}  // namespace tessel::tile
