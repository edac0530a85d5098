// One OpenCL device ready for work: its context, an in-order command queue, and raw cl_mem
// memory and copies. The OpenCL Device (opencl_device.h) and the program helpers
// (opencl_program.h) are built on this; everyone else goes through the Device.
//
//   TESSEL_ASSIGN_OR_RETURN(auto ctx, OpenClContext::create(devices[0]));
//   TESSEL_ASSIGN_OR_RETURN(cl_mem mem, ctx->allocate(4096));
//   TESSEL_TRY(ctx->write(mem, 0, host.data(), 4096));
#pragma once

#include <cstddef>
#include <memory>

#include "hw/opencl_devices.h"

namespace tessel {

class OpenClContext {
 public:
  // A context and an in-order queue on `device`; profiling is enabled on the queue so kernels
  // can be timed through their events.
  static Expected<std::shared_ptr<OpenClContext>> create(const OpenClDeviceInfo& device);
  // The first device of the first platform (what tests and `--device opencl` use by default);
  // unavailable when there is no ICD loader or no device.
  static Expected<std::shared_ptr<OpenClContext>> create_default();

  ~OpenClContext();
  OpenClContext(const OpenClContext&) = delete;
  OpenClContext& operator=(const OpenClContext&) = delete;

  const OpenClApi& api() const { return *api_; }
  const OpenClDeviceInfo& device() const { return device_; }
  cl_context context() const { return context_; }
  cl_command_queue queue() const { return queue_; }

  // Blocks until every command queued so far has finished.
  Status finish() const;

  // Raw device memory, for the Device's caching allocator, which owns what it allocates.
  Expected<cl_mem> allocate(std::size_t bytes) const;
  void release(cl_mem mem) const;
  // Blocking: the host memory may be reused when these return.
  Status write(cl_mem dst, std::size_t dst_offset, const void* src, std::size_t bytes) const;
  Status read(cl_mem src, std::size_t src_offset, void* dst, std::size_t bytes) const;
  // Queued in order after earlier commands.
  Status copy(cl_mem src, std::size_t src_offset, cl_mem dst, std::size_t dst_offset,
              std::size_t bytes) const;

 private:
  OpenClContext(const OpenClApi* api, OpenClDeviceInfo device)
      : api_(api), device_(std::move(device)) {}
  const OpenClApi* api_;
  OpenClDeviceInfo device_;
  cl_context context_ = nullptr;
  cl_command_queue queue_ = nullptr;
};

}  // namespace tessel
