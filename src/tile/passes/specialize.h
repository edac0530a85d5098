// Pass: give every compile-time parameter its value (the default, or an override such as
// -D BM=64 / -D T=bf16), replace it everywhere, and fold what became constant. Afterwards the
// kernel has no Var of kind kParam and no dtype parameter; tile shapes are numbers.
#pragma once

#include <map>
#include <string>

#include "support/status.h"
#include "tile/ir/ir.h"

namespace tessel::tile {

// Overrides map a parameter name to its value as text ("64", "bf16"). Unknown names and
// values of the wrong kind are errors that name the kernel's file:line:col. `target` ("cpu",
// "opencl", "cuda") selects the kernel's `on ... <...>` defaults: those for "gpu" apply to opencl
// and cuda, those naming the target itself apply after them, the overrides last.
Expected<Kernel> specialize(const Kernel& kernel, const std::map<std::string, std::string>& overrides,
                            const std::string& target = "cpu");

}  // namespace tessel::tile
