// An OpenCL device as a tessel Device (runtime/device.h): one context and one in-order queue;
// memory is cl_mem buffers from the device's caching allocator; kernels are OpenCL C built by the
// driver (opencl_program.h); launches and device copies are queued and never waited for, events
// are markers. Registered as "opencl:N", N counting the devices that opened, across platforms in
// the ICD loader's order (the order of `tessel info`).
//
//   TESSEL_ASSIGN_OR_RETURN(Device* dev, get_device("opencl:0"));
//   TESSEL_ASSIGN_OR_RETURN(auto module, dev->build({"add", "add", opencl_c_source, ""}));
//   TESSEL_TRY(dev->launch(*module, {{groups, 1, 1}, 64}, {KernelArgument::memory(buffer), ...}));
#pragma once

#include <memory>

#include "runtime/device.h"
#include "runtime/opencl/opencl_context.h"
#include "runtime/opencl/opencl_program.h"

namespace tessel {

class OpenClDevice final : public Device {
 public:
  // Released blocks are kept up to max_cached_bytes; by default a quarter of the device memory.
  OpenClDevice(int index, std::shared_ptr<OpenClContext> context);
  OpenClDevice(int index, std::shared_ptr<OpenClContext> context, size_t max_cached_bytes);

  CachingAllocator& allocator() override { return allocator_; }
  // cl_mem buffers have no host address, even on a CPU device (that would need a map).
  void* host_address(DeviceBuffer) const override { return nullptr; }
  Status synchronize() override { return context_->finish(); }
  DeviceLimits limits() const override;
  Expected<std::shared_ptr<Event>> record_event() override;
  Status wait_event(const Event& event) override;

  // The context and queue, for tests and tools that talk to OpenCL directly.
  const std::shared_ptr<OpenClContext>& context() const { return context_; }

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
  std::shared_ptr<OpenClContext> context_;  // declared first: the allocator frees through it
  CachingAllocator allocator_;
};

// The cl_mem behind a buffer of an OpenClDevice, for kernel arguments.
inline cl_mem opencl_mem(DeviceBuffer buffer) {
  return static_cast<cl_mem>(buffer.handle);
}

// One OpenClDevice per OpenCL device here; unavailable without an ICD loader. The registry calls
// this (registered in opencl_device.cpp); tests may call it for private instances.
Expected<std::vector<std::unique_ptr<Device>>> enumerate_opencl_devices();

}  // namespace tessel
