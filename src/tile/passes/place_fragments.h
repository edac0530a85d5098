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
//
// With column runs (run > 1) a thread owns runs of `run` adjacent columns instead of single
// ones: column (t % tc + tc * (b / run)) * run + b % run. A target whose compiler vectorises
// within a thread (PoCL runs a work-item as plain C) wants runs; a GPU, whose neighbouring
// threads read neighbouring words, wants run 1.
struct ThreadTiling {
  int64_t rows = 1, cols = 1;
  int tr = 1, tc = 1;
  int64_t row_steps = 1, col_steps = 1;
  int64_t run = 1;
  // Rows and columns follow the block's own 2-D thread shape (`threads (R, C)`): thread (r, c)
  // is r = t / tc, c = t % tc, which an OpenCL renderer reads from get_local_id(1) and (0).
  bool block_shaped = false;
  int64_t per_thread() const { return row_steps * col_steps; }
};
ThreadTiling thread_tiling(const std::vector<int64_t>& extents, int threads);

// A block's threads: `count` in all; rows x cols when the kernel's grid says `threads (R, C)`
// (0 x 0 otherwise); `column_run` is the target's longest column run (Target::column_run).
struct BlockThreads {
  int count = 1;
  int rows = 0, cols = 0;
  int column_run = 1;
};
// What `kernel` (specialised: its threads are constants) runs a block with on `target`: the
// grid's `threads (...)` where it has them, else the target's threads_per_block.
BlockThreads block_threads(const Kernel& kernel, const Target& target);
// The split every pass and renderer uses for a loop in a block: a loop of rank 2 or more with at
// least block.cols columns follows the block's shape, in runs of up to column_run columns that
// divide the columns evenly; any other loop is thread_tiling(extents, block.count).
ThreadTiling thread_tiling(const std::vector<int64_t>& extents, const BlockThreads& block);

Kernel place_fragments(const Kernel& kernel, const Target& target);

}  // namespace tessel::tile
