// Pass: make ragged edges correct and prove tile accesses safe.
//   - Every element load from a global tensor gets a predicate (0 <= index < size on each
//     dimension, leaving out the halves that are provably true); a masked-off element reads as 0,
//     or as the copy's `pad`. Every element store to a global tensor gets the same predicate.
//   - Every element access of a shared/fragment tile must provably stay inside the tile, from the
//     ranges of loop indices, block indices and sizes; otherwise it is a user error.
//   - A parallel loop whose only effects are masked global stores gets run-time `limits`: its
//     iterations past the tensor's edge do nothing, so code generators stop the loop there.
#pragma once

#include "support/status.h"
#include "tile/ir/ir.h"

namespace tessel::tile {

Expected<Kernel> infer_bounds(const Kernel& kernel);

}  // namespace tessel::tile
