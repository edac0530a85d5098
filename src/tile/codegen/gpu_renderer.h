// The structure shared by GPU code generators (OpenCL, CUDA): a block of the grid is a
// work-group / thread block of the kernel's `threads (R, C)` or the target's threads_per_block;
// shared tiles and fragments that place_fragments left in memory are __local / __shared__
// arrays; register fragments are private arrays holding each thread's share; a parallel loop is
// split among the threads by thread_tiling (passes/place_fragments.h), so thread t always owns
// the same elements. The loops over a thread's share have compile-time counts and are unrolled,
// and the guards that a share divides evenly make true are left out, so a fragment becomes
// registers and a thread's run of adjacent columns (Target::column_run) straight-line code a
// compiler vectorises. A target adds only data: its CDialect and a GpuDialect of kernel-level
// spellings.
#pragma once

#include <string>

#include "tile/codegen/c_renderer.h"
#include "tile/target.h"

namespace tessel::tile {

struct GpuDialect {
  std::string prelude;  // helper functions, emitted before the kernel
  // e.g. `__kernel void`: "{threads}" is replaced by the block's thread count, "{threads_x}" and
  // "{threads_y}" by its columns and rows (count and 1 for a block without a 2-D shape).
  std::string kernel_prefix;
  std::string global_pointer;  // qualifier of tensor pointers: "__global " or ""
  std::string shared_array;    // qualifier of block-shared arrays: "__local " or "__shared__ "
  std::string barrier;         // a statement
  std::string thread_index;    // an int expression
  // int expressions of a thread's column and row in a 2-D block (OpenCL: get_local_id(0) and
  // (1), launched with a 2-D work-group, which PoCL turns into nested loops, so a row is the
  // same across a vector of work-items); empty: blocks are launched 1-D and the renderer
  // derives them from thread_index.
  std::string thread_xy[2];
  std::string block_index[3];  // long expressions for grid dimensions 0, 1, 2
  // When set (CUDA: gridDim.y and .z stop at 65535), an expression of the block's linear index
  // over whatever launch shape the device chose, and the kernel unflattens it into the grid's
  // dimensions itself (blocks past the grid's end return at once); block_index is then unused.
  std::string linear_block_index;
  std::string unroll;  // a pragma line, or empty
};

std::string render_gpu(const Kernel& lowered, const Target& target, const CDialect& c,
                       const GpuDialect& g);

}  // namespace tessel::tile
