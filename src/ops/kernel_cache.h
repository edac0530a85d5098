// Compiled tile kernels for the operator library, one per (device, kernel, specialisation), and
// launches that take Tensors.
//
//   TESSEL_TRY(launch_kernel("unary", {{"OP", "1"}}, {x3, y3, 1.0}));   // relu on x's device
//
// The kernels are the files in kernels/*.tile, compiled into libtessel as text. The first launch
// of a (device, kernel, parameters) triple compiles it for the device (ops/device_kernel.h; CPU:
// the kernel compiled ahead of time when the build made one for it, else the JIT with its
// on-disk cache, so a later process only loads a shared object; OpenCL: the driver) and keeps it
// for the life of the process; every later launch is a map lookup. The parameters are the
// kernel's compile-time parameters (-D NAME=VALUE); the dtype parameter T is filled in from the
// first tensor argument when the caller leaves it out. The [target] options in force for the
// device's kind (set_target_options) are part of the key.
//
// Tensor arguments carry their own shape and strides (any view works, including stride 0) and
// are passed where they lie: buffer + offset, on every device. A launch is queued on the device's
// queue; reading a result (a copy to the host) waits for it.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <variant>
#include <vector>

#include "runtime/tensor.h"
#include "support/status.h"

namespace tessel::ops {

using KernelParams = std::map<std::string, std::string>;
// A tensor's elements seen with another shape and strides (in elements, from the tensor's first
// element): how an op hands a kernel an N-d tensor as the [D0, D1, D2] the kernel declares.
struct View {
  Tensor tensor;
  Shape shape;
  Strides strides;
};
using KernelArg = std::variant<Tensor, View, double, int64_t>;

// Launches `kernel` (a kernel name from kernels/*.tile) on the device of the tensor arguments,
// which must all be on one device. Returns once the kernel is queued (on the CPU: has run).
Status launch_kernel(const std::string& kernel, KernelParams params,
                     const std::vector<KernelArg>& args);

// Whether the op library launches kernels on devices of this kind: every kind (cpu, opencl, cuda)
// now; a backend added later may start without.
bool launches_on(DeviceKind kind);

// Compiles (or finds) the kernel for `device` without launching it.
Status prepare_kernel(Device* device, const std::string& kernel, KernelParams params);

// How many kernels this process compiled or loaded, and how long that took: compile cost stays
// out of the steady state, and tests print it.
struct KernelCacheStats {
  int64_t compiled = 0;       // JIT (or OpenCL driver) compiles, including loads from disk
  int64_t ahead_of_time = 0;  // CPU kernels taken from the build's library (tile/run/cpu_aot.h)
  double compile_seconds = 0;
  int64_t launches = 0;
};
KernelCacheStats kernel_cache_stats();

// The text of every kernel file, by file name ("gemm.tile"), as embedded at build time.
const std::map<std::string, std::string>& embedded_kernel_files();

}  // namespace tessel::ops
