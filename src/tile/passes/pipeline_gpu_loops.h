// Pass (GPU): software pipelining of `for k in pipelined(n, stages=S)`. The shared tiles the loop
// fills by copies from global memory get S copies each; before the loop the copies of iterations
// 0 .. S-2 are issued, and iteration k first issues the copies of iteration k + S - 1 into the
// copy of the tiles that iteration k - 1 finished with, then computes on its own. Loads of later
// tiles so overlap this tile's compute, and a K step needs one barrier instead of two.
//
// Applies to a pipelined loop directly in the grid whose body starts with the copies, when those
// tiles are written nowhere else and read only inside the loop, and the copies' origins depend
// only on the loop index and values fixed for the block (the copies then also run for the S - 1
// iterations past the end, whose tiles lie wholly outside the tensor and read nothing). Other pipelined loops (and every loop on
// the CPU, where packing takes the copies' place) run as plain loops.
#pragma once

#include "tile/ir/ir.h"
#include "tile/target.h"

namespace tessel::tile {

Kernel pipeline_gpu_loops(const Kernel& kernel, const Target& target);

}  // namespace tessel::tile
