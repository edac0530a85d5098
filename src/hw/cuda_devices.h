// CUDA devices (through the driver API) and NVRTC (the run-time compiler), as `tessel info` and
// the CUDA runtime see them, plus compiling CUDA C++ to PTX, which needs no GPU.
//
//   Expected<std::vector<CudaDeviceInfo>> gpus = list_cuda_devices();  // "no CUDA device: ..."
//   TESSEL_ASSIGN_OR_RETURN(PtxProgram p, compile_cuda_to_ptx(src, "add.cu", "compute_80"));
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "hw/cuda_api.h"

namespace tessel {

struct CudaDeviceInfo {
  int ordinal = 0;
  std::string name;
  std::int64_t total_mem_bytes = 0;
  int compute_major = 0;  // compute capability, 9.0 for H100
  int compute_minor = 0;
  int multiprocessors = 0;
  int max_threads_per_block = 0;
  int warp_size = 0;
  std::int64_t shared_mem_per_block_bytes = 0;        // without opting in
  std::int64_t shared_mem_per_block_optin_bytes = 0;  // the most a kernel can ask for
  std::int64_t l2_bytes = 0;
  int clock_mhz = 0;
  int memory_clock_mhz = 0;
  int memory_bus_bits = 0;
};

// Every CUDA device; unavailable ("no CUDA device: ...", saying why) where there is none.
Expected<std::vector<CudaDeviceInfo>> list_cuda_devices(const CudaDriverApi& api);
Expected<std::vector<CudaDeviceInfo>> list_cuda_devices();

struct NvrtcInfo {
  std::string library;
  int version_major = 0;
  int version_minor = 0;
  std::vector<int> architectures;  // the sm_XX / compute_XX numbers it can target: 75, 80, ...
};

Expected<NvrtcInfo> nvrtc_info(const NvrtcApi& api);
Expected<NvrtcInfo> nvrtc_info();

// The virtual architecture to compile for so that a GPU of compute capability `cc` (10 * major
// + minor) runs the PTX: the newest of NVRTC's `architectures` that is not newer than the GPU
// ("compute_90" on an H100; "compute_90" too for a newer GPU when this NVRTC stops at 90, since
// the driver assembles older PTX for newer GPUs). not_found when NVRTC supports none that old.
Expected<std::string> ptx_architecture_for(const std::vector<int>& architectures, int cc);

struct PtxProgram {
  std::string ptx;
  std::string log;  // NVRTC's warnings, if any
};

// Compiles CUDA C++ `source` (kernels declared extern "C" keep their names) to PTX for
// `architecture` ("compute_80"; empty: NVRTC's default) with extra NVRTC `options`. A compile
// error is invalid_argument carrying NVRTC's log (file:line of the source named `program_name`).
Expected<PtxProgram> compile_cuda_to_ptx(const NvrtcApi& api, const std::string& source,
                                         const std::string& program_name,
                                         const std::string& architecture,
                                         const std::vector<std::string>& options = {});
Expected<PtxProgram> compile_cuda_to_ptx(const std::string& source, const std::string& program_name,
                                         const std::string& architecture,
                                         const std::vector<std::string>& options = {});

}  // namespace tessel
