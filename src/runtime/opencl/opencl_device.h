// An OpenCL device as a tessel Device (runtime/device.h): memory is cl_mem buffers from the
// device's caching allocator, copies go through its in-order queue. Registered as "opencl:N", N
// counting the devices that opened, across platforms in the ICD loader's order (the order of
// `tessel info`).
//
//   TESSEL_ASSIGN_OR_RETURN(Device* dev, get_device("opencl:0"));
//   auto* cl = static_cast<OpenClDevice*>(dev);
//   TESSEL_ASSIGN_OR_RETURN(OpenClProgram p, OpenClProgram::build(cl->context(), src, "", "k.cl"));
//   kernel.set_arg(0, opencl_mem(buffer));
#pragma once

#include <memory>

#include "runtime/device.h"
#include "runtime/opencl/opencl_context.h"

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

  // For building programs and launching kernels on this device's queue (opencl_program.h).
  const std::shared_ptr<OpenClContext>& context() const { return context_; }

 protected:
  Status do_copy_from_host(DeviceBuffer dst, size_t dst_offset, const void* src,
                           size_t bytes) override;
  Status do_copy_to_host(void* dst, DeviceBuffer src, size_t src_offset, size_t bytes) override;
  Status do_copy_on_device(DeviceBuffer dst, size_t dst_offset, DeviceBuffer src, size_t src_offset,
                           size_t bytes) override;

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
