// Every kernel in kernels/*.tile, rendered for CUDA and compiled with NVRTC (hw/cuda_devices.h,
// the one NVRTC path; no GPU needed): the generated CUDA C++ must compile, and the PTX must define
// the kernel's entry point. Skipped where NVRTC cannot be loaded. Running the kernels needs a GPU
// (the CUDA device, runtime/cuda/).
#include <gtest/gtest.h>

#include <filesystem>

#include "hw/cuda_devices.h"
#include "tile/codegen/abi.h"
#include "tile/codegen/render.h"
#include "tile/parse/parser.h"
#include "tile/pipeline.h"
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
        CompileOptions o;
        o.target = Target::cuda();
        o.params = params;
        auto ir = compile_ir(k, o);
        ASSERT_TRUE(ir.ok()) << ir.status().to_string();
        auto c = compile_cuda_to_ptx(render(*ir, o.target), k.name + ".cu", "compute_80");
        ASSERT_TRUE(c.ok()) << c.status().to_string();
        EXPECT_NE(c->ptx.find(".entry " + entry_name(*ir)), std::string::npos) << c->ptx.substr(0, 2000);
        ++compiled;
      }
    }
  }
  EXPECT_GE(compiled, 8 * 3);  // eight kernels, each in three input types
}

}  // namespace
}  // namespace tessel::tile
