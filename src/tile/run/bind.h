// Binding launch arguments to a compiled kernel, the same for every target: checks each tensor's
// dtype, rank and sizes against the kernel's signature, gives each run-time size (M, N, K) its
// value (the same from every tensor that names it), fills the argument slots (codegen/abi.h)
// and evaluates the grid. Every mismatch is a Status naming the kernel and the argument.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <variant>
#include <vector>

#include "support/status.h"
#include "tile/codegen/abi.h"
#include "tile/codegen/cpu/abi.h"
#include "tile/ir/ir.h"

namespace tessel::tile {

// A tensor argument: where its elements are (host memory for the CPU, a device buffer handle for
// OpenCL/CUDA), their dtype, the shape, strides in elements (empty: contiguous row-major), and
// the offset in elements of element [0, ...] from `data` (a view into a larger buffer).
// A transposed or broadcast operand is a strided view: swap the strides, or use stride 0.
struct TensorArg {
  void* data = nullptr;
  ScalarType dtype = ScalarType::kF32;
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;
  int64_t offset = 0;
};

// A tensor, or a scalar (floating point or integer, converted to the kernel's scalar type).
using LaunchArg = std::variant<TensorArg, double, int64_t>;

struct BoundLaunch {
  std::vector<tessel_cpu::Arg> slots;  // in kernel_slots() order
  std::array<int64_t, 3> grid = {1, 1, 1};
  int64_t blocks = 1;  // grid[0] * grid[1] * grid[2]
};

// `used` marks the kernel arguments the lowered IR reads or writes; an unused tensor (such as a
// bias that a specialisation leaves out) may be passed with null data.
Expected<BoundLaunch> bind_launch(const Kernel& lowered, const std::vector<bool>& used,
                                  const std::vector<LaunchArg>& args);
// The same with the kernel's slots (kernel_slots(lowered)) made once by the caller: a compiled
// kernel keeps them, so a launch does not rebuild their names.
Expected<BoundLaunch> bind_launch(const Kernel& lowered, const std::vector<bool>& used,
                                  const std::vector<LaunchArg>& args,
                                  const std::vector<ArgSlot>& slots);

// Which kernel arguments the IR uses.
std::vector<bool> used_arguments(const Kernel& lowered);

// The value of an integer expression over sizes and integer scalars.
Expected<int64_t> eval_int(const Expr& e, const std::map<std::string, int64_t>& env);

}  // namespace tessel::tile
