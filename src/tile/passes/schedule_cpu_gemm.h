// Pass (CPU): the schedule of codegen/cpu/templates/tile_gemm_schedule.h, for gemms of packed
// tiles (pack_gemm_operands), so generated kernels keep up with vendor BLAS:
//   - Edge packing: when a packed tile's one copy and the gemms that read it sit in one statement
//     list, and the gemm's two operands agree on where their K range starts and ends, the tiles
//     are packed and multiplied at the size of the part inside the tensors (edge_packed), so a
//     ragged tile costs no padding work.
//   - Shared tiles: when that copy sits in a loop at the top of the grid, reads a tensor nobody
//     writes, and its origin depends only on block indices, the loop index and sizes, the tile is
//     the same for every block with those indices: it is packed once per launch into a table
//     shared by all blocks (memo_key names the indices), instead of once per block.
// The code generator then also runs blocks in groups of block rows (block_coords), so the packed
// tiles a group reads stay in cache.
#pragma once

#include "tile/ir/ir.h"

namespace tessel::tile {

Kernel schedule_cpu_gemm(const Kernel& kernel);

}  // namespace tessel::tile
