// Target descriptions (see target.h).
#include "tile/target.h"

#include <algorithm>

#include "hw/cpu_info.h"

namespace tessel::tile {

std::string Target::name() const {
  switch (kind) {
    case TargetKind::kCpu:
      return "cpu";
    case TargetKind::kOpenCL:
      return "opencl";
    case TargetKind::kCuda:
      return "cuda";
  }
  return "?";
}

Target Target::cpu(int64_t l2_bytes) {
  Target t;
  t.kind = TargetKind::kCpu;
  t.fast_memory_bytes = l2_bytes;
  t.threads_per_block = 1;
  return t;
}

Target Target::opencl(int64_t local_bytes, int threads) {
  Target t;
  t.kind = TargetKind::kOpenCL;
  t.fast_memory_bytes = local_bytes;
  t.threads_per_block = threads;
  return t;
}

Target Target::cuda(int64_t shared_bytes, int threads) {
  Target t;
  t.kind = TargetKind::kCuda;
  t.fast_memory_bytes = shared_bytes;
  t.threads_per_block = threads;
  return t;
}

int64_t cpu_tile_budget(int64_t l2_bytes) {
  return std::max<int64_t>(l2_bytes, 1 << 20);
}

Expected<Target> target_from_name(const std::string& name) {
  if (name == "cpu") return Target::cpu(cpu_tile_budget(host_cpu_info().caches.l2_bytes));
  if (name == "opencl") return Target::opencl();
  if (name == "cuda") return Target::cuda();
  return invalid_argument("unknown target '{}' (expected cpu, opencl or cuda)", name);
}

}  // namespace tessel::tile
