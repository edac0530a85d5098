// Compiling and launching tile kernels on the CPU (see cpu_kernel.h).
#include "tile/run/cpu_kernel.h"

#include <algorithm>
#include <atomic>
#include <thread>

#include "hw/cpu_info.h"
#include "tile/codegen/cpu/cpu_renderer.h"
#include "tile/pipeline.h"

namespace tessel::tile {

namespace {

// Runs fn(begin, end) over [0, n) on one worker per usable core, handing out blocks one at a
// time so uneven blocks balance. (To move onto support/thread_pool.h once it lands.)
template <typename Fn>
void parallel_blocks(int64_t n, Fn fn) {
  int workers = std::max(1, host_cpu_info().topology.usable_cores);
  workers = static_cast<int>(std::min<int64_t>(workers, n));
  if (workers <= 1) {
    if (n > 0) fn(0, n);
    return;
  }
  std::atomic<int64_t> next{0};
  auto work = [&] {
    for (int64_t b; (b = next.fetch_add(1)) < n;) fn(b, b + 1);
  };
  std::vector<std::thread> threads;
  for (int w = 1; w < workers; ++w) threads.emplace_back(work);
  work();
  for (std::thread& t : threads) t.join();
}

}  // namespace

Expected<CpuKernel> CpuKernel::compile(const Kernel& parsed, const std::map<std::string, std::string>& params,
                                       const CpuJitOptions& jit) {
  CompileOptions o;
  int64_t l2 = host_cpu_info().caches.l2_bytes;
  o.target = Target::cpu(l2 > 0 ? l2 : 1 << 20);
  o.params = params;
  CpuKernel k;
  TESSEL_ASSIGN_OR_RETURN(k.ir_, compile_ir(parsed, o));
  k.used_ = used_arguments(k.ir_);
  k.source_ = render_cpu(k.ir_);
  TESSEL_ASSIGN_OR_RETURN(k.module_, jit_compile_cpu(k.source_, entry_name(k.ir_), jit));
  return k;
}

Status CpuKernel::launch(const std::vector<LaunchArg>& args) const {
  TESSEL_ASSIGN_OR_RETURN(BoundLaunch b, bind_launch(ir_, used_, args));
  tessel_cpu::KernelEntry entry = module_.entry;
  const tessel_cpu::Arg* slots = b.slots.data();
  parallel_blocks(b.blocks, [&](int64_t begin, int64_t end) { entry(slots, begin, end); });
  return ok_status();
}

}  // namespace tessel::tile
