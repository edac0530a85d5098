// A tile kernel compiled for this CPU and ready to run: the pass pipeline, the CPU renderer and
// the JIT in one call, then launches that bind tensors and scalars and run the grid's blocks on
// worker threads.
//
//   auto k = CpuKernel::compile(parse_kernel(text, "gemm.tile").value(), {{"BM", "64"}});
//   Status s = k->launch({TensorArg{a, ScalarType::kF32, {M, K}}, ..., 1.0, 0.0});
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "support/status.h"
#include "tile/ir/ir.h"
#include "tile/run/bind.h"
#include "tile/run/cpu_jit.h"

namespace tessel::tile {

// The pass pipeline for this CPU (its L2 size bounds the tiles): the IR that render_cpu() turns
// into the C++ that the JIT or the ahead-of-time build (cpu_aot.h) compiles.
Expected<Kernel> lower_for_cpu(const Kernel& parsed,
                               const std::map<std::string, std::string>& params = {});

// Compiles through the JIT, or takes the kernel from the ahead-of-time library when its source
// is there (CpuJitOptions::ahead_of_time; module().ahead_of_time says which happened).
class CpuKernel {
 public:
  // `params` overrides compile-time parameters (-D NAME=VALUE).
  static Expected<CpuKernel> compile(const Kernel& parsed,
                                     const std::map<std::string, std::string>& params = {},
                                     const CpuJitOptions& jit = {});

  // Arguments in the kernel's order. Runs the whole grid and returns when it is done.
  Status launch(const std::vector<LaunchArg>& args) const;

  const Kernel& ir() const { return ir_; }
  const std::string& source() const { return source_; }
  const CpuModule& module() const { return module_; }

 private:
  // Memory for tiles that blocks share (<entry>_workspace / <entry>_prepare in the generated
  // code), kept across launches; one launch at a time uses it.
  struct Workspace {
    std::mutex mu;
    void* memory = nullptr;
    int64_t bytes = 0;
    ~Workspace();
  };
  using WorkspaceSize = int64_t (*)(const tessel_cpu::Arg*);
  using WorkspacePrepare = void (*)(const tessel_cpu::Arg*, void*);

  Kernel ir_;
  std::vector<bool> used_;
  std::string source_;
  CpuModule module_;
  WorkspaceSize workspace_size_ = nullptr;
  WorkspacePrepare workspace_prepare_ = nullptr;
  std::shared_ptr<Workspace> workspace_ = std::make_shared<Workspace>();
};

}  // namespace tessel::tile
