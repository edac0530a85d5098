// Pass (GPU): put a barrier wherever one thread may touch shared memory that another thread
// touched since the last barrier: before a statement that reads or writes a shared tile (or a
// fragment in shared memory) written since then, or that writes one read since then. Loops are
// analysed as if they ran twice, so the next iteration's copy waits for this iteration's gemm.
// Register fragments need none: each element has one owner (place_fragments.h).
#pragma once

#include "tile/ir/ir.h"
#include "tile/target.h"

namespace tessel::tile {

Kernel insert_barriers(const Kernel& kernel, const Target& target);

}  // namespace tessel::tile
