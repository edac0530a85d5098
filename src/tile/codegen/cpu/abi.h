// The calling convention between tessel and the kernels it compiles for the CPU. Shared by the
// generated code (through prelude.h) and the launcher, so it depends on nothing but <cstdint>.
#pragma once

#include <cstdint>

namespace tessel_cpu {

// One argument slot (tile/codegen/abi.h says which slot holds what).
union Arg {
  void* ptr;
  int64_t i64;
  double f64;
  float f32;
  int32_t i32;
};

// Every compiled kernel exports one entry point that runs blocks [block_begin, block_end) of its
// grid; the launcher hands ranges of blocks to the thread pool. It returns 0, or, when it could
// not allocate its per-thread tile memory, the number of bytes it asked for; then it has run no
// block of the range and written nothing, and the launcher reports the failure as an error.
typedef int64_t (*KernelEntry)(const Arg* args, int64_t block_begin, int64_t block_end);

}  // namespace tessel_cpu
