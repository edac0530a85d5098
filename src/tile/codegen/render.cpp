// Renderer choice by target kind (see render.h).
#include "tile/codegen/render.h"

#include "tile/codegen/cpu/cpu_renderer.h"
#include "tile/codegen/cuda/cuda_renderer.h"
#include "tile/codegen/opencl/opencl_renderer.h"

namespace tessel::tile {

std::string render(const Kernel& lowered, const Target& target) {
  switch (target.kind) {
    case TargetKind::kCpu:
      return render_cpu(lowered);
    case TargetKind::kOpenCL:
      return render_opencl(lowered, target);
    case TargetKind::kCuda:
      return render_cuda(lowered, target);
  }
  return {};
}

}  // namespace tessel::tile
