// Pass: after specialisation, check everything about tile shapes that needed numbers: tile
// dimensions and parallel extents are positive constants, stages >= 1, copy/gemm/reduce
// operands agree ("gemm shapes do not agree: ..."). Errors point at the offending statement.
#pragma once

#include "support/status.h"
#include "tile/ir/ir.h"

namespace tessel::tile {

Status check_shapes(const Kernel& kernel);

// The shape a tile operand presents to an operation: its buffer's shape with the last two
// dimensions swapped when transposed. Only for shared/fragment operands.
std::vector<int64_t> tile_shape(const TileRef& t);

}  // namespace tessel::tile
