// The CUDA context and modules. Without a GPU (CI) creating a context must say "no CUDA device"
// and the source still compiles to PTX through NVRTC; with one, a vector add runs and matches the
// host.
#include "runtime/cuda/cuda_context.h"

#include <gtest/gtest.h>

#include <vector>

namespace tessel {
namespace {

constexpr const char* kVectorAdd = R"(
extern "C" __global__ void vector_add(const float* a, const float* b, float* c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}
)";

TEST(CudaContext, CreateExplainsAnAbsentDevice) {
  Expected<std::shared_ptr<CudaContext>> gpu = CudaContext::create(0);
  if (gpu.ok()) GTEST_SKIP() << "a CUDA device is present: " << (*gpu)->info().name;
  EXPECT_EQ(gpu.status().code(), Code::kUnavailable);
  EXPECT_EQ(gpu.status().message().rfind("no CUDA device", 0), 0u) << gpu.status().message();
}

TEST(CudaContext, VectorAddSourceCompilesWithoutAGpu) {
  Expected<const NvrtcApi*> rtc = nvrtc_api();
  if (!rtc.ok()) GTEST_SKIP() << "NVRTC not found: " << rtc.status().to_string();
  Expected<PtxProgram> ptx = compile_cuda_to_ptx(kVectorAdd, "vector_add.cu", "");
  ASSERT_TRUE(ptx.ok()) << ptx.status().to_string();
  EXPECT_NE(ptx->ptx.find(".entry vector_add("), std::string::npos);
}

TEST(CudaContext, VectorAddMatchesTheHost) {
  Expected<std::shared_ptr<CudaContext>> gpu = CudaContext::create(0);
  if (!gpu.ok()) GTEST_SKIP() << gpu.status().to_string();
  auto ctx = *gpu;
  // PTX for this GPU's own compute capability, as CudaDevice::build does.
  Expected<NvrtcInfo> rtc = nvrtc_info();
  ASSERT_TRUE(rtc.ok()) << rtc.status().to_string();
  const int cc = 10 * ctx->info().compute_major + ctx->info().compute_minor;
  Expected<std::string> arch = ptx_architecture_for(rtc->architectures, cc);
  ASSERT_TRUE(arch.ok()) << arch.status().to_string();
  Expected<PtxProgram> ptx = compile_cuda_to_ptx(kVectorAdd, "vector_add.cu", *arch);
  ASSERT_TRUE(ptx.ok()) << ptx.status().to_string();
  Expected<std::unique_ptr<CudaModule>> module = CudaModule::load_ptx(ctx, ptx->ptx, "vector_add");
  ASSERT_TRUE(module.ok()) << module.status().to_string();
  Expected<CudaFunction> f = (*module)->function("vector_add");
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  EXPECT_EQ((*module)->function("vector_sub").status().code(), Code::kNotFound);

  const int n = 1000;
  std::vector<float> a(n), b(n), c(n, -1.0f);
  for (int i = 0; i < n; ++i) {
    a[i] = 0.5f * static_cast<float>(i);
    b[i] = 1000.0f - static_cast<float>(i);
  }
  const std::size_t bytes = n * sizeof(float);
  auto da = ctx->allocate(bytes), db = ctx->allocate(bytes), dc = ctx->allocate(bytes);
  ASSERT_TRUE(da.ok() && db.ok() && dc.ok());
  ASSERT_TRUE(ctx->write(*da, a.data(), bytes).ok());
  ASSERT_TRUE(ctx->write(*db, b.data(), bytes).ok());
  PackedArguments args;
  args.add(*da);
  args.add(*db);
  args.add(*dc);
  args.add(n);
  Status launched = f->launch({(n + 255) / 256, 1, 1}, {256, 1, 1}, 0, args);
  ASSERT_TRUE(launched.ok()) << launched.to_string();
  ASSERT_TRUE(ctx->read(c.data(), *dc, bytes).ok());
  for (int i = 0; i < n; ++i)
    ASSERT_EQ(c[i], a[i] + b[i]) << "at " << i;
  ctx->release(*da);
  ctx->release(*db);
  ctx->release(*dc);
}

}  // namespace
}  // namespace tessel
