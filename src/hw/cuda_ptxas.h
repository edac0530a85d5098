// ptxas, the CUDA toolkit's PTX assembler, run as a program: it turns PTX into machine code for
// one GPU architecture (sm_80, sm_90) and, with -v, says what each kernel costs: registers per
// thread, spills, stack frame, shared memory. Needs no GPU; tests and `tessel compile --emit
// resources` use it to check generated kernels for real GPUs on a machine without one.
//
//   TESSEL_ASSIGN_OR_RETURN(std::string ptxas, find_ptxas());   // not_found: where it looked
//   TESSEL_ASSIGN_OR_RETURN(auto kernels, assemble_ptx(ptxas, ptx, "sm_90", "gemm.ptx"));
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "support/status.h"

namespace tessel {

// What ptxas -v reports for one kernel (entry function) on one architecture.
struct KernelResources {
  std::string kernel;  // the entry's name
  std::string arch;    // "sm_90"
  int registers = 0;   // per thread
  int barriers = 0;
  int64_t shared_bytes = 0;  // static shared memory per block
  int64_t stack_frame_bytes = 0;
  int64_t spill_store_bytes = 0;
  int64_t spill_load_bytes = 0;
  int64_t constant_bytes = 0;  // cmem[0]: the kernel's parameters and constants (not on sm_90)
};

// ptxas from $CUDA_HOME/bin, $CUDA_PATH/bin, $PATH, then /usr/local/cuda/bin. not_found lists
// the places tried.
Expected<std::string> find_ptxas();

// Assembles `ptx` for `arch` ("sm_80") with `ptxas` and returns each entry's resources, in the
// order ptxas reports them. A rejected PTX is invalid_argument carrying ptxas's messages, with
// `name` (the source's name) in front.
Expected<std::vector<KernelResources>> assemble_ptx(const std::string& ptxas,
                                                    const std::string& ptx, const std::string& arch,
                                                    const std::string& name);

// The kernels in ptxas -v output (also used by tests with captured logs).
std::vector<KernelResources> parse_ptxas_verbose(std::string_view log);

}  // namespace tessel
