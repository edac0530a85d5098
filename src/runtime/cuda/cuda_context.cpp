// CUDA context, memory, modules and launches over the run-time loaded driver API.
#include "runtime/cuda/cuda_context.h"

#include <utility>

namespace tessel {

Expected<std::shared_ptr<CudaContext>> CudaContext::create(int ordinal) {
  TESSEL_ASSIGN_OR_RETURN(const CudaDriverApi* cu, cuda_driver_api());
  TESSEL_ASSIGN_OR_RETURN(std::vector<CudaDeviceInfo> devices, list_cuda_devices(*cu));
  if (ordinal < 0 || ordinal >= static_cast<int>(devices.size()))
    return not_found("CUDA device {}: this machine has {} (0 to {})", ordinal, devices.size(),
                     devices.size() - 1);
  std::shared_ptr<CudaContext> ctx(new CudaContext(cu, devices[ordinal]));
  TESSEL_TRY(cuda_check(*cu, cu->cuDeviceGet(&ctx->device_, ordinal), "cuDeviceGet"));
  // The primary context is the one the CUDA runtime and other libraries (cuBLAS, NCCL) share.
  TESSEL_TRY(cuda_check(*cu, cu->cuDevicePrimaryCtxRetain(&ctx->context_, ctx->device_),
                        "cuDevicePrimaryCtxRetain"));
  TESSEL_TRY(ctx->make_current());
  // Non-blocking: never waits for (or makes wait) work others queue on the legacy stream 0.
  TESSEL_TRY(cuda_check(*cu, cu->cuStreamCreate(&ctx->stream_, cuda::kStreamNonBlocking),
                        "cuStreamCreate"));
  return ctx;
}

void CudaContext::close() {
  if (closed_.exchange(true) || !context_) return;
  api_->cuCtxSetCurrent(context_);
  if (stream_) api_->cuStreamSynchronize(stream_);
  {
    std::lock_guard<std::mutex> lock(modules_mutex_);
    for (CudaModule* m : modules_) {
      api_->cuModuleUnload(m->module_);  // the context is current: make_current() refuses now
      m->module_ = nullptr;
    }
    modules_.clear();
  }
  if (stream_) api_->cuStreamDestroy(stream_);
  api_->cuDevicePrimaryCtxRelease(device_);
}

Status CudaContext::make_current() const {
  if (closed_)
    return failed_precondition("CUDA device {} ({}) was closed", info_.ordinal, info_.name);
  cuda::CUcontext current = nullptr;
  if (api_->cuCtxGetCurrent(&current) == cuda::kCudaSuccess && current == context_)
    return ok_status();
  return cuda_check(*api_, api_->cuCtxSetCurrent(context_), "cuCtxSetCurrent");
}

Status CudaContext::synchronize() const {
  TESSEL_TRY(make_current());
  return cuda_check(*api_, api_->cuStreamSynchronize(stream_), "cuStreamSynchronize");
}

Expected<cuda::CUdeviceptr> CudaContext::allocate(std::size_t bytes) const {
  TESSEL_TRY(make_current());
  cuda::CUdeviceptr ptr = 0;
  TESSEL_TRY(cuda_check(*api_, api_->cuMemAlloc(&ptr, bytes == 0 ? 1 : bytes), "cuMemAlloc")
                 .with_context("allocating {} bytes on {}", bytes, info_.name));
  return ptr;
}

void CudaContext::release(cuda::CUdeviceptr ptr) const {
  if (ptr == 0 || !make_current().ok()) return;
  api_->cuMemFree(ptr);
}

Status CudaContext::write(cuda::CUdeviceptr dst, const void* src, std::size_t bytes) const {
  if (bytes == 0) return ok_status();
  TESSEL_TRY(make_current());
  TESSEL_TRY(
      cuda_check(*api_, api_->cuMemcpyHtoDAsync(dst, src, bytes, stream_), "cuMemcpyHtoDAsync"));
  // The source is pageable memory the caller may reuse as soon as this returns.
  return synchronize();
}

Status CudaContext::read(void* dst, cuda::CUdeviceptr src, std::size_t bytes) const {
  if (bytes == 0) return ok_status();
  TESSEL_TRY(make_current());
  TESSEL_TRY(
      cuda_check(*api_, api_->cuMemcpyDtoHAsync(dst, src, bytes, stream_), "cuMemcpyDtoHAsync"));
  return synchronize();
}

Status CudaContext::copy(cuda::CUdeviceptr dst, cuda::CUdeviceptr src, std::size_t bytes) const {
  if (bytes == 0) return ok_status();
  TESSEL_TRY(make_current());
  return cuda_check(*api_, api_->cuMemcpyDtoDAsync(dst, src, bytes, stream_), "cuMemcpyDtoDAsync");
}

Expected<std::unique_ptr<CudaModule>> CudaModule::load_ptx(std::shared_ptr<CudaContext> context,
                                                           const std::string& ptx,
                                                           const std::string& name) {
  const CudaDriverApi& cu = context->api();
  TESSEL_TRY(context->make_current());
  std::string error_log(16384, '\0');
  cuda::CUjit_option options[] = {cuda::kJitErrorLogBuffer, cuda::kJitErrorLogBufferSizeBytes};
  void* values[] = {error_log.data(), reinterpret_cast<void*>(error_log.size())};
  std::unique_ptr<CudaModule> m(new CudaModule);
  m->context_ = context;
  m->name_ = name;
  cuda::CUresult r = cu.cuModuleLoadDataEx(&m->module_, ptx.c_str(), 2, options, values);
  if (r != cuda::kCudaSuccess) {
    m->module_ = nullptr;
    error_log.resize(error_log.find('\0'));
    return invalid_argument("loading {} on {}: {}\n{}", name, context->info().name,
                            cuda_check(cu, r, "cuModuleLoadDataEx").message(), error_log);
  }
  std::lock_guard<std::mutex> lock(context->modules_mutex_);
  context->modules_.insert(m.get());
  return m;
}

CudaModule::~CudaModule() {
  if (!context_) return;
  std::lock_guard<std::mutex> lock(context_->modules_mutex_);
  if (context_->modules_.erase(this) == 0) return;  // unloaded by close()
  if (module_ && context_->make_current().ok()) context_->api().cuModuleUnload(module_);
}

Expected<CudaFunction> CudaModule::function(const std::string& name) const {
  TESSEL_TRY(context_->make_current());
  CudaFunction f;
  cuda::CUresult r = context_->api().cuModuleGetFunction(&f.function_, module_, name.c_str());
  if (r == cuda::kCudaErrorNotFound)
    return not_found("CUDA module {} has no kernel named '{}' (declare it extern \"C\")", name_,
                     name);
  TESSEL_TRY(cuda_check(context_->api(), r, "cuModuleGetFunction"));
  f.context_ = context_;
  f.name_ = name;
  return f;
}

Status CudaFunction::launch(Dim3 grid, Dim3 block, unsigned shared_bytes,
                            const PackedArguments& args) const {
  for (int d = 0; d < 3; ++d)
    if (grid[d] == 0 || block[d] == 0)
      return invalid_argument("kernel {}: empty launch (grid {}x{}x{}, block {}x{}x{})", name_,
                              grid[0], grid[1], grid[2], block[0], block[1], block[2]);
  TESSEL_TRY(context_->make_current());
  std::size_t size = args.bytes().size();
  void* extra[] = {cuda::kLaunchParamBufferPointer, const_cast<unsigned char*>(args.bytes().data()),
                   cuda::kLaunchParamBufferSize, &size, cuda::kLaunchParamEnd};
  return cuda_check(context_->api(),
                    context_->api().cuLaunchKernel(function_, grid[0], grid[1], grid[2], block[0],
                                                   block[1], block[2], shared_bytes,
                                                   context_->stream(), nullptr, extra),
                    "cuLaunchKernel")
      .with_context("kernel {}", name_);
}

Status CudaFunction::set_max_dynamic_shared_bytes(int bytes) const {
  TESSEL_TRY(context_->make_current());
  return cuda_check(context_->api(),
                    context_->api().cuFuncSetAttribute(
                        function_, cuda::kFuncAttrMaxDynamicSharedSizeBytes, bytes),
                    "cuFuncSetAttribute")
      .with_context("kernel {}: {} bytes of dynamic shared memory", name_, bytes);
}

}  // namespace tessel
