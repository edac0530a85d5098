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
  int default_index = -1;  // the kernel's own defaults on this target, when they are a point
  std::map<std::string, std::string> defaults;  // those defaults' tuned parameters, in any case
};

// `fixed` holds the kernel's other parameters (T, BIAS...), `target` is "cpu", "opencl" or
// "cuda", `workers` the threads (CPU) or compute units that run blocks at once, `sizes` the
// kernel's run-time sizes by name. Points whose specialisation fails are left out.
Expected<SpacePoints> space_points(const tile::TuneSpace& space, const tile::Kernel& kernel,
                                   const std::map<std::string, std::string>& fixed,
                                   const std::string& target, const DeviceLimits& limits,
                                   int workers, const std::map<std::string, int64_t>& sizes);

}  // namespace tessel::tune
