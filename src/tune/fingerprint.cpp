// Device fingerprints for the tuning database (see fingerprint.h).
#include "tune/fingerprint.h"

#include "hw/cpu_info.h"
#include "hw/opencl_devices.h"
#include "support/thread_pool.h"
#include "tile/run/cpu_jit.h"

namespace tessel::tune {

namespace {

std::string opencl_driver(const std::string& name) {
  Expected<std::vector<OpenClDeviceInfo>> devices = list_opencl_devices();
  if (!devices.ok()) return "?";
  for (const OpenClDeviceInfo& d : *devices)
    if (d.name == name) return d.driver_version;
  return "?";
}

}  // namespace

std::string device_fingerprint(Device* device) {
  const DeviceLimits limits = device->limits();
  if (device->kind() == DeviceKind::kCpu) {
    const CpuInfo& cpu = host_cpu_info();
    return fmt::format("cpu {} | {} | L1d {}K L2 {}K L3 {}K | {} threads", cpu.model,
                       tile::host_cpu_isa().name, cpu.caches.l1d_bytes >> 10,
                       cpu.caches.l2_bytes >> 10, cpu.caches.l3_bytes >> 10,
                       ThreadPool::global().num_threads());
  }
  const std::string driver = device->kind() == DeviceKind::kOpenCL
                                 ? opencl_driver(device->name())
                                 : fmt::format("sm_{}", limits.compute_capability);
  return fmt::format("{} {} | driver {} | {} CUs | local {}K",
                     device->kind() == DeviceKind::kOpenCL ? "opencl" : "cuda", device->name(),
                     driver, limits.compute_units, limits.fast_memory_bytes >> 10);
}

}  // namespace tessel::tune
