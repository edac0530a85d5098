// Listing CUDA devices, describing NVRTC, and compiling CUDA C++ to PTX with it.
#include "hw/cuda_devices.h"

#include <memory>

namespace tessel {

Expected<std::vector<CudaDeviceInfo>> list_cuda_devices(const CudaDriverApi& cu) {
  int count = 0;
  TESSEL_TRY(cuda_check(cu, cu.cuDeviceGetCount(&count), "cuDeviceGetCount"));
  if (count == 0) return unavailable("no CUDA device: the driver ({}) reports 0", cu.library);
  std::vector<CudaDeviceInfo> out;
  for (int i = 0; i < count; ++i) {
    cuda::CUdevice dev = 0;
    TESSEL_TRY(cuda_check(cu, cu.cuDeviceGet(&dev, i), "cuDeviceGet"));
    CudaDeviceInfo info;
    info.ordinal = i;
    char name[256] = {};
    TESSEL_TRY(cuda_check(cu, cu.cuDeviceGetName(name, sizeof name - 1, dev), "cuDeviceGetName"));
    info.name = name;
    std::size_t total = 0;
    TESSEL_TRY(cuda_check(cu, cu.cuDeviceTotalMem(&total, dev), "cuDeviceTotalMem"));
    info.total_mem_bytes = static_cast<std::int64_t>(total);
    auto attribute = [&](cuda::CUdevice_attribute a, auto* out_value) -> Status {
      int v = 0;
      TESSEL_TRY(cuda_check(cu, cu.cuDeviceGetAttribute(&v, a, dev), "cuDeviceGetAttribute"));
      *out_value = v;
      return ok_status();
    };
    TESSEL_TRY(attribute(cuda::kAttrComputeCapabilityMajor, &info.compute_major));
    TESSEL_TRY(attribute(cuda::kAttrComputeCapabilityMinor, &info.compute_minor));
    TESSEL_TRY(attribute(cuda::kAttrMultiprocessorCount, &info.multiprocessors));
    TESSEL_TRY(attribute(cuda::kAttrMaxThreadsPerBlock, &info.max_threads_per_block));
    TESSEL_TRY(attribute(cuda::kAttrWarpSize, &info.warp_size));
    TESSEL_TRY(attribute(cuda::kAttrMaxSharedMemoryPerBlock, &info.shared_mem_per_block_bytes));
    TESSEL_TRY(
        attribute(cuda::kAttrMaxSharedMemoryPerBlockOptin, &info.shared_mem_per_block_optin_bytes));
    TESSEL_TRY(attribute(cuda::kAttrL2CacheSize, &info.l2_bytes));
    TESSEL_TRY(attribute(cuda::kAttrClockRate, &info.clock_mhz));
    TESSEL_TRY(attribute(cuda::kAttrMemoryClockRate, &info.memory_clock_mhz));
    TESSEL_TRY(attribute(cuda::kAttrGlobalMemoryBusWidth, &info.memory_bus_bits));
    info.clock_mhz /= 1000;  // the driver reports kHz
    info.memory_clock_mhz /= 1000;
    out.push_back(std::move(info));
  }
  return out;
}

Expected<std::vector<CudaDeviceInfo>> list_cuda_devices() {
  TESSEL_ASSIGN_OR_RETURN(const CudaDriverApi* cu, cuda_driver_api());
  return list_cuda_devices(*cu);
}

Expected<NvrtcInfo> nvrtc_info(const NvrtcApi& rtc) {
  NvrtcInfo info;
  info.library = rtc.library;
  info.version_major = rtc.version_major;
  info.version_minor = rtc.version_minor;
  int count = 0;
  TESSEL_TRY(nvrtc_check(rtc, rtc.nvrtcGetNumSupportedArchs(&count), "nvrtcGetNumSupportedArchs"));
  info.architectures.resize(count);
  TESSEL_TRY(nvrtc_check(rtc, rtc.nvrtcGetSupportedArchs(info.architectures.data()),
                         "nvrtcGetSupportedArchs"));
  return info;
}

Expected<NvrtcInfo> nvrtc_info() {
  TESSEL_ASSIGN_OR_RETURN(const NvrtcApi* rtc, nvrtc_api());
  return nvrtc_info(*rtc);
}

Expected<std::string> ptx_architecture_for(const std::vector<int>& architectures, int cc) {
  int best = 0;
  for (int a : architectures)
    if (a <= cc && a > best) best = a;
  if (best == 0) {
    std::string list;
    for (int a : architectures)
      list += (list.empty() ? "" : ", ") + std::to_string(a);
    return not_found("NVRTC cannot compile for compute capability {}.{} (it supports {})", cc / 10,
                     cc % 10, list);
  }
  return fmt::format("compute_{}", best);
}

Expected<PtxProgram> compile_cuda_to_ptx(const NvrtcApi& rtc, const std::string& source,
                                         const std::string& program_name,
                                         const std::string& architecture,
                                         const std::vector<std::string>& options) {
  cuda::nvrtcProgram raw = nullptr;
  TESSEL_TRY(nvrtc_check(
      rtc, rtc.nvrtcCreateProgram(&raw, source.c_str(), program_name.c_str(), 0, nullptr, nullptr),
      "nvrtcCreateProgram"));
  auto destroy = [&rtc](cuda::nvrtcProgram p) { rtc.nvrtcDestroyProgram(&p); };
  std::unique_ptr<std::remove_pointer_t<cuda::nvrtcProgram>, decltype(destroy)> program(raw,
                                                                                        destroy);

  std::vector<std::string> all_options;
  if (!architecture.empty()) all_options.push_back("--gpu-architecture=" + architecture);
  all_options.insert(all_options.end(), options.begin(), options.end());
  std::vector<const char*> argv;
  for (const std::string& o : all_options)
    argv.push_back(o.c_str());
  cuda::nvrtcResult compiled =
      rtc.nvrtcCompileProgram(raw, static_cast<int>(argv.size()), argv.data());

  PtxProgram out;
  std::size_t log_size = 0;
  TESSEL_TRY(
      nvrtc_check(rtc, rtc.nvrtcGetProgramLogSize(raw, &log_size), "nvrtcGetProgramLogSize"));
  out.log.resize(log_size);
  if (log_size > 0)
    TESSEL_TRY(nvrtc_check(rtc, rtc.nvrtcGetProgramLog(raw, out.log.data()), "nvrtcGetProgramLog"));
  while (!out.log.empty() && (out.log.back() == '\0' || out.log.back() == '\n'))
    out.log.pop_back();
  if (compiled != cuda::kNvrtcSuccess)
    return invalid_argument("compiling {} with NVRTC {}.{}: {}\n{}", program_name,
                            rtc.version_major, rtc.version_minor, rtc.nvrtcGetErrorString(compiled),
                            out.log);

  std::size_t ptx_size = 0;
  TESSEL_TRY(nvrtc_check(rtc, rtc.nvrtcGetPTXSize(raw, &ptx_size), "nvrtcGetPTXSize"));
  out.ptx.resize(ptx_size);
  TESSEL_TRY(nvrtc_check(rtc, rtc.nvrtcGetPTX(raw, out.ptx.data()), "nvrtcGetPTX"));
  while (!out.ptx.empty() && out.ptx.back() == '\0')
    out.ptx.pop_back();
  return out;
}

Expected<PtxProgram> compile_cuda_to_ptx(const std::string& source, const std::string& program_name,
                                         const std::string& architecture,
                                         const std::vector<std::string>& options) {
  TESSEL_ASSIGN_OR_RETURN(const NvrtcApi* rtc, nvrtc_api());
  return compile_cuda_to_ptx(*rtc, source, program_name, architecture, options);
}

}  // namespace tessel
