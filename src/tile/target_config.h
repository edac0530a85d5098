// The [target] table of a configuration file: which device tessel's kernels run on, and the
// per-target options the compiler uses there. The trainer and `tessel compile --config` read it.
//
//   [target]
//   device = "auto"            # "cpu" | "opencl:N" | "cuda:N" | "auto"
//   [target.cpu]
//   isa = "auto"               # "auto" | "avx512bf16" | "avx512" | "avx2" | "portable"
//   fast_memory_kib = 1024     # the cache a block's tiles must fit in (default: this CPU's L2)
//   [target.opencl]
//   threads = 128              # work-items per work-group
//   local_memory_kib = 32      # default: the device's local memory
//   [target.cuda]
//   threads = 256              # threads per block
//   shared_memory_kib = 48     # default: the device's shared memory per block
//
// "auto" picks the first CUDA device, else the first OpenCL GPU, else the CPU. A missing [target]
// table means "auto". Every wrong key or value is an error that names the key.
#pragma once

#include <functional>
#include <string>

#include "support/config.h"
#include "support/status.h"
#include "tile/target.h"

namespace tessel::tile {

struct TargetChoice {
  std::string device;   // resolved device id: "cpu", "opencl:0", "cuda:1"
  Target target;        // what the compiler assumes about that device, options applied
  std::string cpu_isa;  // cpu only: the instruction-set variant, "" for the best one here
};

// Reads `target` (and its per-target sub-tables) from a whole configuration file.
Expected<TargetChoice> target_from_config(const Config& config);

// The device "auto" stands for: the first CUDA device, else the first OpenCL GPU, else the CPU.
// Kinds ("cuda", "opencl") that `usable` rejects are passed over: the trainer passes over those
// its op library cannot launch on yet, and otherwise picks what [target] picks.
Expected<std::string> auto_device(
    const std::function<bool(const std::string& kind)>& usable = nullptr);

// Resolves a device string ("auto", "cpu", "opencl:N", "cuda:N") to a target with the device's
// own numbers (local/shared memory, threads), before any per-target options are applied.
Expected<TargetChoice> resolve_target_device(const std::string& device);

}  // namespace tessel::tile
