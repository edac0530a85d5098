// The code generator of a target, chosen by its kind: lowered IR -> the source a device builds
// (C++ for the CPU, OpenCL C, CUDA C++). A new target adds its renderer here.
//
//   std::string source = render(compile_ir(kernel, {.target = target}).value(), target);
#pragma once

#include <string>

#include "tile/ir/ir.h"
#include "tile/target.h"

namespace tessel::tile {

std::string render(const Kernel& lowered, const Target& target);

}  // namespace tessel::tile
