// Tile kernels on CUDA GPUs: the pass pipeline for the device, the CUDA renderer, NVRTC (loaded
// at run time through hw/cuda_api.h) to PTX, and the driver API to load and launch. Compiling
// needs only NVRTC, so every kernel is compiled in the tests of machines without a GPU; launching
// needs a GPU. Tensor arguments hold device pointers (CUdeviceptr) in TensorArg::data.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "support/status.h"
#include "tile/ir/ir.h"
#include "tile/run/bind.h"
#include "tile/target.h"

namespace tessel::tile {

// PTX for `source`, for a virtual architecture such as "compute_80". Errors carry NVRTC's log.
Expected<std::string> compile_cuda_ptx(const std::string& source, const std::string& name,
                                       const std::string& arch = "compute_80");

class CudaKernel {
 public:
  // Compiles for `target` (shared memory and threads per block of the device) to PTX.
  static Expected<CudaKernel> compile(const Kernel& parsed, const Target& target = Target::cuda(),
                                      const std::map<std::string, std::string>& params = {},
                                      const std::string& arch = "compute_80");
  // Loads the PTX on the current CUDA context (first use) and runs the grid on the default
  // stream, waiting for it. unavailable where there is no GPU.
  Status launch(const std::vector<LaunchArg>& args) const;

  const Kernel& ir() const { return ir_; }
  const std::string& source() const { return source_; }
  const std::string& ptx() const { return ptx_; }

 private:
  Kernel ir_;
  std::vector<bool> used_;
  std::string source_, ptx_;
  int threads_ = 1;
  mutable void* function_ = nullptr;  // CUfunction, once loaded
};

}  // namespace tessel::tile
