// The OpenCL devices on this machine, one entry per (platform, device), with what a kernel
// generator needs to size its work: compute units, local and global memory, work-group limits.
//
//   Expected<std::vector<OpenClDeviceInfo>> devices = list_opencl_devices();
//   if (!devices) log_info("{}", devices.status().to_string());   // no ICD loader
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "hw/opencl_api.h"

namespace tessel {

struct OpenClDeviceInfo {
  int platform_index = 0;  // order of clGetPlatformIDs
  int device_index = 0;    // order of clGetDeviceIDs within the platform
  cl_platform_id platform = nullptr;
  cl_device_id device = nullptr;
  std::string platform_name;     // "Portable Computing Language"
  std::string platform_vendor;
  std::string platform_version;  // "OpenCL 3.0 PoCL 3.1 ..."
  std::string name;              // "pthread-skylake-avx512-AMD EPYC"
  std::string vendor;
  std::string version;           // "OpenCL 3.0 PoCL HSTR: ..."
  std::string driver_version;
  std::string opencl_c_version;  // "OpenCL C 1.2 PoCL"
  std::string type;              // "cpu", "gpu", "accelerator", "custom"
  std::uint32_t compute_units = 0;
  std::uint32_t max_clock_mhz = 0;
  std::uint64_t global_mem_bytes = 0;
  std::uint64_t max_alloc_bytes = 0;
  std::uint64_t local_mem_bytes = 0;
  bool local_mem_dedicated = false;  // real on-chip memory (CL_LOCAL) or emulated in global
  std::size_t max_work_group_size = 0;
  std::vector<std::size_t> max_work_item_sizes;
  std::uint32_t preferred_vector_width_float = 0;
  bool fp16 = false;  // cl_khr_fp16
  bool fp64 = false;  // cl_khr_fp64
};

// Every device of every platform. An empty list when the loader is there but no driver is; an
// error (unavailable) when there is no loader.
Expected<std::vector<OpenClDeviceInfo>> list_opencl_devices(const OpenClApi& api);
Expected<std::vector<OpenClDeviceInfo>> list_opencl_devices();

}  // namespace tessel
