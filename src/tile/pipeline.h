// The tile compiler's pass pipeline: parsed kernel -> IR ready for a code generator. One
// straight line of passes (passes/*.h, one function each); the IR can be printed after every
// one of them (`tessel compile --dump-ir`), and is verified after every one of them.
//
//   CompileOptions opts{.target = Target::cpu(), .params = {{"BM", "64"}}};
//   Expected<Kernel> ir = compile_ir(kernel, opts);
#pragma once

#include <functional>
#include <map>
#include <string>

#include "support/status.h"
#include "tile/ir/ir.h"
#include "tile/target.h"

namespace tessel::tile {

struct CompileOptions {
  Target target;
  std::map<std::string, std::string> params;  // compile-time parameter overrides (-D NAME=VALUE)
  // Called with the pass name and the IR after it, when set.
  std::function<void(const std::string& pass, const Kernel& ir)> dump;
};

Expected<Kernel> compile_ir(const Kernel& parsed, const CompileOptions& options);

// The pipeline for this CPU with its own numbers (its L2 cache per core bounds the tiles), as the
// CPU device compiles by default: what tessel_tilec renders for the ahead-of-time library, so the
// rendered sources, and so the library's lookup keys, are the same.
Expected<Kernel> lower_for_cpu(const Kernel& parsed,
                               const std::map<std::string, std::string>& params = {});

}  // namespace tessel::tile
