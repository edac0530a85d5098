// Compile-time parameter spaces declared next to a kernel, for the auto-tuner (src/tune/):
//
//   tune gemm on cpu {
//     BM in [96, 144, 192, 288]
//     BN in [128, 256, 512]
//     BK in [128, 256, 384, 512]
//     require (BM * BK + BK * BN) * ELEMENT_BYTES <= 2 * FAST_MEMORY
//   }
//
// `tune KERNEL on TARGET` (cpu, gpu, opencl or cuda, as for `on gpu <...>` defaults) lists the
// values of some integer parameters of a kernel of the same file; every `require` must hold for
// a point to be tried. Constraints are integer expressions (+ - * / % comparisons && || !) over
// the kernel's integer parameters and the device's limits: FAST_MEMORY (bytes a block keeps
// close), MAX_THREADS (per block), COMPUTE_UNITS, ELEMENT_BYTES (of the dtype parameter T).
// The kernel parser skips these blocks; every mistake here is "file:line:col: what is wrong".
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "support/status.h"
#include "tile/ir/ir.h"

namespace tessel::tile {

// One constraint's expression: a number, a name, or an operator over operands.
struct SpaceExpr {
  enum class Kind { kInt, kName, kUnary, kBinary } kind = Kind::kInt;
  int64_t value = 0;
  std::string name;  // kName; the operator's spelling for kUnary/kBinary ("-", "!", "<=")
  std::vector<std::shared_ptr<const SpaceExpr>> operands;
  SourceLoc loc;
};

struct SpaceParam {
  std::string name;
  std::vector<int64_t> values;  // in the order written
  SourceLoc loc;
};

struct SpaceConstraint {
  std::shared_ptr<const SpaceExpr> expr;
  SourceLoc loc;
};

struct TuneSpace {
  std::string kernel;
  std::string target;  // cpu, gpu, opencl, cuda
  std::vector<SpaceParam> params;
  std::vector<SpaceConstraint> constraints;
  SourceLoc loc;

  // Number of points before constraints (the product of the list sizes).
  int64_t size() const;
  // The i-th point (0 <= i < size()), the first parameter varying slowest.
  std::map<std::string, int64_t> point(int64_t i) const;
};

// The names a constraint may use besides the kernel's parameters.
inline constexpr const char* kSpaceLimitNames[] = {"FAST_MEMORY", "MAX_THREADS", "COMPUTE_UNITS",
                                                   "ELEMENT_BYTES"};

// Every `tune` block of a .tile file, checked against the kernels of the same file.
Expected<std::vector<TuneSpace>> parse_tune_spaces(std::string_view source,
                                                   const std::string& file);

// Whether `values` (the point, the kernel's other parameters, the limits) satisfy every
// constraint. A division by zero or an overflow makes the point invalid, not an error.
bool satisfies(const TuneSpace& space, const std::map<std::string, int64_t>& values);

// The space for a device kind: the most specific target that matches ("opencl" before "gpu"),
// or nullptr when the kernel declares none for it.
const TuneSpace* find_space(const std::vector<TuneSpace>& spaces, const std::string& kernel,
                            const std::string& device_kind);

}  // namespace tessel::tile
