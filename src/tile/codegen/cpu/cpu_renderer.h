// C++ for the CPU from lowered tile IR. One function per kernel,
//
//   extern "C" int64_t tessel_<kernel>(const tessel_cpu::Arg* args, int64_t begin, int64_t end)
//
// runs blocks [begin, end) of the grid one after another (the launcher gives ranges of blocks to
// the thread pool) and returns 0, or the bytes of tile memory it could not allocate (then it
// runs no block). Tiles live in per-thread scratch memory; copies into packed tiles and gemms
// of packed tiles call the per-ISA templates (templates/tile_gemm.h); element loops are plain
// loops whose innermost dimension carries `#pragma omp simd`, so the compiler vectorises them.
// The source is compiled once per ISA with different -m flags.
#pragma once

#include <string>

#include "tile/ir/ir.h"

namespace tessel::tile {

std::string render_cpu(const Kernel& lowered);

}  // namespace tessel::tile
