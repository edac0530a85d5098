// Lowering, rendering and NVRTC for one CUDA kernel (see cuda_build.h).
#include "tile/codegen/cuda/cuda_build.h"

#include <regex>

#include "hw/cuda_devices.h"
#include "tile/codegen/abi.h"
#include "tile/codegen/cuda/cuda_renderer.h"
#include "tile/parse/specialisations.h"
#include "tile/pipeline.h"

namespace tessel::tile {

Expected<CudaBuild> build_cuda(const Kernel& parsed,
                               const std::map<std::string, std::string>& params,
                               const Target& target, const std::string& virtual_arch) {
  CompileOptions options;
  options.target = target;
  options.params = params;
  CudaBuild b;
  TESSEL_ASSIGN_OR_RETURN(b.lowered, compile_ir(parsed, options));
  b.source = render_cuda(b.lowered, target);
  b.entry = entry_name(b.lowered);
  std::string name = specialisation_string(parsed.name, params);
  Expected<PtxProgram> ptx =
      compile_cuda_to_ptx(b.source, b.lowered.name + ".cu", virtual_arch, {"--std=c++17"});
  if (!ptx.ok()) return ptx.status().with_context("kernel {}", name);
  b.ptx = std::move(ptx->ptx);
  return b;
}

Expected<std::string> virtual_arch_of(const std::string& arch) {
  static const std::regex real(R"(sm_(\d+[a-z]?))"), virt(R"(compute_\d+[a-z]?)");
  std::smatch m;
  if (std::regex_match(arch, m, real)) return "compute_" + m[1].str();
  if (std::regex_match(arch, virt)) return arch;
  return invalid_argument("CUDA architecture '{}': expected sm_NN (sm_80, sm_90) or compute_NN",
                          arch);
}

}  // namespace tessel::tile
