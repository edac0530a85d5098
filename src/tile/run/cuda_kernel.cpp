// Tile kernels on CUDA (see cuda_kernel.h).
#include "tile/run/cuda_kernel.h"

#include "hw/cuda_api.h"
#include "tile/codegen/cuda/cuda_renderer.h"
#include "tile/pipeline.h"

namespace tessel::tile {

Expected<std::string> compile_cuda_ptx(const std::string& source, const std::string& name,
                                       const std::string& arch) {
  TESSEL_ASSIGN_OR_RETURN(const NvrtcApi* rtc, nvrtc_api());
  cuda::nvrtcProgram program = nullptr;
  std::string file = name + ".cu";
  TESSEL_TRY(nvrtc_check(*rtc, rtc->nvrtcCreateProgram(&program, source.c_str(), file.c_str(), 0, nullptr, nullptr),
                         "nvrtcCreateProgram"));
  std::string arch_flag = "--gpu-architecture=" + arch;
  const char* options[] = {arch_flag.c_str(), "--std=c++17"};
  cuda::nvrtcResult compiled = rtc->nvrtcCompileProgram(program, 2, options);
  size_t log_size = 0;
  rtc->nvrtcGetProgramLogSize(program, &log_size);
  std::string log(log_size, '\0');
  if (log_size > 0) rtc->nvrtcGetProgramLog(program, log.data());
  std::string ptx;
  Status status = ok_status();
  if (compiled != 0) {
    status = internal_error("NVRTC could not compile kernel '{}' for {}: {}\n{}", name, arch,
                            rtc->nvrtcGetErrorString(compiled), log);
  } else {
    size_t size = 0;
    status = nvrtc_check(*rtc, rtc->nvrtcGetPTXSize(program, &size), "nvrtcGetPTXSize");
    if (status.ok()) {
      ptx.resize(size);
      status = nvrtc_check(*rtc, rtc->nvrtcGetPTX(program, ptx.data()), "nvrtcGetPTX");
      while (!ptx.empty() && ptx.back() == '\0') ptx.pop_back();
    }
  }
  rtc->nvrtcDestroyProgram(&program);
  if (!status.ok()) return status;
  return ptx;
}

Expected<CudaKernel> CudaKernel::compile(const Kernel& parsed, const Target& target,
                                         const std::map<std::string, std::string>& params,
                                         const std::string& arch) {
  CompileOptions o;
  o.target = target;
  o.params = params;
  CudaKernel k;
  k.threads_ = target.threads_per_block;
  TESSEL_ASSIGN_OR_RETURN(k.ir_, compile_ir(parsed, o));
  k.used_ = used_arguments(k.ir_);
  k.source_ = render_cuda(k.ir_, target);
  TESSEL_ASSIGN_OR_RETURN(k.ptx_, compile_cuda_ptx(k.source_, k.ir_.name, arch));
  return k;
}

Status CudaKernel::launch(const std::vector<LaunchArg>& args) const {
  TESSEL_ASSIGN_OR_RETURN(const CudaDriverApi* cu, cuda_driver_api());
  if (!function_) {
    cuda::CUmodule module = nullptr;
    TESSEL_TRY(cuda_check(*cu, cu->cuModuleLoadDataEx(&module, ptx_.c_str(), 0, nullptr, nullptr),
                          "cuModuleLoadDataEx"));
    cuda::CUfunction fn = nullptr;
    TESSEL_TRY(cuda_check(*cu, cu->cuModuleGetFunction(&fn, module, entry_name(ir_).c_str()), "cuModuleGetFunction"));
    function_ = fn;
  }
  TESSEL_ASSIGN_OR_RETURN(BoundLaunch b, bind_launch(ir_, used_, args));
  if (b.blocks == 0) return ok_status();
  // Every slot is 8 bytes except f32 and i32 scalars; the driver reads each through a pointer.
  std::vector<ArgSlot> slots = kernel_slots(ir_);
  std::vector<void*> params;
  for (size_t i = 0; i < slots.size(); ++i) params.push_back(&b.slots[i]);
  TESSEL_TRY(cuda_check(*cu,
                        cu->cuLaunchKernel(static_cast<cuda::CUfunction>(function_), static_cast<unsigned>(b.grid[0]),
                                           static_cast<unsigned>(b.grid[1]), static_cast<unsigned>(b.grid[2]),
                                           static_cast<unsigned>(threads_), 1, 1, 0, nullptr, params.data(), nullptr),
                        "cuLaunchKernel"));
  return cuda_check(*cu, cu->cuCtxSynchronize(), "cuCtxSynchronize");
}

}  // namespace tessel::tile
