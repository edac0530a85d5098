// The CUDA driver and NVRTC loaders. On a machine without the NVIDIA driver (checked here with a
// plain dlopen, not through tessel) every path must end in a "no CUDA device" Status, never a
// crash. NVRTC needs no GPU: a tiny kernel is compiled to PTX and the PTX is checked for the
// kernel's entry and the requested target. The constants tessel declares itself are compared
// with cuda.h where a toolkit is installed.
#include "hw/cuda_api.h"

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "hw/cuda_devices.h"

namespace tessel {
namespace {

bool driver_installed() {
  void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (h) dlclose(h);
  return h != nullptr;
}

TEST(CudaApi, MissingDriverIsNoCudaDevice) {
  Expected<CudaDriverApi> api = load_cuda_driver_api({"libtessel-no-such-cuda.so.1"});
  ASSERT_FALSE(api.ok());
  EXPECT_EQ(api.status().code(), Code::kUnavailable);
  const std::string& m = api.status().message();
  EXPECT_EQ(m.rfind("no CUDA device: ", 0), 0u) << m;
  EXPECT_NE(m.find("libtessel-no-such-cuda.so.1"), std::string::npos) << m;
}

TEST(CudaApi, StubLibraryIsNoCudaDevice) {
  // The toolkit's link-time stub loads and exports everything, but cuInit refuses.
  std::string stub;
  for (const char* p : {"/usr/local/cuda/lib64/stubs/libcuda.so",
                        "/usr/local/cuda/targets/x86_64-linux/lib/stubs/libcuda.so"})
    if (std::filesystem::exists(p)) stub = p;
  if (stub.empty()) GTEST_SKIP() << "no CUDA toolkit stub libcuda.so here";
  Expected<CudaDriverApi> api = load_cuda_driver_api({stub});
  ASSERT_FALSE(api.ok());
  EXPECT_EQ(api.status().code(), Code::kUnavailable);
  EXPECT_NE(api.status().message().find("stub library"), std::string::npos)
      << api.status().message();
}

TEST(CudaDevices, ListedOrNoCudaDevice) {
  Expected<std::vector<CudaDeviceInfo>> devices = list_cuda_devices();
  if (!driver_installed()) {
    ASSERT_FALSE(devices.ok());
    EXPECT_EQ(devices.status().code(), Code::kUnavailable);
    EXPECT_EQ(devices.status().message().rfind("no CUDA device", 0), 0u)
        << devices.status().message();
    return;
  }
  if (!devices.ok()) {  // a driver without a device
    EXPECT_EQ(devices.status().message().rfind("no CUDA device", 0), 0u)
        << devices.status().message();
    return;
  }
  for (const CudaDeviceInfo& d : *devices) {
    SCOPED_TRACE(d.name);
    EXPECT_FALSE(d.name.empty());
    EXPECT_GT(d.total_mem_bytes, 0);
    EXPECT_GE(d.compute_major, 3);
    EXPECT_GT(d.multiprocessors, 0);
    EXPECT_EQ(d.warp_size, 32);
    EXPECT_GE(d.shared_mem_per_block_optin_bytes, d.shared_mem_per_block_bytes);
  }
}

constexpr const char* kVectorAdd = R"(
extern "C" __global__ void tessel_vector_add(const float* a, const float* b, float* c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}
)";

TEST(Nvrtc, CompilesAKernelToPtx) {
  Expected<const NvrtcApi*> rtc = nvrtc_api();
  if (!rtc.ok()) GTEST_SKIP() << "NVRTC not found: " << rtc.status().to_string();
  Expected<NvrtcInfo> info = nvrtc_info(**rtc);
  ASSERT_TRUE(info.ok()) << info.status().to_string();
  EXPECT_GE(info->version_major, 11);
  ASSERT_FALSE(info->architectures.empty());
  // The oldest architecture this NVRTC supports: PTX for it runs on every newer GPU.
  int arch = info->architectures.front();
  Expected<PtxProgram> ptx =
      compile_cuda_to_ptx(**rtc, kVectorAdd, "vector_add.cu", "compute_" + std::to_string(arch));
  ASSERT_TRUE(ptx.ok()) << ptx.status().to_string();
  EXPECT_NE(ptx->ptx.find(".entry tessel_vector_add("), std::string::npos) << ptx->ptx;
  EXPECT_NE(ptx->ptx.find(".target sm_" + std::to_string(arch)), std::string::npos) << ptx->ptx;
  EXPECT_NE(ptx->ptx.find("add.f32"), std::string::npos) << ptx->ptx;
}

TEST(Nvrtc, CompileErrorCarriesTheLog) {
  Expected<const NvrtcApi*> rtc = nvrtc_api();
  if (!rtc.ok()) GTEST_SKIP() << "NVRTC not found: " << rtc.status().to_string();
  Expected<PtxProgram> ptx = compile_cuda_to_ptx(
      **rtc, "extern \"C\" __global__ void broken(float* x) { x[0] = undefined_name; }\n",
      "broken.cu", "");
  ASSERT_FALSE(ptx.ok());
  EXPECT_EQ(ptx.status().code(), Code::kInvalidArgument);
  const std::string& m = ptx.status().message();
  EXPECT_NE(m.find("broken.cu(1)"), std::string::npos) << m;  // file(line) from NVRTC's log
  EXPECT_NE(m.find("undefined_name"), std::string::npos) << m;
}

TEST(Nvrtc, MissingLibraryIsAClearStatus) {
  Expected<NvrtcApi> api = load_nvrtc_api({"libtessel-no-such-nvrtc.so"});
  ASSERT_FALSE(api.ok());
  EXPECT_EQ(api.status().code(), Code::kUnavailable);
  EXPECT_NE(api.status().message().find("NVRTC"), std::string::npos);
  EXPECT_NE(api.status().message().find("libtessel-no-such-nvrtc.so"), std::string::npos);
}

TEST(CudaApi, ConstantsMatchTheToolkitHeader) {
  const char* header = "/usr/local/cuda/include/cuda.h";
  if (!std::filesystem::exists(header)) GTEST_SKIP() << "no CUDA toolkit headers here";
  std::stringstream text;
  text << std::ifstream(header).rdbuf();
  std::string h = text.str();
  auto value_of = [&](const std::string& name) {
    std::smatch m;
    std::regex re("\\b" + name + "\\s*=\\s*(\\d+)");
    return std::regex_search(h, m, re) ? std::stoi(m[1]) : -1;
  };
  EXPECT_EQ(value_of("CUDA_ERROR_NOT_INITIALIZED"), cuda::kCudaErrorNotInitialized);
  EXPECT_EQ(value_of("CUDA_ERROR_STUB_LIBRARY"), cuda::kCudaErrorStubLibrary);
  EXPECT_EQ(value_of("CUDA_ERROR_NO_DEVICE"), cuda::kCudaErrorNoDevice);
  EXPECT_EQ(value_of("CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK"), cuda::kAttrMaxThreadsPerBlock);
  EXPECT_EQ(value_of("CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK"),
            cuda::kAttrMaxSharedMemoryPerBlock);
  EXPECT_EQ(value_of("CU_DEVICE_ATTRIBUTE_WARP_SIZE"), cuda::kAttrWarpSize);
  EXPECT_EQ(value_of("CU_DEVICE_ATTRIBUTE_CLOCK_RATE"), cuda::kAttrClockRate);
  EXPECT_EQ(value_of("CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT"), cuda::kAttrMultiprocessorCount);
  EXPECT_EQ(value_of("CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE"), cuda::kAttrMemoryClockRate);
  EXPECT_EQ(value_of("CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH"),
            cuda::kAttrGlobalMemoryBusWidth);
  EXPECT_EQ(value_of("CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE"), cuda::kAttrL2CacheSize);
  EXPECT_EQ(value_of("CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR"),
            cuda::kAttrComputeCapabilityMajor);
  EXPECT_EQ(value_of("CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR"),
            cuda::kAttrComputeCapabilityMinor);
  EXPECT_EQ(value_of("CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN"),
            cuda::kAttrMaxSharedMemoryPerBlockOptin);
  EXPECT_EQ(value_of("CU_JIT_INFO_LOG_BUFFER"), cuda::kJitInfoLogBuffer);
  EXPECT_EQ(value_of("CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES"), cuda::kJitInfoLogBufferSizeBytes);
  EXPECT_EQ(value_of("CU_JIT_ERROR_LOG_BUFFER"), cuda::kJitErrorLogBuffer);
  EXPECT_EQ(value_of("CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES"), cuda::kJitErrorLogBufferSizeBytes);
  EXPECT_EQ(value_of("CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES"),
            cuda::kFuncAttrMaxDynamicSharedSizeBytes);
  EXPECT_EQ(value_of("CUDA_ERROR_NOT_FOUND"), cuda::kCudaErrorNotFound);
  EXPECT_EQ(value_of("CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X"), cuda::kAttrMaxGridDimX);
  EXPECT_EQ(value_of("CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y"), cuda::kAttrMaxGridDimY);
  EXPECT_EQ(value_of("CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z"), cuda::kAttrMaxGridDimZ);
  // Flags and the markers of cuLaunchKernel's `extra` are written in hex or as #defines.
  auto hex_value_of = [&](const std::string& name) {
    std::smatch m;
    std::regex re("\\b" + name + "\\s*=?\\s*\\(?0x([0-9a-fA-F]+)");
    return std::regex_search(h, m, re) ? std::stoi(m[1].str(), nullptr, 16) : -1;
  };
  EXPECT_EQ(hex_value_of("CU_STREAM_NON_BLOCKING"), static_cast<int>(cuda::kStreamNonBlocking));
  EXPECT_EQ(hex_value_of("CU_EVENT_DISABLE_TIMING"), static_cast<int>(cuda::kEventDisableTiming));
  EXPECT_EQ(hex_value_of("CU_LAUNCH_PARAM_BUFFER_POINTER_AS_INT"),
            static_cast<int>(reinterpret_cast<std::uintptr_t>(cuda::kLaunchParamBufferPointer)));
  EXPECT_EQ(hex_value_of("CU_LAUNCH_PARAM_BUFFER_SIZE_AS_INT"),
            static_cast<int>(reinterpret_cast<std::uintptr_t>(cuda::kLaunchParamBufferSize)));
}

}  // namespace
}  // namespace tessel
