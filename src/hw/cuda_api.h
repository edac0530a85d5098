// The CUDA driver API (libcuda, installed with the NVIDIA driver) and NVRTC (the run-time CUDA
// C++ compiler, from the CUDA toolkit), loaded at run time. The few types and constants tessel
// needs are declared here, matching cuda.h and nvrtc.h (a test compares them with those headers
// where a toolkit is installed), so building tessel needs no CUDA toolkit and running it needs
// no GPU: a missing library is a Status saying what was looked for and where.
//
//   TESSEL_ASSIGN_OR_RETURN(const CudaDriverApi* cu, cuda_driver_api());   // libcuda + cuInit
//   TESSEL_ASSIGN_OR_RETURN(const NvrtcApi* rtc, nvrtc_api());
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "support/status.h"

namespace tessel {
namespace cuda {

// cuda.h
using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;  // NOLINT: the driver's own spelling, 64-bit
using CUcontext = struct CUctx_st*;
using CUmodule = struct CUmod_st*;
using CUfunction = struct CUfunc_st*;
using CUstream = struct CUstream_st*;
using CUevent = struct CUevent_st*;
using CUdevice_attribute = int;
using CUjit_option = int;
using CUfunction_attribute = int;

inline constexpr CUresult kCudaSuccess = 0;
inline constexpr CUresult kCudaErrorNotInitialized = 3;
inline constexpr CUresult kCudaErrorStubLibrary = 34;
inline constexpr CUresult kCudaErrorNoDevice = 100;
inline constexpr CUresult kCudaErrorNotFound = 500;

inline constexpr unsigned kStreamNonBlocking = 1;   // CU_STREAM_NON_BLOCKING
inline constexpr unsigned kEventDisableTiming = 2;  // CU_EVENT_DISABLE_TIMING

inline constexpr CUdevice_attribute kAttrMaxThreadsPerBlock = 1;
inline constexpr CUdevice_attribute kAttrMaxGridDimX = 5;
inline constexpr CUdevice_attribute kAttrMaxGridDimY = 6;
inline constexpr CUdevice_attribute kAttrMaxGridDimZ = 7;
inline constexpr CUdevice_attribute kAttrMaxSharedMemoryPerBlock = 8;
inline constexpr CUdevice_attribute kAttrWarpSize = 10;
inline constexpr CUdevice_attribute kAttrClockRate = 13;  // kHz
inline constexpr CUdevice_attribute kAttrMultiprocessorCount = 16;
inline constexpr CUdevice_attribute kAttrMemoryClockRate = 36;       // kHz
inline constexpr CUdevice_attribute kAttrGlobalMemoryBusWidth = 37;  // bits
inline constexpr CUdevice_attribute kAttrL2CacheSize = 38;
inline constexpr CUdevice_attribute kAttrComputeCapabilityMajor = 75;
inline constexpr CUdevice_attribute kAttrComputeCapabilityMinor = 76;
inline constexpr CUdevice_attribute kAttrMaxSharedMemoryPerBlockOptin = 97;

inline constexpr CUjit_option kJitInfoLogBuffer = 3;
inline constexpr CUjit_option kJitInfoLogBufferSizeBytes = 4;
inline constexpr CUjit_option kJitErrorLogBuffer = 5;
inline constexpr CUjit_option kJitErrorLogBufferSizeBytes = 6;

inline constexpr CUfunction_attribute kFuncAttrMaxDynamicSharedSizeBytes = 8;

// cuLaunchKernel's `extra`: the parameters packed into one buffer (each at its alignment).
inline void* const kLaunchParamEnd = nullptr;  // CU_LAUNCH_PARAM_END
inline void* const kLaunchParamBufferPointer = reinterpret_cast<void*>(1);
inline void* const kLaunchParamBufferSize = reinterpret_cast<void*>(2);

// nvrtc.h
using nvrtcResult = int;
using nvrtcProgram = struct _nvrtcProgram*;
inline constexpr nvrtcResult kNvrtcSuccess = 0;

}  // namespace cuda

// X(field, symbol, return, parameters). The symbol is the one cuda.h maps the name to (the _v2
// entry points are the 64-bit ones every current driver exports).
#define TESSEL_CUDA_DRIVER_FUNCTIONS(X)                                                           \
  X(cuInit, "cuInit", CUresult, (unsigned flags))                                                 \
  X(cuDriverGetVersion, "cuDriverGetVersion", CUresult, (int* version))                           \
  X(cuGetErrorName, "cuGetErrorName", CUresult, (CUresult error, const char** name))              \
  X(cuGetErrorString, "cuGetErrorString", CUresult, (CUresult error, const char** text))          \
  X(cuDeviceGetCount, "cuDeviceGetCount", CUresult, (int* count))                                 \
  X(cuDeviceGet, "cuDeviceGet", CUresult, (CUdevice * device, int ordinal))                       \
  X(cuDeviceGetName, "cuDeviceGetName", CUresult, (char* name, int length, CUdevice device))      \
  X(cuDeviceTotalMem, "cuDeviceTotalMem_v2", CUresult, (std::size_t * bytes, CUdevice device))    \
  X(cuDeviceGetAttribute, "cuDeviceGetAttribute", CUresult,                                       \
    (int* value, CUdevice_attribute attribute, CUdevice device))                                  \
  X(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", CUresult,                               \
    (CUcontext * context, CUdevice device))                                                       \
  X(cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2", CUresult, (CUdevice device))       \
  X(cuCtxSetCurrent, "cuCtxSetCurrent", CUresult, (CUcontext context))                            \
  X(cuCtxGetCurrent, "cuCtxGetCurrent", CUresult, (CUcontext * context))                          \
  X(cuCtxSynchronize, "cuCtxSynchronize", CUresult, ())                                           \
  X(cuMemGetInfo, "cuMemGetInfo_v2", CUresult, (std::size_t * free, std::size_t * total))         \
  X(cuMemAlloc, "cuMemAlloc_v2", CUresult, (CUdeviceptr * ptr, std::size_t bytes))                \
  X(cuMemFree, "cuMemFree_v2", CUresult, (CUdeviceptr ptr))                                       \
  X(cuMemcpyHtoD, "cuMemcpyHtoD_v2", CUresult,                                                    \
    (CUdeviceptr dst, const void* src, std::size_t bytes))                                        \
  X(cuMemcpyDtoH, "cuMemcpyDtoH_v2", CUresult, (void* dst, CUdeviceptr src, std::size_t bytes))   \
  X(cuMemcpyDtoD, "cuMemcpyDtoD_v2", CUresult,                                                    \
    (CUdeviceptr dst, CUdeviceptr src, std::size_t bytes))                                        \
  X(cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2", CUresult,                                          \
    (CUdeviceptr dst, const void* src, std::size_t bytes, CUstream stream))                       \
  X(cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2", CUresult,                                          \
    (void* dst, CUdeviceptr src, std::size_t bytes, CUstream stream))                             \
  X(cuMemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2", CUresult,                                          \
    (CUdeviceptr dst, CUdeviceptr src, std::size_t bytes, CUstream stream))                       \
  X(cuMemsetD8, "cuMemsetD8_v2", CUresult, (CUdeviceptr dst, unsigned char value, std::size_t n)) \
  X(cuMemsetD8Async, "cuMemsetD8Async", CUresult,                                                 \
    (CUdeviceptr dst, unsigned char value, std::size_t n, CUstream stream))                       \
  X(cuStreamCreate, "cuStreamCreate", CUresult, (CUstream * stream, unsigned flags))              \
  X(cuStreamDestroy, "cuStreamDestroy_v2", CUresult, (CUstream stream))                           \
  X(cuStreamSynchronize, "cuStreamSynchronize", CUresult, (CUstream stream))                      \
  X(cuStreamWaitEvent, "cuStreamWaitEvent", CUresult,                                             \
    (CUstream stream, CUevent event, unsigned flags))                                             \
  X(cuEventCreate, "cuEventCreate", CUresult, (CUevent * event, unsigned flags))                  \
  X(cuEventDestroy, "cuEventDestroy_v2", CUresult, (CUevent event))                               \
  X(cuEventRecord, "cuEventRecord", CUresult, (CUevent event, CUstream stream))                   \
  X(cuEventSynchronize, "cuEventSynchronize", CUresult, (CUevent event))                          \
  X(cuEventElapsedTime, "cuEventElapsedTime", CUresult,                                           \
    (float* milliseconds, CUevent start, CUevent end))                                            \
  X(cuModuleLoadDataEx, "cuModuleLoadDataEx", CUresult,                                           \
    (CUmodule * module, const void* image, unsigned count, CUjit_option* options, void** values)) \
  X(cuModuleUnload, "cuModuleUnload", CUresult, (CUmodule module))                                \
  X(cuModuleGetFunction, "cuModuleGetFunction", CUresult,                                         \
    (CUfunction * function, CUmodule module, const char* name))                                   \
  X(cuFuncSetAttribute, "cuFuncSetAttribute", CUresult,                                           \
    (CUfunction function, CUfunction_attribute attribute, int value))                             \
  X(cuLaunchKernel, "cuLaunchKernel", CUresult,                                                   \
    (CUfunction function, unsigned grid_x, unsigned grid_y, unsigned grid_z, unsigned block_x,    \
     unsigned block_y, unsigned block_z, unsigned shared_bytes, CUstream stream, void** params,   \
     void** extra))

#define TESSEL_NVRTC_FUNCTIONS(X)                                                                \
  X(nvrtcGetErrorString, "nvrtcGetErrorString", const char*, (nvrtcResult result))               \
  X(nvrtcVersion, "nvrtcVersion", nvrtcResult, (int* major, int* minor))                         \
  X(nvrtcGetNumSupportedArchs, "nvrtcGetNumSupportedArchs", nvrtcResult, (int* count))           \
  X(nvrtcGetSupportedArchs, "nvrtcGetSupportedArchs", nvrtcResult, (int* archs))                 \
  X(nvrtcCreateProgram, "nvrtcCreateProgram", nvrtcResult,                                       \
    (nvrtcProgram * program, const char* source, const char* name, int header_count,             \
     const char* const* headers, const char* const* include_names))                              \
  X(nvrtcDestroyProgram, "nvrtcDestroyProgram", nvrtcResult, (nvrtcProgram * program))           \
  X(nvrtcCompileProgram, "nvrtcCompileProgram", nvrtcResult,                                     \
    (nvrtcProgram program, int option_count, const char* const* options))                        \
  X(nvrtcGetPTXSize, "nvrtcGetPTXSize", nvrtcResult, (nvrtcProgram program, std::size_t * size)) \
  X(nvrtcGetPTX, "nvrtcGetPTX", nvrtcResult, (nvrtcProgram program, char* ptx))                  \
  X(nvrtcGetProgramLogSize, "nvrtcGetProgramLogSize", nvrtcResult,                               \
    (nvrtcProgram program, std::size_t * size))                                                  \
  X(nvrtcGetProgramLog, "nvrtcGetProgramLog", nvrtcResult, (nvrtcProgram program, char* log))    \
  X(nvrtcAddNameExpression, "nvrtcAddNameExpression", nvrtcResult,                               \
    (nvrtcProgram program, const char* expression))                                              \
  X(nvrtcGetLoweredName, "nvrtcGetLoweredName", nvrtcResult,                                     \
    (nvrtcProgram program, const char* expression, const char** lowered))

// The lists above name the cuda:: types unqualified; these aliases make them visible in the
// tables' scope.
#define TESSEL_CUDA_TYPE_ALIASES                           \
  using CUresult = cuda::CUresult;                         \
  using CUdevice = cuda::CUdevice;                         \
  using CUdeviceptr = cuda::CUdeviceptr;                   \
  using CUcontext = cuda::CUcontext;                       \
  using CUmodule = cuda::CUmodule;                         \
  using CUfunction = cuda::CUfunction;                     \
  using CUstream = cuda::CUstream;                         \
  using CUevent = cuda::CUevent;                           \
  using CUdevice_attribute = cuda::CUdevice_attribute;     \
  using CUjit_option = cuda::CUjit_option;                 \
  using CUfunction_attribute = cuda::CUfunction_attribute; \
  using nvrtcResult = cuda::nvrtcResult;                   \
  using nvrtcProgram = cuda::nvrtcProgram;

#define TESSEL_CUDA_POINTER(field, symbol, ret, params) \
  using field##_fn = ret(*) params;                     \
  field##_fn field = nullptr;

struct CudaDriverApi {
  TESSEL_CUDA_TYPE_ALIASES
  std::string library;     // the file that was loaded
  int driver_version = 0;  // 12040 for CUDA 12.4
  TESSEL_CUDA_DRIVER_FUNCTIONS(TESSEL_CUDA_POINTER)
};

struct NvrtcApi {
  TESSEL_CUDA_TYPE_ALIASES
  std::string library;
  int version_major = 0;
  int version_minor = 0;
  TESSEL_NVRTC_FUNCTIONS(TESSEL_CUDA_POINTER)
};

#undef TESSEL_CUDA_POINTER
#undef TESSEL_CUDA_TYPE_ALIASES

// Where libcuda and libnvrtc are looked for, in order. $TESSEL_CUDA_LIBRARY, when set, is the
// only driver candidate (read once, at the first call).
const std::vector<std::string>& cuda_driver_library_candidates();
const std::vector<std::string>& nvrtc_library_candidates();

// Loads libcuda and runs cuInit(0). unavailable with "no CUDA device: ..." when the driver
// library is absent, is the toolkit's stub, or finds no device.
Expected<CudaDriverApi> load_cuda_driver_api(const std::vector<std::string>& candidates);
// load_cuda_driver_api(cuda_driver_library_candidates()), once per process.
Expected<const CudaDriverApi*> cuda_driver_api();

Expected<NvrtcApi> load_nvrtc_api(const std::vector<std::string>& candidates);
Expected<const NvrtcApi*> nvrtc_api();

// ok for CUDA_SUCCESS, else "cuMemAlloc: CUDA_ERROR_OUT_OF_MEMORY (2): out of memory".
Status cuda_check(const CudaDriverApi& api, cuda::CUresult result, std::string_view call);
Status nvrtc_check(const NvrtcApi& api, cuda::nvrtcResult result, std::string_view call);

}  // namespace tessel
