// Tile kernels compiled for and launched on a Device (see device_kernel.h).
#include "ops/device_kernel.h"

#include <algorithm>
#include <mutex>

#include "tile/codegen/abi.h"
#include "tile/codegen/render.h"
#include "tile/passes/place_fragments.h"
#include "tile/pipeline.h"

namespace tessel::ops {
namespace {

struct OptionsTable {
  std::mutex mutex;
  std::map<DeviceKind, TargetOptions> options;
};
OptionsTable& options_table() {
  static OptionsTable* t = new OptionsTable;  // never destroyed: read by static destructors too
  return *t;
}

// The build options each device kind's compiler gets.
std::string build_options(DeviceKind kind, const TargetOptions& options) {
  switch (kind) {
    case DeviceKind::kCpu:
      return options.cpu_isa;
    case DeviceKind::kOpenCL:
      return "-cl-std=CL1.2";
    case DeviceKind::kCuda:
      return "";
  }
  return "";
}

// One ABI slot as a device argument: tensors are buffers, everything else a scalar of the width
// the renderers declare (f32 and i32 scalars 4 bytes, the rest 8).
KernelArgument device_argument(const tile::ArgSlot& slot, const tessel_cpu::Arg& value) {
  switch (slot.kind) {
    case tile::ArgSlot::Kind::kData:
      return KernelArgument::memory(DeviceBuffer{value.ptr, 0});
    case tile::ArgSlot::Kind::kScalar:
      if (slot.type == tile::kF32) return KernelArgument::scalar(value.f32);
      if (slot.type == tile::DType(tile::ScalarType::kF64))
        return KernelArgument::scalar(value.f64);
      if (slot.type == tile::kI32) return KernelArgument::scalar(value.i32);
      return KernelArgument::scalar(value.i64);
    default:
      return KernelArgument::scalar(value.i64);
  }
}

}  // namespace

void set_target_options(DeviceKind kind, const TargetOptions& options) {
  OptionsTable& t = options_table();
  std::lock_guard<std::mutex> lock(t.mutex);
  t.options[kind] = options;
}

TargetOptions target_options(DeviceKind kind) {
  OptionsTable& t = options_table();
  std::lock_guard<std::mutex> lock(t.mutex);
  auto it = t.options.find(kind);
  return it == t.options.end() ? TargetOptions{} : it->second;
}

tile::Target device_target(DeviceKind kind, const DeviceLimits& limits,
                           const TargetOptions& options) {
  tile::Target t;
  const int most = std::max(1, limits.max_threads_per_block);
  switch (kind) {
    case DeviceKind::kCpu:
      t = tile::Target::cpu(tile::cpu_tile_budget(limits.fast_memory_bytes));
      break;
    case DeviceKind::kOpenCL:
      t = tile::Target::opencl(limits.fast_memory_bytes > 0 ? limits.fast_memory_bytes : 32 << 10,
                               std::min(128, most));
      // A CPU's OpenCL (PoCL) vectorises within a work-item: 16 adjacent floats per thread.
      if (!limits.gpu) t.column_run = 16;
      break;
    case DeviceKind::kCuda:
      t = tile::Target::cuda(limits.fast_memory_bytes > 0 ? limits.fast_memory_bytes : 48 << 10,
                             std::min(256, most));
      break;
  }
  if (options.fast_memory_bytes > 0) t.fast_memory_bytes = options.fast_memory_bytes;
  if (options.threads_per_block > 0 && t.is_gpu()) t.threads_per_block = options.threads_per_block;
  return t;
}

tile::Target device_target(const Device& device) {
  return device_target(device.kind(), device.limits(), target_options(device.kind()));
}

Expected<DeviceKernel> DeviceKernel::compile(const tile::Kernel& parsed, Device* device,
                                             const std::map<std::string, std::string>& params) {
  const TargetOptions options = target_options(device->kind());
  DeviceKernel k;
  k.device_ = device;
  k.target_ = device_target(device->kind(), device->limits(), options);
  tile::CompileOptions o;
  o.target = k.target_;
  o.params = params;
  TESSEL_ASSIGN_OR_RETURN(k.ir_, tile::compile_ir(parsed, o));
  k.used_ = tile::used_arguments(k.ir_);
  k.slots_ = tile::kernel_slots(k.ir_);
  k.source_ = tile::render(k.ir_, k.target_);
  KernelImage image{k.ir_.name, tile::entry_name(k.ir_), k.source_,
                    build_options(device->kind(), options)};
  TESSEL_ASSIGN_OR_RETURN(k.module_, device->build(image));
  return k;
}

Status DeviceKernel::launch(const std::vector<tile::LaunchArg>& args) const {
  // Binding's errors name the kernel and the argument (tile/run/bind.h), Device::launch's the
  // kernel and the device: each once.
  TESSEL_ASSIGN_OR_RETURN(tile::BoundLaunch bound, tile::bind_launch(ir_, used_, args, slots_));
  if (bound.blocks == 0) return ok_status();
  std::vector<KernelArgument> device_args;
  device_args.reserve(slots_.size());
  for (size_t i = 0; i < slots_.size(); ++i)
    device_args.push_back(device_argument(slots_[i], bound.slots[i]));
  LaunchGrid grid;
  grid.blocks = bound.grid;
  const tile::BlockThreads block = tile::block_threads(ir_, target_);
  grid.threads_per_block = block.count;
  grid.block_columns = block.cols;
  return device_->launch(*module_, grid, device_args);
}

}  // namespace tessel::ops
