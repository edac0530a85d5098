// CPU device: aligned host allocation under the caching allocator, memcpy copies, and the
// registration that makes get_device("cpu") work.
#include "runtime/cpu/cpu_device.h"

#include <cstdlib>
#include <cstring>

#include "hw/cpu_info.h"

namespace tessel {
namespace {

Expected<DeviceBuffer> allocate_host(size_t bytes) {
  // Block sizes from the caching allocator are multiples of 64, as aligned_alloc requires.
  void* p = std::aligned_alloc(CpuDevice::kAlignment, bytes);
  if (p == nullptr)
    return resource_exhausted("host memory: aligned_alloc of {} bytes failed", bytes);
  return DeviceBuffer{p, bytes};
}

void free_host(DeviceBuffer buffer) {
  std::free(buffer.handle);
}

std::string cpu_name() {
  const std::string& model = host_cpu_info().model;
  return model.empty() ? "host CPU" : model;
}

[[maybe_unused]] const bool kRegistered = register_backend(DeviceKind::kCpu, [] {
  std::vector<std::unique_ptr<Device>> devices;
  devices.push_back(std::make_unique<CpuDevice>());
  return Expected<std::vector<std::unique_ptr<Device>>>(std::move(devices));
});

}  // namespace

CpuDevice::CpuDevice(size_t max_cached_bytes)
    : Device(DeviceKind::kCpu, 0, cpu_name()),
      allocator_("cpu", RawAllocator{allocate_host, free_host}, max_cached_bytes) {}

size_t CpuDevice::default_cache_limit() {
  const int64_t memory = host_cpu_info().memory_bytes;
  return memory > 0 ? static_cast<size_t>(memory / 4) : CachingAllocator::kUnlimited;
}

Status CpuDevice::do_copy_from_host(DeviceBuffer dst, size_t dst_offset, const void* src,
                                    size_t bytes) {
  std::memcpy(static_cast<char*>(dst.handle) + dst_offset, src, bytes);
  return ok_status();
}

Status CpuDevice::do_copy_to_host(void* dst, DeviceBuffer src, size_t src_offset, size_t bytes) {
  std::memcpy(dst, static_cast<const char*>(src.handle) + src_offset, bytes);
  return ok_status();
}

Status CpuDevice::do_copy_on_device(DeviceBuffer dst, size_t dst_offset, DeviceBuffer src,
                                    size_t src_offset, size_t bytes) {
  std::memcpy(static_cast<char*>(dst.handle) + dst_offset,
              static_cast<const char*>(src.handle) + src_offset, bytes);
  return ok_status();
}

}  // namespace tessel
