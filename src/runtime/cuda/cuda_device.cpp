// CUDA device: cuMemAlloc under the caching allocator, stream copies, and registration of the
// "cuda" backend with the device registry.
#include "runtime/cuda/cuda_device.h"

namespace tessel {
namespace {

RawAllocator raw_cuda_allocator(std::shared_ptr<CudaContext> context) {
  return RawAllocator{
      [context](size_t bytes) -> Expected<DeviceBuffer> {
        TESSEL_ASSIGN_OR_RETURN(cuda::CUdeviceptr ptr, context->allocate(bytes));
        return DeviceBuffer{reinterpret_cast<void*>(static_cast<std::uintptr_t>(ptr)), bytes};
      },
      [context](DeviceBuffer buffer) { context->release(cuda_address(buffer)); }};
}

[[maybe_unused]] const bool kRegistered =
    register_backend(DeviceKind::kCuda, enumerate_cuda_devices);

}  // namespace

CudaDevice::CudaDevice(int index, std::shared_ptr<CudaContext> context)
    : CudaDevice(index, context, static_cast<size_t>(context->info().total_mem_bytes / 4)) {}

CudaDevice::CudaDevice(int index, std::shared_ptr<CudaContext> context, size_t max_cached_bytes)
    : Device(DeviceKind::kCuda, index, context->info().name),
      context_(context),
      allocator_(fmt::format("cuda:{}", index), raw_cuda_allocator(context), max_cached_bytes) {}

Status CudaDevice::do_copy_from_host(DeviceBuffer dst, size_t dst_offset, const void* src,
                                     size_t bytes) {
  return context_->write(cuda_address(dst, dst_offset), src, bytes).with_context("{}", id());
}

Status CudaDevice::do_copy_to_host(void* dst, DeviceBuffer src, size_t src_offset, size_t bytes) {
  return context_->read(dst, cuda_address(src, src_offset), bytes).with_context("{}", id());
}

Status CudaDevice::do_copy_on_device(DeviceBuffer dst, size_t dst_offset, DeviceBuffer src,
                                     size_t src_offset, size_t bytes) {
  return context_->copy(cuda_address(dst, dst_offset), cuda_address(src, src_offset), bytes)
      .with_context("{}", id());
}

DeviceLimits CudaDevice::limits() const {
  const CudaDeviceInfo& d = context_->info();
  DeviceLimits l;
  l.memory_bytes = d.total_mem_bytes;
  l.fast_memory_bytes = d.shared_mem_per_block_bytes > 0 ? d.shared_mem_per_block_bytes : 48 << 10;
  l.max_threads_per_block = d.max_threads_per_block > 0 ? d.max_threads_per_block : 1024;
  l.compute_units = d.multiprocessors > 0 ? d.multiprocessors : 1;
  l.f64 = true;
  l.compute_capability = 10 * d.compute_major + d.compute_minor;
  l.gpu = true;
  return l;
}

// ---- Minimal stand-ins so that the Device interface compiles; helper `cuda` fills these in. ----

Expected<std::shared_ptr<Event>> CudaDevice::record_event() {
  return unimplemented("{}: events are not wired yet (issue 10, part 3)", id());
}

Expected<std::shared_ptr<KernelModule>> CudaDevice::do_build(const KernelImage& image) {
  return unimplemented("{}: kernel '{}': building kernels is not wired yet (issue 10, part 3)",
                       id(), image.name);
}

Status CudaDevice::do_launch(const KernelModule& module, const LaunchGrid&,
                             const std::vector<KernelArgument>&) {
  return unimplemented("{}: kernel '{}': launching is not wired yet (issue 10, part 3)", id(),
                       module.name());
}

Expected<std::vector<std::unique_ptr<Device>>> enumerate_cuda_devices() {
  TESSEL_ASSIGN_OR_RETURN(std::vector<CudaDeviceInfo> infos, list_cuda_devices());
  std::vector<std::unique_ptr<Device>> devices;
  for (const CudaDeviceInfo& info : infos) {
    TESSEL_ASSIGN_OR_RETURN(std::shared_ptr<CudaContext> context,
                            CudaContext::create(info.ordinal));
    devices.push_back(std::make_unique<CudaDevice>(info.ordinal, std::move(context)));
  }
  return devices;
}

}  // namespace tessel
