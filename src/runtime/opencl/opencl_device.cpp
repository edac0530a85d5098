// OpenCL device: cl_mem allocation under the caching allocator, queue copies, and registration
// of the "opencl" backend with the device registry.
#include "runtime/opencl/opencl_device.h"

#include "support/log.h"

namespace tessel {
namespace {

RawAllocator raw_opencl_allocator(std::shared_ptr<OpenClContext> context) {
  return RawAllocator{[context](size_t bytes) -> Expected<DeviceBuffer> {
                        TESSEL_ASSIGN_OR_RETURN(cl_mem mem, context->allocate(bytes));
                        return DeviceBuffer{mem, bytes};
                      },
                      [context](DeviceBuffer buffer) { context->release(opencl_mem(buffer)); }};
}

[[maybe_unused]] const bool kRegistered =
    register_backend(DeviceKind::kOpenCL, enumerate_opencl_devices);

}  // namespace

OpenClDevice::OpenClDevice(int index, std::shared_ptr<OpenClContext> context)
    : OpenClDevice(index, context, context->device().global_mem_bytes / 4) {}

OpenClDevice::OpenClDevice(int index, std::shared_ptr<OpenClContext> context,
                           size_t max_cached_bytes)
    : Device(DeviceKind::kOpenCL, index, context->device().name),
      context_(context),
      allocator_(fmt::format("opencl:{}", index), raw_opencl_allocator(context), max_cached_bytes) {
}

Status OpenClDevice::do_copy_from_host(DeviceBuffer dst, size_t dst_offset, const void* src,
                                       size_t bytes) {
  return context_->write(opencl_mem(dst), dst_offset, src, bytes).with_context("{}", id());
}

Status OpenClDevice::do_copy_to_host(void* dst, DeviceBuffer src, size_t src_offset, size_t bytes) {
  return context_->read(opencl_mem(src), src_offset, dst, bytes).with_context("{}", id());
}

Status OpenClDevice::do_copy_on_device(DeviceBuffer dst, size_t dst_offset, DeviceBuffer src,
                                       size_t src_offset, size_t bytes) {
  return context_->copy(opencl_mem(src), src_offset, opencl_mem(dst), dst_offset, bytes)
      .with_context("{}", id());
}

Expected<std::vector<std::unique_ptr<Device>>> enumerate_opencl_devices() {
  TESSEL_ASSIGN_OR_RETURN(std::vector<OpenClDeviceInfo> infos, list_opencl_devices());
  std::vector<std::unique_ptr<Device>> devices;
  for (const OpenClDeviceInfo& info : infos) {
    Expected<std::shared_ptr<OpenClContext>> context = OpenClContext::create(info);
    if (!context) {
      // One broken driver must not hide the others; the device is left out, and said so.
      log_warn("OpenCL device {} ({}) left out: {}", info.name, info.platform_name,
               context.status().to_string());
      continue;
    }
    devices.push_back(
        std::make_unique<OpenClDevice>(static_cast<int>(devices.size()), std::move(*context)));
  }
  return devices;
}

}  // namespace tessel
