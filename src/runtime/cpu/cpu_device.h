// The CPU as a tessel device: memory is 64-byte aligned host memory (a cache line, and the width
// of an AVX-512 register), copies are memcpy, and there is nothing to wait for. Kernels are C++
// (tile/codegen/cpu) taken from the build's ahead-of-time library when it has them, else compiled
// by the JIT (tile/run/cpu_jit.h, cached on disk); a launch runs the grid's blocks on the thread
// pool and returns when they are done, so the queue is always empty.
//
//   Device* cpu = cpu_device();              // the registered one (runtime/device.h)
//   CpuDevice scratch;                       // or a private one, e.g. for tests
#pragma once

#include "runtime/device.h"

namespace tessel {

class CpuDevice final : public Device {
 public:
  static constexpr size_t kAlignment = 64;
  // Blocks of kHugeBlockBytes and more are aligned to kHugePageBytes and advised onto
  // transparent huge pages (cpu_device.cpp): where THP is on, their resident memory grows in
  // 2 MiB steps (plan/memory_plan.cpp counts it so).
  static constexpr size_t kHugePageBytes = size_t{2} << 20;
  static constexpr size_t kHugeBlockBytes = 2 * kHugePageBytes;

  // Released blocks are kept up to max_cached_bytes; by default a quarter of physical memory.
  explicit CpuDevice(size_t max_cached_bytes = default_cache_limit());

  CachingAllocator& allocator() override { return allocator_; }
  void* host_address(DeviceBuffer buffer) const override { return buffer.handle; }
  Status synchronize() override { return ok_status(); }
  DeviceLimits limits() const override;
  Expected<std::shared_ptr<Event>> record_event() override;

  static size_t default_cache_limit();

 protected:
  Status do_copy_from_host(DeviceBuffer dst, size_t dst_offset, const void* src,
                           size_t bytes) override;
  Status do_copy_to_host(void* dst, DeviceBuffer src, size_t src_offset, size_t bytes) override;
  Status do_copy_on_device(DeviceBuffer dst, size_t dst_offset, DeviceBuffer src, size_t src_offset,
                           size_t bytes) override;
  Expected<std::shared_ptr<KernelModule>> do_build(const KernelImage& image) override;
  Status do_launch(const KernelModule& module, const LaunchGrid& grid,
                   const std::vector<KernelArgument>& args) override;

 private:
  CachingAllocator allocator_;
};

}  // namespace tessel
