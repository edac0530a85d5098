// Everything tessel knows about this machine in one value, as `tessel info` prints it: the CPU,
// the measured figures, OpenCL and CUDA devices and NVRTC, each device family with the Status
// that explains an absence. Also the JSON form (`tessel info --json`) for scripts and for
// benchmark reports that record the hardware they ran on.
//
//   HardwareReport r = collect_hardware_report({.remeasure = false});
//   std::puts(hardware_report_text(r).c_str());
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "hw/cpu_info.h"
#include "hw/cuda_devices.h"
#include "hw/measure.h"
#include "hw/opencl_devices.h"

namespace tessel {

struct HardwareReportOptions {
  bool remeasure = false;  // ignore the cached measured figures
};

struct HardwareReport {
  CpuInfo cpu;
  MeasuredLookup measured;
  Expected<std::vector<OpenClDeviceInfo>> opencl = std::vector<OpenClDeviceInfo>{};
  Expected<std::vector<CudaDeviceInfo>> cuda = std::vector<CudaDeviceInfo>{};
  Expected<NvrtcInfo> nvrtc = NvrtcInfo{};
};

HardwareReport collect_hardware_report(const HardwareReportOptions& options);

// One object (keys in this order): cpu{model, vendor, cores, threads, ...}, isa[], caches{l1d, l2, l3 bytes},
// memory_bytes, measured{bandwidth_gbs, peak_f32_gflops, peak_bf16_gflops}, opencl[],
// opencl_status, cuda[], cuda_status, nvrtc{available, version, ...}.
nlohmann::ordered_json hardware_report_json(const HardwareReport& report);

// The compact human-readable report.
std::string hardware_report_text(const HardwareReport& report);

}  // namespace tessel
