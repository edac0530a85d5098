// The op library's side of auto-tuning: each launch of a kernel that declares a tuning space
// (kernels/*.tile, tile/parse/tune_space.h) takes the specialisation the tuning database holds
// for its shape on its device (tune/choices.h), overriding the block sizes the op passed; with
// no database, or nothing tuned for that kernel, the launch is unchanged. A shape is the
// kernel's run-time sizes in order of first appearance (gemm: M, K, N).
//
// `tessel tune --model` records the tunable launches of one training step with
// record_tunable_launches(true) and tunes each.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "ops/kernel_cache.h"
#include "support/status.h"
#include "tile/ir/ir.h"
#include "tile/parse/tune_space.h"
#include "tune/tune_db.h"

namespace tessel::ops {

// The launch's key in the tuning database: `params` as the op passes them (T filled in).
struct TunableLaunch {
  tune::TuneKey key;                     // shape included
  KernelParams fixed;                    // the parameters that are not tuned, T included
  KernelParams baseline;                 // the tuned parameters the op passed (its own rule)
  std::map<std::string, int64_t> sizes;  // by name
  std::string device;                    // "cpu", "opencl:0"
};

// The target name a device kind's spaces and defaults use: "cpu", "opencl", "cuda".
std::string tune_target_name(DeviceKind kind);

// Every `tune` block of the embedded kernel files.
const std::vector<tile::TuneSpace>& kernel_tune_spaces();
// The hash of the file that defines `kernel` and of the code generator (tile::codegen_hash()): a
// tuning database key, "" when there is no such kernel.
std::string kernel_source_hash(const std::string& kernel);
// The parsed kernel of that name from the embedded files.
Expected<const tile::Kernel*> embedded_kernel(const std::string& name);

// The launch's key; key.kernel is empty when `kernel` has no space for this device.
Expected<TunableLaunch> tunable_launch(Device* device, const tile::Kernel& kernel,
                                       const KernelParams& params,
                                       const std::vector<KernelArg>& args);

// Whether `name` = `value` differs from the kernel's own default (keys leave defaults out, so
// that "U=f32" passed and left out are one key).
bool differs_from_default(const tile::Kernel& kernel, const std::string& name,
                          const std::string& value);

// Whether launches should call apply_tuned_params: a database is there, or launches are being
// recorded (one atomic load each, so launches without tuning pay nothing more).
bool tuning_in_use();
// Called by launch_kernel: replaces the tuned parameters of `params` by the database's choice.
// A choice that is the kernel's own defaults (a tuner that found nothing faster than them)
// leaves the op's block sizes as the op passed them: the op's rule had a reason of its own.
Status apply_tuned_params(Device* device, const tile::Kernel& kernel,
                          const std::vector<KernelArg>& args, KernelParams& params);

// While on, every launch of a tunable kernel is remembered (distinct keys, in launch order), and
// so is every algorithm choice (ops/algorithm_choice.h).
void record_tunable_launches(bool on);
bool recording_tunable_launches();
std::vector<TunableLaunch> recorded_tunable_launches();

// tune::device_fingerprint(device), computed once per device.
const std::string& cached_device_fingerprint(Device* device);

}  // namespace tessel::ops
