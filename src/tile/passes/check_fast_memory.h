// Pass: refuse a kernel whose tiles do not fit the target's fast memory: on a CPU the per-core
// L2 cache that a block's tiles must stay in to run at speed; on a GPU the local/shared memory of
// a work-group/block, plus the registers each thread spends on its share of register fragments.
// The message lists what each tile costs ("tile too large" with numbers, at the allocation that
// overflows).
#pragma once

#include "support/status.h"
#include "tile/ir/ir.h"
#include "tile/target.h"

namespace tessel::tile {

Status check_fast_memory(const Kernel& kernel, const Target& target);

// Bytes one element of `b` takes in fast memory on `target` (f16 gemm operands are packed as
// f32 on the CPU).
int fast_memory_element_bytes(const BufferNode& b, const Target& target);

}  // namespace tessel::tile
