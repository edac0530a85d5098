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

// Whether the expression is cheap (no exp, tanh, erf, log, sqrt, pow): only cheap ones join an
// epilogue. A producer's epilogue loop runs over its accumulator tile and is not vectorised on
// the CPU the way an element-wise kernel is, so a transcendental there costs more than the pass
// it saves (gelu's gradient in batched_gemm's epilogue: 12.9% of gpt_tiny's step against 3.3%
// for the unary_grad launch plus the product's own store; perf, 1 thread).
bool is_cheap_elementwise(const std::string& kernel, const ops::KernelParams& params);

}  // namespace tessel::graph
