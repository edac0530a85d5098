// The one target setting: the [target] table of a configuration file says which device tessel's
// kernels run on and the per-kind options the compiler uses there. Training, `tessel compile
// --config` and the benches read it the same way.
//
//   [target]
//   device = "auto"            # "auto" | "cpu" | "opencl:N" | "cuda:N"
//   [target.cpu]
//   isa = "auto"               # "auto" | "avx512bf16" | "avx512" | "avx2" | "portable"
//   fast_memory_kib = 1024     # the cache a block's tiles must fit in (default: this CPU's L2)
//   [target.opencl]
//   threads = 128              # work-items per work-group (default: 128, at most the device's)
//   local_memory_kib = 32      # default: the device's local memory
//   [target.cuda]
//   threads = 256              # threads per block
//   shared_memory_kib = 48     # default: the device's shared memory per block
//
// "auto" picks the first CUDA device, else the first OpenCL GPU, else the CPU; a missing [target]
// table means "auto". The top-level key `device = "..."` of older configs is an alias of
// `[target] device` (giving both is an error). Every mistake names the key: an unknown key or
// device, a malformed id, a device that is not here (saying what is missing), an option table for
// another kind than the named device's, an option the device cannot honour.
//
//   TESSEL_ASSIGN_OR_RETURN(TargetSetting s, parse_target_setting(config));   // no device touched
//   TESSEL_ASSIGN_OR_RETURN(TargetChoice c, resolve_target(s));               // finds the device
//   apply_target(c);                                 // the op library compiles with the options
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>

#include "ops/device_kernel.h"
#include "runtime/device.h"
#include "support/config.h"
#include "support/status.h"
#include "tile/target.h"

namespace tessel::ops {

// What a configuration says, checked for form only.
struct TargetSetting {
  std::string source;                      // the file, for messages
  std::string key = "target.device";       // where the device came from ("device": the alias)
  std::string device = "auto";             // "auto" or a device id
  std::map<DeviceKind, TargetOptions> options;  // per [target.<kind>] table present
};

// Reads [target] (and the top-level `device` alias) of a whole configuration file.
Expected<TargetSetting> parse_target_setting(const Config& config);

// The device, and what the compiler assumes about it.
struct TargetChoice {
  Device* device = nullptr;
  tile::Target target;    // the device's numbers with the options applied
  TargetOptions options;  // the options for the device's kind
};

// The first CUDA device, else the first OpenCL GPU, else the CPU, passing over the kinds that
// `usable` rejects.
Device* auto_device(const std::function<bool(DeviceKind kind)>& usable = nullptr);

// Finds the device (`usable` as for auto_device) and checks the options against its limits.
Expected<TargetChoice> resolve_target(const TargetSetting& setting,
                                      const std::function<bool(DeviceKind kind)>& usable = nullptr);

// parse + resolve, for callers holding a whole file.
Expected<TargetChoice> target_from_config(const Config& config);

// Makes the op library compile for the choice's kind with its options (set_target_options).
void apply_target(const TargetChoice& choice);

}  // namespace tessel::ops
