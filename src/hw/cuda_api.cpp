// Loading libcuda and libnvrtc, and turning their result codes into Status.
#include "hw/cuda_api.h"

#include <cstdlib>

#include "hw/dynamic_library.h"

namespace tessel {
namespace {

#define TESSEL_CUDA_BIND(field, symbol, ret, params) TESSEL_TRY(lib->bind(api.field, symbol));

// The stub libcuda in the toolkit (lib64/stubs) exists only to link against; it is never a
// candidate, and cuInit's kCudaErrorStubLibrary says so when one is found anyway.
// $TESSEL_CUDA_LIBRARY replaces the list (tests point it at a recording stand-in, as for NCCL).
std::vector<std::string> make_driver_candidates() {
  if (const char* path = std::getenv("TESSEL_CUDA_LIBRARY"); path && *path) return {path};
  return {"libcuda.so.1", "libcuda.so",
          "/usr/lib/wsl/lib/libcuda.so.1"};  // Windows Subsystem for Linux keeps it here
}

std::vector<std::string> make_nvrtc_candidates() {
  // Bare names first (LD_LIBRARY_PATH, ld.so.cache); then toolkits named by the environment and
  // the default install location, which ld.so.cache does not always list.
  std::vector<std::string> names = {"libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12",
                                    "libnvrtc.so.11.2"};
  std::vector<std::string> roots;
  for (const char* var : {"CUDA_HOME", "CUDA_PATH"})
    if (const char* v = std::getenv(var); v && *v) roots.emplace_back(v);
  roots.emplace_back("/usr/local/cuda");
  for (const std::string& root : roots)
    for (const char* file : {"libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12"})
      names.push_back(root + "/lib64/" + file);
  return names;
}

}  // namespace

const std::vector<std::string>& cuda_driver_library_candidates() {
  static const std::vector<std::string> names = make_driver_candidates();
  return names;
}

const std::vector<std::string>& nvrtc_library_candidates() {
  static const std::vector<std::string> names = make_nvrtc_candidates();
  return names;
}

Expected<CudaDriverApi> load_cuda_driver_api(const std::vector<std::string>& candidates) {
  Expected<DynamicLibrary> lib = DynamicLibrary::open_first(
      candidates, "the CUDA driver library libcuda (installed with the NVIDIA driver)");
  if (!lib) return unavailable("no CUDA device: {}", lib.status().message());
  CudaDriverApi api;
  api.library = lib->name();
  TESSEL_CUDA_DRIVER_FUNCTIONS(TESSEL_CUDA_BIND)
  cuda::CUresult init = api.cuInit(0);
  if (init == cuda::kCudaErrorStubLibrary)
    return unavailable(
        "no CUDA device: {} is the CUDA toolkit's stub library, not a driver (install the "
        "NVIDIA driver)",
        api.library);
  if (init == cuda::kCudaErrorNoDevice)
    return unavailable("no CUDA device: the driver ({}) found none", api.library);
  if (init != cuda::kCudaSuccess)
    return unavailable("no CUDA device: {}", cuda_check(api, init, "cuInit").message());
  TESSEL_TRY(cuda_check(api, api.cuDriverGetVersion(&api.driver_version), "cuDriverGetVersion"));
  return api;
}

Expected<const CudaDriverApi*> cuda_driver_api() {
  static const Expected<CudaDriverApi> api = load_cuda_driver_api(cuda_driver_library_candidates());
  if (!api) return api.status();
  return &*api;
}

Expected<NvrtcApi> load_nvrtc_api(const std::vector<std::string>& candidates) {
  Expected<DynamicLibrary> lib =
      DynamicLibrary::open_first(candidates, "NVRTC, the CUDA run-time compiler (libnvrtc)");
  if (!lib) return lib.status();
  NvrtcApi api;
  api.library = lib->name();
  TESSEL_NVRTC_FUNCTIONS(TESSEL_CUDA_BIND)
  TESSEL_TRY(
      nvrtc_check(api, api.nvrtcVersion(&api.version_major, &api.version_minor), "nvrtcVersion"));
  return api;
}

Expected<const NvrtcApi*> nvrtc_api() {
  static const Expected<NvrtcApi> api = load_nvrtc_api(nvrtc_library_candidates());
  if (!api) return api.status();
  return &*api;
}

Status cuda_check(const CudaDriverApi& api, cuda::CUresult result, std::string_view call) {
  if (result == cuda::kCudaSuccess) return ok_status();
  const char* name = nullptr;
  const char* text = nullptr;
  if (api.cuGetErrorName) api.cuGetErrorName(result, &name);
  if (api.cuGetErrorString) api.cuGetErrorString(result, &text);
  constexpr cuda::CUresult kOutOfMemory = 2;
  Code code = result == kOutOfMemory ? Code::kResourceExhausted : Code::kInternal;
  return Status(code, fmt::format("{}: {} ({}): {}", call, name ? name : "CUDA error", result,
                                  text ? text : "no description"));
}

Status nvrtc_check(const NvrtcApi& api, cuda::nvrtcResult result, std::string_view call) {
  if (result == cuda::kNvrtcSuccess) return ok_status();
  const char* text = api.nvrtcGetErrorString ? api.nvrtcGetErrorString(result) : nullptr;
  return internal_error("{}: {} ({})", call, text ? text : "NVRTC error", result);
}

}  // namespace tessel
