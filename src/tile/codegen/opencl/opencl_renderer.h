// OpenCL C 1.2 from lowered tile IR: blocks are work-groups, shared tiles are __local arrays,
// 16-bit floats are ushort bit patterns converted in registers. The renderer is the CDialect and
// GpuDialect below over the shared GPU renderer (codegen/gpu_renderer.h).
#pragma once

#include <string>

#include "tile/ir/ir.h"
#include "tile/target.h"

namespace tessel::tile {

std::string render_opencl(const Kernel& lowered, const Target& target);

}  // namespace tessel::tile
