// The structure shared by GPU code generators (OpenCL, CUDA): a block of the grid is a
// work-group / thread block of `threads_per_block` threads; shared tiles and fragments that
// place_fragments left in memory are __local / __shared__ arrays; register fragments are private
// arrays holding each thread's share; a parallel loop is split among the threads by
// thread_tiling (passes/place_fragments.h), so thread t always owns the same elements. A target
// adds only data: its CDialect and a GpuDialect of kernel-level spellings.
#pragma once

#include <string>

#include "tile/codegen/c_renderer.h"
#include "tile/target.h"

namespace tessel::tile {

struct GpuDialect {
  std::string prelude;        // helper functions, emitted before the kernel
  std::string kernel_prefix;  // e.g. `__kernel void` ("{threads}" is replaced by the block size)
  std::string global_pointer; // qualifier of tensor pointers: "__global " or ""
  std::string shared_array;   // qualifier of block-shared arrays: "__local " or "__shared__ "
  std::string barrier;        // a statement
  std::string thread_index;   // an int expression
  std::string block_index[3]; // long expressions for grid dimensions 0, 1, 2
  // When set (CUDA: gridDim.y and .z stop at 65535), an expression of the block's linear index
  // over whatever launch shape the device chose, and the kernel unflattens it into the grid's
  // dimensions itself (blocks past the grid's end return at once); block_index is then unused.
  std::string linear_block_index;
  std::string unroll;         // a pragma line, or empty
};

std::string render_gpu(const Kernel& lowered, const Target& target, const CDialect& c, const GpuDialect& g);

}  // namespace tessel::tile
