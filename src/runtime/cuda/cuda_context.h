// One CUDA device ready for work, over the run-time loaded driver API (hw/cuda_api.h): its
// primary context and a stream, raw device memory, and modules built from CUDA C++ with NVRTC and
// launched. Without a driver or a GPU, create() says "no CUDA device: ..." and nothing else runs;
// compiling to PTX (hw/cuda_devices.h) needs neither.
//
//   TESSEL_ASSIGN_OR_RETURN(auto gpu, CudaContext::create(0));
//   TESSEL_ASSIGN_OR_RETURN(CudaModule m, CudaModule::compile(gpu, source, "add.cu"));
//   TESSEL_ASSIGN_OR_RETURN(CudaFunction f, m.function("add"));
//   TESSEL_TRY(f.launch({blocks, 1, 1}, {256, 1, 1}, 0, a, b, c, n));   // device pointers, scalars
#pragma once

#include <array>
#include <cstddef>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "hw/cuda_devices.h"

namespace tessel {

class CudaContext {
 public:
  static Expected<std::shared_ptr<CudaContext>> create(int ordinal = 0);
  ~CudaContext();
  CudaContext(const CudaContext&) = delete;
  CudaContext& operator=(const CudaContext&) = delete;

  const CudaDriverApi& api() const { return *api_; }
  const CudaDeviceInfo& info() const { return info_; }
  cuda::CUstream stream() const { return stream_; }

  // The driver's current context is per thread; every call below makes it current first.
  Status make_current() const;
  // Blocks until everything queued on the stream has finished.
  Status synchronize() const;

  Expected<cuda::CUdeviceptr> allocate(std::size_t bytes) const;
  void release(cuda::CUdeviceptr ptr) const;
  // Blocking copies (the host memory may be reused when they return); device-to-device copies
  // are queued on the stream.
  Status write(cuda::CUdeviceptr dst, const void* src, std::size_t bytes) const;
  Status read(void* dst, cuda::CUdeviceptr src, std::size_t bytes) const;
  Status copy(cuda::CUdeviceptr dst, cuda::CUdeviceptr src, std::size_t bytes) const;

 private:
  CudaContext(const CudaDriverApi* api, CudaDeviceInfo info) : api_(api), info_(std::move(info)) {}
  const CudaDriverApi* api_;
  CudaDeviceInfo info_;
  cuda::CUdevice device_ = 0;
  cuda::CUcontext context_ = nullptr;
  cuda::CUstream stream_ = nullptr;
};

class CudaFunction;

class CudaModule {
 public:
  // Loads PTX (the driver compiles it for the device); a JIT error carries the driver's log.
  static Expected<CudaModule> load_ptx(std::shared_ptr<CudaContext> context, const std::string& ptx,
                                       const std::string& name);
  // Compiles CUDA C++ with NVRTC for the context's device (PTX for its compute capability),
  // then loads it. `name` is the source's name in error messages.
  static Expected<CudaModule> compile(std::shared_ptr<CudaContext> context,
                                      const std::string& source, const std::string& name,
                                      const std::vector<std::string>& options = {});

  CudaModule(CudaModule&& other) noexcept { *this = std::move(other); }
  CudaModule& operator=(CudaModule&& other) noexcept;
  ~CudaModule();

  // An extern "C" __global__ function of the module; not_found when there is none.
  Expected<CudaFunction> function(const std::string& name) const;

 private:
  CudaModule() = default;
  std::shared_ptr<CudaContext> context_;
  cuda::CUmodule module_ = nullptr;
  std::string name_;
};

class CudaFunction {
 public:
  using Dim3 = std::array<unsigned, 3>;

  // Queues the kernel on the context's stream with `args` (device pointers as CUdeviceptr,
  // trivially copyable scalars), in parameter order.
  template <typename... Args>
  Status launch(Dim3 grid, Dim3 block, unsigned shared_bytes, const Args&... args) const {
    static_assert((std::is_trivially_copyable_v<Args> && ...), "kernel arguments are copied bytes");
    std::vector<void*> params = {const_cast<void*>(static_cast<const void*>(&args))...};
    return launch_raw(grid, block, shared_bytes, params);
  }
  // `params[i]` points at the value of parameter i, as cuLaunchKernel takes them.
  Status launch_raw(Dim3 grid, Dim3 block, unsigned shared_bytes, std::vector<void*>& params) const;
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

}  // namespace tessel
