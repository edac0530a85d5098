// A thread's observer of the op library's kernel launches: graph capture and fused replay
// (graph/) see every launch a training step makes, record it, or hold an element-wise one back
// to run a fused kernel in its place. Outside such a step no hook is installed and a launch
// pays one thread-local load.
//
//   struct Recorder : ops::LaunchHook { ... };
//   Recorder r;
//   ops::LaunchHookScope scope(&r);   // launches on this thread now go through r
//
// Launches the hook itself makes (calling `launch`, or launching a fused kernel) do not reach it
// again: the hook is removed while it runs.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "ops/kernel_cache.h"

namespace tessel::ops {

class LaunchHook {
 public:
  virtual ~LaunchHook() = default;
  // An element-wise launch (launch_elementwise): `tensors` all have one shape (broadcast inputs
  // expanded, stride 0), the last one is written, the others read; `scalars` follow them.
  // `launch` runs it now, as it would have run without a hook.
  virtual Status elementwise(const std::string& kernel, const KernelParams& params,
                             const std::vector<Tensor>& tensors,
                             const std::vector<KernelArg>& scalars,
                             const std::function<Status()>& launch) = 0;
  // Any other launch (launch_kernel): which arguments it writes is the kernel's business.
  virtual Status kernel(const std::string& kernel, const KernelParams& params,
                        const std::vector<KernelArg>& args,
                        const std::function<Status()>& launch) = 0;
};

// The hook of this thread (nullptr: none).
LaunchHook* launch_hook();

// Installs a hook for this thread for the scope's life, then restores the one before.
class LaunchHookScope {
 public:
  explicit LaunchHookScope(LaunchHook* hook);
  ~LaunchHookScope();
  LaunchHookScope(const LaunchHookScope&) = delete;
  LaunchHookScope& operator=(const LaunchHookScope&) = delete;

 private:
  LaunchHook* previous_;
};

// Launches a kernel whose tile source was made at run time (graph/fusion.h generates them):
// `source` holds one kernel, parsed once per process and compiled once per device, both cached
// by the source's text, like the embedded kernels. No parameter is filled in (`T` included).
Status launch_source(const std::string& source, const std::vector<KernelArg>& args);
// Compiles (or finds) such a kernel for `device` without launching it.
Status prepare_source(Device* device, const std::string& source);

}  // namespace tessel::ops
