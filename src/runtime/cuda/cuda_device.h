// A CUDA GPU as a tessel Device (runtime/device.h): memory is cuMemAlloc'd device memory from the
// device's caching allocator; copies, launches and events go to the context's stream
// (cuda_context.h). build() compiles CUDA C++ with NVRTC to PTX for the GPU's own compute
// capability (the newest NVRTC knows that is not newer) and loads it; launch() packs buffer +
// offset arguments as device addresses; a grid past gridDim.y/z's 65535 is launched folded into x,
// which the renderer's kernels undo (they index blocks by the linear block index). Registered as
// "cuda:N" in the driver's device order; where there is no driver or no GPU the registry answers
// "no CUDA device: ..." (why, and what was looked for). Every CUDA device is closed at process exit
// (CudaContext::close).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "runtime/cuda/cuda_context.h"
#include "runtime/device.h"

namespace tessel {

class CudaDevice final : public Device {
 public:
  // Released blocks are kept up to max_cached_bytes; by default a quarter of the device memory.
  CudaDevice(int index, std::shared_ptr<CudaContext> context);
  CudaDevice(int index, std::shared_ptr<CudaContext> context, size_t max_cached_bytes);

  CachingAllocator& allocator() override { return allocator_; }
  void* host_address(DeviceBuffer) const override { return nullptr; }
  Status synchronize() override { return context_->synchronize(); }
  DeviceLimits limits() const override;
  Expected<std::shared_ptr<Event>> record_event() override;
  // A CUDA event (of any CUDA device) is waited for in this stream; others on the host.
  Status wait_event(const Event& event) override;

  // For loading modules and launching kernels on this device's stream (cuda_context.h).
  const std::shared_ptr<CudaContext>& context() const { return context_; }
  // "compute_90": what build() compiles for; NVRTC's absence or age is the Status.
  Expected<std::string> ptx_architecture() const;
  // Empties the allocator's cache and closes the context (at process exit).
  void close();
  // What build() has compiled and loaded, in load order: for tools that list a device's kernels,
  // and for tests that read launches back against the kernels' argument lists.
  std::vector<KernelImage> built_images() const;

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
  std::shared_ptr<CudaContext> context_;  // declared first: the allocator frees through it
  CachingAllocator allocator_;
  mutable std::mutex built_mutex_;
  std::vector<KernelImage> built_;
};

// The device address of `offset` bytes into a buffer of a CudaDevice, for kernel arguments.
inline cuda::CUdeviceptr cuda_address(DeviceBuffer buffer, size_t offset = 0) {
  return static_cast<cuda::CUdeviceptr>(reinterpret_cast<std::uintptr_t>(buffer.handle)) + offset;
}

// One CudaDevice per GPU; unavailable ("no CUDA device: ...") without a driver or a GPU.
Expected<std::vector<std::unique_ptr<Device>>> enumerate_cuda_devices();

}  // namespace tessel
