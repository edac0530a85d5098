// Tuned specialisations at launch (see tuned_launch.h).
#include "ops/tuned_launch.h"

#include <atomic>
#include <mutex>
#include <set>

#include "ops/algorithm_choice.h"
#include "support/hash.h"
#include "tile/codegen/render.h"
#include "tile/parse/parser.h"
#include "tune/choices.h"
#include "tune/fingerprint.h"
#include "tune/space_points.h"

namespace tessel::ops {

namespace {

struct TuningTables {
  std::vector<tile::TuneSpace> spaces;
  std::map<std::string, std::string> hash_by_kernel;
  // The kernel's own defaults as a choice's params string, by "kernel@target" of each space.
  std::map<std::string, std::string> default_choice;
  Status status;
};

const TuningTables& tables() {
  static const TuningTables t = [] {
    TuningTables out;
    for (const auto& [file, text] : embedded_kernel_files()) {
      // The file's text and the code generator's: either changes what a specialisation costs.
      const std::string hash = hash_hex(hash_text(text + "\n" + tile::codegen_hash()));
      Expected<std::vector<tile::Kernel>> kernels = tile::parse_tile(text, "kernels/" + file);
      Expected<std::vector<tile::TuneSpace>> spaces =
          tile::parse_tune_spaces(text, "kernels/" + file);
      if (!kernels.ok() || !spaces.ok()) {
        out.status = kernels.ok() ? spaces.status() : kernels.status();
        continue;
      }
      for (const tile::Kernel& k : *kernels)
        out.hash_by_kernel[k.name] = hash;
      for (tile::TuneSpace& s : *spaces) {
        for (const tile::Kernel& k : *kernels)
          if (k.name == s.kernel)
            out.default_choice[s.kernel + "@" + s.target] =
                tune::params_string(tune::kernel_space_defaults(s, k, s.target));
        out.spaces.push_back(std::move(s));
      }
    }
    return out;
  }();
  return t;
}

}  // namespace

const std::string& cached_device_fingerprint(Device* device) {
  static std::mutex mutex;
  static std::map<Device*, std::string> fingerprints;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = fingerprints.find(device);
  if (it == fingerprints.end())
    it = fingerprints.emplace(device, tune::device_fingerprint(device)).first;
  return it->second;
}

namespace {

struct Recorder {
  std::atomic<bool> on{false};
  std::mutex mutex;
  std::vector<TunableLaunch> launches;
  std::set<std::string> seen;
};
Recorder& recorder() {
  static Recorder r;
  return r;
}

}  // namespace

std::string tune_target_name(DeviceKind kind) {
  return device_kind_name(kind);  // "cpu", "opencl", "cuda": the targets a space is declared for
}

const std::vector<tile::TuneSpace>& kernel_tune_spaces() {
  return tables().spaces;
}

std::string kernel_source_hash(const std::string& kernel) {
  auto it = tables().hash_by_kernel.find(kernel);
  return it == tables().hash_by_kernel.end() ? "" : it->second;
}

Expected<TunableLaunch> tunable_launch(Device* device, const tile::Kernel& kernel,
                                       const KernelParams& params,
                                       const std::vector<KernelArg>& args) {
  const tile::TuneSpace* space =
      tile::find_space(kernel_tune_spaces(), kernel.name, tune_target_name(device->kind()));
  TunableLaunch launch;
  if (space == nullptr) return launch;  // key.kernel stays empty: nothing to tune
  // The sizes, from the tensor arguments' shapes where the kernel names a size.
  size_t tensor = 0;
  for (const KernelArg& a : args) {
    const Shape* shape = nullptr;
    if (const Tensor* t = std::get_if<Tensor>(&a)) shape = &t->shape();
    if (const View* v = std::get_if<View>(&a)) shape = &v->shape;
    if (shape == nullptr) continue;
    while (tensor < kernel.args.size() && !kernel.args[tensor].is_tensor())
      ++tensor;
    if (tensor >= kernel.args.size()) break;
    const std::vector<tile::Expr>& dims = kernel.args[tensor].tensor->shape;
    for (size_t d = 0; d < dims.size() && d < shape->size(); ++d)
      if (auto* v = dims[d]->as<tile::Var>()) launch.sizes.emplace(v->name, (*shape)[d]);
    ++tensor;
  }
  for (const tile::Expr& s : kernel.sizes) {
    auto* v = s->as<tile::Var>();
    auto it = launch.sizes.find(v->name);
    launch.key.shape.push_back(it == launch.sizes.end() ? 0 : it->second);
  }
  std::set<std::string> tuned;
  for (const tile::SpaceParam& p : space->params)
    tuned.insert(p.name);
  KernelParams rest;
  for (const auto& [name, value] : params)
    if (!tuned.count(name) && name != "T" && differs_from_default(kernel, name, value))
      rest[name] = value;
  for (const auto& [name, value] : params)
    (tuned.count(name) ? launch.baseline : launch.fixed)[name] = value;
  launch.key.kernel = kernel.name;
  launch.key.source_hash = kernel_source_hash(kernel.name);
  launch.key.device = cached_device_fingerprint(device);
  auto t = params.find("T");
  launch.key.dtype = t == params.end() ? "f32" : t->second;
  launch.key.fixed = tune::params_string(rest);
  launch.device = device->id();
  return launch;
}

bool differs_from_default(const tile::Kernel& kernel, const std::string& name,
                          const std::string& value) {
  const tile::Param* p = kernel.find_param(name);
  if (p == nullptr) return true;
  return p->is_dtype ? p->dtype_value.name() != value : std::to_string(p->int_value) != value;
}

bool tuning_in_use() {
  return tune::TuneChoices::global().active() || recorder().on.load(std::memory_order_relaxed);
}

Status apply_tuned_params(Device* device, const tile::Kernel& kernel,
                          const std::vector<KernelArg>& args, KernelParams& params) {
  tune::TuneChoices& choices = tune::TuneChoices::global();
  Recorder& r = recorder();
  const bool recording = r.on.load(std::memory_order_relaxed);
  if (!choices.active() && !recording) return ok_status();
  TESSEL_ASSIGN_OR_RETURN(TunableLaunch launch, tunable_launch(device, kernel, params, args));
  if (launch.key.kernel.empty()) return ok_status();
  if (recording) {
    std::lock_guard<std::mutex> lock(r.mutex);
    const std::string id = launch.device + "|" + launch.key.kernel + "|" + launch.key.dtype + "|" +
                           launch.key.fixed + "|" + tune::shape_string(launch.key.shape);
    if (r.seen.insert(id).second) r.launches.push_back(launch);
  }
  if (!choices.active()) return ok_status();
  TESSEL_ASSIGN_OR_RETURN(std::string chosen, choices.choose(launch.key));
  if (chosen.empty() || launch.baseline.empty()) {
    for (const auto& [name, value] : tune::parse_params(chosen))
      params[name] = value;
    return ok_status();
  }
  // The op chose its own blocks: a choice of the kernel's defaults does not override them.
  const tile::TuneSpace* space =
      tile::find_space(kernel_tune_spaces(), kernel.name, tune_target_name(device->kind()));
  if (space != nullptr) {
    auto it = tables().default_choice.find(space->kernel + "@" + space->target);
    if (it != tables().default_choice.end() && it->second == chosen) return ok_status();
  }
  const std::map<std::string, std::string> tuned = tune::parse_params(chosen);
  for (const auto& [name, value] : tuned)
    params[name] = value;
  return ok_status();
}

void record_tunable_launches(bool on) {
  Recorder& r = recorder();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.on = on;
  if (on) {
    r.launches.clear();
    r.seen.clear();
    clear_recorded_algorithm_launches();
  }
}

bool recording_tunable_launches() {
  return recorder().on.load(std::memory_order_relaxed);
}

std::vector<TunableLaunch> recorded_tunable_launches() {
  Recorder& r = recorder();
  std::lock_guard<std::mutex> lock(r.mutex);
  return r.launches;
}

}  // namespace tessel::ops
