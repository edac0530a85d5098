// Pass (GPU): decide where each fragment lives. The threads of a block share the elements of a
// parallel loop by a fixed rule (ThreadTiling, a function of the loop's extents only), so a
// fragment that is touched only by parallel loops over exactly its shape, at exactly the loop's
// indices, is always touched by the thread that owns the element: it can live in that thread's
// registers (Layout::kRegisters). Any other fragment (read across threads, as by a reduce or as
// a gemm operand) lives in the block's shared memory.
#pragma once

#include <cstdint>
#include <vector>

#include "tile/ir/ir.h"
#include "tile/target.h"

namespace tessel::tile {

// How `threads` threads split a parallel loop over `extents`: the leading dimensions flatten
// into rows, the last is columns; thread t works on rows t / tc + tr * a and columns
// t % tc + tc * b (a < row_steps, b < col_steps). Rank-1 loops are rows only (tc = 1).
struct ThreadTiling {
  int64_t rows = 1, cols = 1;
  int tr = 1, tc = 1;
  int64_t row_steps = 1, col_steps = 1;
  int64_t per_thread() const { return row_steps * col_steps; }
};
ThreadTiling thread_tiling(const std::vector<int64_t>& extents, int threads);

Kernel place_fragments(const Kernel& kernel, const Target& target);

}  // namespace tessel::tile
