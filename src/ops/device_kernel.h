// A tile kernel compiled for one Device, and its launches: where the tile compiler meets the
// runtime. The device's limits() (with the [target] options for its kind) give the compiler's
// Target; the pass pipeline and the target's renderer make a KernelImage; the device builds it
// (and keeps it). A launch binds the arguments (tile/run/bind.h: dtypes, ranks, sizes, the
// grid) and hands the device the kernel ABI's slots (tile/codegen/abi.h) as buffer and scalar
// KernelArguments on its queue: a tensor is its buffer plus its offset in elements, so a view
// into a buffer is launched where it lies, on every device.
//
//   TESSEL_ASSIGN_OR_RETURN(DeviceKernel k, DeviceKernel::compile(parsed, device, {{"BM", "64"}}));
//   TESSEL_TRY(k.launch({tile::TensorArg{a.handle, ScalarType::kF32, {M, K}}, ..., 1.0}));
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "runtime/device.h"
#include "tile/ir/ir.h"
#include "tile/run/bind.h"
#include "tile/target.h"

namespace tessel::ops {

// What the [target] table says about one kind of device (ops/target_config.h); 0 or "" leaves
// the device's own figure.
struct TargetOptions {
  int threads_per_block = 0;      // OpenCL work-group size, CUDA threads per block
  int64_t fast_memory_bytes = 0;  // CPU cache a block's tiles fit in, OpenCL local, CUDA shared
  std::string cpu_isa;            // the CPU variant kernels are built for ("avx2"; "" the best)
};
// Process-wide, per kind of device: kernels compiled after the call use them.
void set_target_options(DeviceKind kind, const TargetOptions& options);
TargetOptions target_options(DeviceKind kind);

// The compiler's target for a device of `kind` with `limits`: fast memory and threads per block
// from the device (GPUs: 128 OpenCL work-items, 256 CUDA threads, at most the device's maximum),
// then `options` on top.
tile::Target device_target(DeviceKind kind, const DeviceLimits& limits,
                           const TargetOptions& options);
// The same for `device`, with the options set for its kind.
tile::Target device_target(const Device& device);

class DeviceKernel {
 public:
  // Lowers `parsed` for the device's target with compile-time `params` (-D NAME=VALUE), renders
  // it and builds it on `device`.
  static Expected<DeviceKernel> compile(const tile::Kernel& parsed, Device* device,
                                        const std::map<std::string, std::string>& params = {});

  // Arguments in the kernel's order; a tensor's TensorArg::data is a buffer handle of the device
  // (DeviceBuffer::handle: a host pointer on the CPU). Queued on the device's queue.
  Status launch(const std::vector<tile::LaunchArg>& args) const;

  Device* device() const { return device_; }
  const tile::Target& target() const { return target_; }
  const tile::Kernel& ir() const { return ir_; }
  const std::string& source() const { return source_; }
  // The CPU: the kernel came from the build's ahead-of-time library.
  bool ahead_of_time() const { return module_->ahead_of_time(); }

 private:
  Device* device_ = nullptr;
  tile::Target target_;
  tile::Kernel ir_;
  std::vector<bool> used_;
  std::vector<tile::ArgSlot> slots_;  // kernel_slots(ir_), made once
  std::string source_;
  std::shared_ptr<KernelModule> module_;
};

}  // namespace tessel::ops
