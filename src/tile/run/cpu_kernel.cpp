// Compiling and launching tile kernels on the CPU (see cpu_kernel.h).
#include "tile/run/cpu_kernel.h"

#include <cstdlib>

#include "hw/cpu_info.h"
#include "support/thread_pool.h"
#include "tile/codegen/cpu/cpu_renderer.h"
#include "tile/pipeline.h"
#include "tile/run/cpu_aot.h"

namespace tessel::tile {

Expected<Kernel> lower_for_cpu(const Kernel& parsed, const std::map<std::string, std::string>& params) {
  CompileOptions o;
  int64_t l2 = host_cpu_info().caches.l2_bytes;
  o.target = Target::cpu(l2 > 0 ? l2 : 1 << 20);
  o.params = params;
  return compile_ir(parsed, o);
}

Expected<CpuKernel> CpuKernel::compile(const Kernel& parsed, const std::map<std::string, std::string>& params,
                                       const CpuJitOptions& jit) {
  CpuKernel k;
  TESSEL_ASSIGN_OR_RETURN(k.ir_, lower_for_cpu(parsed, params));
  k.used_ = used_arguments(k.ir_);
  k.source_ = render_cpu(k.ir_);
  Expected<CpuModule> aot = unavailable("ahead-of-time kernels not asked for");
  if (jit.ahead_of_time) aot = aot_cpu_module(k.source_, jit.isa);
  if (aot.ok()) {
    k.module_ = std::move(*aot);
  } else {
    TESSEL_ASSIGN_OR_RETURN(k.module_, jit_compile_cpu(k.source_, entry_name(k.ir_), jit));
  }
  const std::string& entry = k.module_.entry_name;
  k.workspace_size_ = reinterpret_cast<WorkspaceSize>(module_symbol(k.module_, entry + "_workspace"));
  k.workspace_prepare_ = reinterpret_cast<WorkspacePrepare>(module_symbol(k.module_, entry + "_prepare"));
  return k;
}

CpuKernel::Workspace::~Workspace() { std::free(memory); }

Status CpuKernel::launch(const std::vector<LaunchArg>& args) const {
  TESSEL_ASSIGN_OR_RETURN(BoundLaunch b, bind_launch(ir_, used_, args));
  tessel_cpu::KernelEntry entry = module_.entry;
  std::unique_lock<std::mutex> lock;
  if (workspace_size_ && b.blocks > 0) {
    // The workspace follows the argument slots.
    lock = std::unique_lock<std::mutex>(workspace_->mu);
    int64_t bytes = workspace_size_(b.slots.data());
    if (bytes > workspace_->bytes) {
      std::free(workspace_->memory);
      size_t rounded = (static_cast<size_t>(bytes) + 63) / 64 * 64;
      workspace_->memory = std::aligned_alloc(64, rounded);
      if (!workspace_->memory) {
        workspace_->bytes = 0;
        return resource_exhausted("kernel '{}': no memory for its {} byte workspace", ir_.name, bytes);
      }
      workspace_->bytes = bytes;
    }
    workspace_prepare_(b.slots.data(), workspace_->memory);
    tessel_cpu::Arg ws;
    ws.ptr = workspace_->memory;
    b.slots.push_back(ws);
  }
  const tessel_cpu::Arg* slots = b.slots.data();
  // One block per chunk: blocks are big, and uneven ones (ragged edges) balance that way.
  ThreadPool::global().parallel_for(b.blocks, 1, [&](int64_t begin, int64_t end) { entry(slots, begin, end); });
  return ok_status();
}

}  // namespace tessel::tile
