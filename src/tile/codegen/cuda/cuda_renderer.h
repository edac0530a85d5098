// CUDA C++ for NVRTC from lowered tile IR: blocks are thread blocks, shared tiles are __shared__
// arrays, 16-bit floats are unsigned-short bit patterns converted in registers (so the source
// needs no CUDA headers). The CDialect and GpuDialect below over the shared GPU renderer.
#pragma once

#include <string>

#include "tile/ir/ir.h"
#include "tile/target.h"

namespace tessel::tile {

std::string render_cuda(const Kernel& lowered, const Target& target);

}  // namespace tessel::tile
