// A tile kernel built for CUDA without a GPU: lowered for the target, rendered to CUDA C++,
// compiled to PTX by NVRTC for a virtual architecture ("compute_90"). The devices load the PTX
// (the driver assembles it for the GPU at hand); tests and `tessel compile --emit resources`
// assemble it with ptxas (hw/cuda_ptxas.h) for real architectures to see registers and spills.
//
//   TESSEL_ASSIGN_OR_RETURN(CudaBuild b, build_cuda(kernel, {{"T", "bf16"}}, Target::cuda(),
//                                                   "compute_90"));
#pragma once

#include <map>
#include <string>

#include "support/status.h"
#include "tile/ir/ir.h"
#include "tile/target.h"

namespace tessel::tile {

struct CudaBuild {
  Kernel lowered;
  std::string source;  // CUDA C++
  std::string ptx;
  std::string entry;  // the kernel's entry point in the PTX
};

// Errors: the pipeline's (file:line:col of the kernel), or NVRTC's log naming the kernel and its
// parameters.
Expected<CudaBuild> build_cuda(const Kernel& parsed,
                               const std::map<std::string, std::string>& params,
                               const Target& target, const std::string& virtual_arch);

// "sm_90" -> "compute_90"; invalid_argument for anything but sm_NN (or compute_NN, returned as is).
Expected<std::string> virtual_arch_of(const std::string& arch);

}  // namespace tessel::tile
