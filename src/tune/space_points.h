// A kernel's tuning space made concrete for one device and one shape: every point that meets
// the space's constraints, its position in the space (for the search's neighbours) and its
// features for the cost model, read from the kernel specialised at that point: blocks in the
// grid, how evenly they split among the device's workers, the share of each block's work that
// falls past a ragged edge, and the fast memory its tiles take against the device's.
//
//   TESSEL_ASSIGN_OR_RETURN(SpacePoints s, space_points(space, kernel, {{"T", "bf16"}}, "cpu",
//                                                       limits, workers, {{"M", 2048}, ...}));
#pragma once

#include <map>
#include <string>
#include <vector>

#include "runtime/device.h"
#include "support/status.h"
#include "tile/ir/ir.h"
#include "tile/parse/tune_space.h"

namespace tessel::tune {

struct SpacePoints {
  std::vector<std::map<std::string, std::string>> points;  // the tuned parameters of each point
  std::vector<std::vector<int>> coords;                    // index into each parameter's values
  std::vector<std::vector<double>> features;
  // The baseline: what a launch runs untuned, the kernel's defaults on this target overridden by
  // the block sizes the op itself passed (ops/matmul_ops.cpp picks smaller CPU blocks for small
  // products). The search starts from it and the tuned choice must beat it, so a choice never
  // replaces an op's rule by something slower. It is always a point: one off the declared grid
  // (or ruled out by its constraints) is appended at the end, its coordinates those of the
  // nearest grid values.
  int default_index = -1;
  std::map<std::string, std::string> defaults;  // the baseline's tuned parameters
};

// The kernel's own values of the space's parameters on `target` ("cpu", "opencl", "cuda"):
// its declared defaults with the target's `on ...` defaults applied.
std::map<std::string, std::string> kernel_space_defaults(const tile::TuneSpace& space,
                                                         const tile::Kernel& kernel,
                                                         const std::string& target);

// `fixed` holds the kernel's other parameters (T, BIAS...), `target` is "cpu", "opencl" or
// "cuda", `workers` the threads (CPU) or compute units that run blocks at once, `sizes` the
// kernel's run-time sizes by name, `baseline` the tuned parameters the op passed (empty: the
// kernel's defaults). Points whose specialisation fails are left out.
Expected<SpacePoints> space_points(const tile::TuneSpace& space, const tile::Kernel& kernel,
                                   const std::map<std::string, std::string>& fixed,
                                   const std::string& target, const DeviceLimits& limits,
                                   int workers, const std::map<std::string, int64_t>& sizes,
                                   const std::map<std::string, std::string>& baseline = {});

}  // namespace tessel::tune
