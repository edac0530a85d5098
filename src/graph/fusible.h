// The one table of what fuses: for each element-wise kernel of kernels/*.tile (and its OP
// numbers) the tile-language expression of one output element, written from its inputs' and
// scalars' names. The fusion pass composes these into one generated kernel (fusion.h). Each
// entry is the kernel's own formula, copied from its .tile file, so a fused group computes what
// its launches did; a kernel or OP not listed here does not fuse.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "ops/kernel_cache.h"

namespace tessel::graph {

// The expression of `kernel` with `params` over f32 inputs named `in` and f32 scalars named
// `scalars`; nullopt when it is not in the table (or the counts do not match its signature).
std::optional<std::string> elementwise_expression(const std::string& kernel,
                                                  const ops::KernelParams& params,
                                                  const std::vector<std::string>& in,
                                                  const std::vector<std::string>& scalars);

}  // namespace tessel::graph
