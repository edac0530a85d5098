// One CUDA GPU's driver state over the run-time loaded driver API (hw/cuda_api.h): its primary
// context, made current on whichever thread calls in (the driver's current context is per
// thread); one non-blocking stream that all of tessel's work on the GPU is queued on (never the
// legacy stream 0, which serialises with every other library in the process); device memory;
// PTX modules and their kernels, launched with packed arguments. Without a driver or a GPU,
// create() says "no CUDA device: ..." and nothing else runs.
//
//   TESSEL_ASSIGN_OR_RETURN(auto gpu, CudaContext::create(0));
//   TESSEL_ASSIGN_OR_RETURN(auto module, CudaModule::load_ptx(gpu, ptx, "add"));
//   TESSEL_ASSIGN_OR_RETURN(CudaFunction f, module->function("add"));
//   PackedArguments args;
//   args.add(a_ptr), args.add(n);
//   TESSEL_TRY(f.launch({blocks, 1, 1}, {256, 1, 1}, args));   // queued on gpu->stream()
//
// At process exit the CUDA backend closes every context (close()): the stream is drained, the
// modules still loaded are unloaded, the stream destroyed and the primary context released;
// whatever is used after that fails with failed_precondition instead of touching the driver.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

#include "hw/cuda_devices.h"

namespace tessel {

class CudaModule;

class CudaContext {
 public:
  static Expected<std::shared_ptr<CudaContext>> create(int ordinal = 0);
  ~CudaContext() { close(); }
  CudaContext(const CudaContext&) = delete;
  CudaContext& operator=(const CudaContext&) = delete;

  const CudaDriverApi& api() const { return *api_; }
  const CudaDeviceInfo& info() const { return info_; }
  cuda::CUstream stream() const { return stream_; }
  // 10 * major + minor: 90 for an H100.
  int compute_capability() const { return 10 * info_.compute_major + info_.compute_minor; }

  // Makes the context current on the calling thread (when it is not already); every call below
  // does so first.
  Status make_current() const;
  // Blocks until everything queued on the stream has finished.
  Status synchronize() const;

  Expected<cuda::CUdeviceptr> allocate(std::size_t bytes) const;
  void release(cuda::CUdeviceptr ptr) const;
  // write returns once `src` may be reused, read once the bytes are in `dst` (both after the
  // stream's earlier work); copy is queued.
  Status write(cuda::CUdeviceptr dst, const void* src, std::size_t bytes) const;
  Status read(void* dst, cuda::CUdeviceptr src, std::size_t bytes) const;
  Status copy(cuda::CUdeviceptr dst, cuda::CUdeviceptr src, std::size_t bytes) const;

  // See the top of this file. Safe to call twice.
  void close();
  bool closed() const { return closed_; }

 private:
  friend class CudaModule;
  CudaContext(const CudaDriverApi* api, CudaDeviceInfo info) : api_(api), info_(std::move(info)) {}
  const CudaDriverApi* api_;
  CudaDeviceInfo info_;
  cuda::CUdevice device_ = 0;
  cuda::CUcontext context_ = nullptr;
  cuda::CUstream stream_ = nullptr;
  std::atomic<bool> closed_{false};
  std::mutex modules_mutex_;
  std::set<CudaModule*> modules_;  // loaded, for close()
};

// Kernel parameters in one buffer, each at its own alignment, as cuLaunchKernel's `extra`
// takes them: the driver checks the size against the kernel's parameter list.
class PackedArguments {
 public:
  template <typename T>
  void add(const T& value) {
    static_assert(std::is_trivially_copyable_v<T>, "kernel arguments are copied bytes");
    add_bytes(&value, sizeof(T));
  }
  // `size` bytes aligned to `size` (1, 2, 4 or 8).
  void add_bytes(const void* value, std::size_t size) {
    bytes_.resize((bytes_.size() + size - 1) / size * size);
    const auto* p = static_cast<const unsigned char*>(value);
    bytes_.insert(bytes_.end(), p, p + size);
  }
  const std::vector<unsigned char>& bytes() const { return bytes_; }

 private:
  std::vector<unsigned char> bytes_;
};

class CudaFunction {
 public:
  using Dim3 = std::array<unsigned, 3>;
  // Queues the kernel on the context's stream.
  Status launch(Dim3 grid, Dim3 block, unsigned shared_bytes, const PackedArguments& args) const;
  // Lets the kernel ask for more than the default 48 KiB of dynamic shared memory.
  Status set_max_dynamic_shared_bytes(int bytes) const;
  const std::string& name() const { return name_; }

 private:
  friend class CudaModule;
  CudaFunction() = default;
  std::shared_ptr<CudaContext> context_;
  cuda::CUfunction function_ = nullptr;
  std::string name_;
};

class CudaModule {
 public:
  // Loads PTX (the driver assembles it for the GPU); a JIT error carries the driver's log.
  static Expected<std::unique_ptr<CudaModule>> load_ptx(std::shared_ptr<CudaContext> context,
                                                        const std::string& ptx,
                                                        const std::string& name);
  ~CudaModule();
  CudaModule(const CudaModule&) = delete;
  CudaModule& operator=(const CudaModule&) = delete;

  // An extern "C" __global__ function of the module; not_found when there is none.
  Expected<CudaFunction> function(const std::string& name) const;

 private:
  friend class CudaContext;
  CudaModule() = default;
  std::shared_ptr<CudaContext> context_;
  cuda::CUmodule module_ = nullptr;
  std::string name_;
};

}  // namespace tessel
