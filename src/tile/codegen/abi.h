// How a compiled kernel receives its arguments, the same on every target: a flat list of slots.
// For each kernel argument in order, a tensor gives its data pointer, the offset of its first
// element from there (in elements, so a view into a device buffer needs no copy), then one stride
// per dimension (in elements), a scalar gives its value; then every run-time size (M, N, K) in order
// of first appearance. The CPU passes the slots as an array of tessel_cpu::Arg; OpenCL and CUDA
// pass them as separate kernel arguments in the same order.
#pragma once

#include <string>
#include <vector>

#include "tile/ir/ir.h"

namespace tessel::tile {

struct ArgSlot {
  enum class Kind { kData, kOffset, kStride, kScalar, kSize };
  Kind kind;
  int arg = -1;  // index into Kernel::args (kData, kStride, kScalar)
  int dim = -1;  // kStride: which dimension
  std::string name;  // the C name of the slot: "A", "A_offset", "A_stride0", "alpha", "M"
  DType type;        // kData: the element type; kScalar: the scalar's type; otherwise i64
};

std::vector<ArgSlot> kernel_slots(const Kernel& kernel);

// The name of the compiled entry point: "tessel_" + kernel name.
std::string entry_name(const Kernel& kernel);

}  // namespace tessel::tile
