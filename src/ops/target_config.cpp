// [target] tables (see target_config.h): parse, find the device through the registry, check the
// options against the device's limits.
#include "ops/target_config.h"

#include "tile/run/cpu_jit.h"

namespace tessel::ops {
namespace {

constexpr DeviceKind kKinds[] = {DeviceKind::kCpu, DeviceKind::kOpenCL, DeviceKind::kCuda};

// A positive integer option, in KiB or a count, from a per-kind table.
Expected<int64_t> positive(const Config& table, const std::string& key) {
  TESSEL_ASSIGN_OR_RETURN(int64_t value, table.get_or<int64_t>(key, 0));
  if (table.has(key) && value <= 0)
    return invalid_argument("{}: key '{}.{}': expected a positive integer, got {}", table.source(),
                            table.path(), key, value);
  return value;
}

Expected<TargetOptions> parse_options(const Config& config, DeviceKind kind) {
  TESSEL_ASSIGN_OR_RETURN(Config table,
                          config.table(std::string("target.") + device_kind_name(kind)));
  TargetOptions o;
  if (kind == DeviceKind::kCpu) {
    TESSEL_TRY(table.check_keys({"isa", "fast_memory_kib"}));
    TESSEL_ASSIGN_OR_RETURN(std::string isa, table.get_or<std::string>("isa", "auto"));
    if (isa != "auto") {
      Expected<tile::CpuIsa> known = tile::cpu_isa_named(isa);
      if (!known) return known.status().with_context("{}: key 'target.cpu.isa'", table.source());
      o.cpu_isa = isa;
    }
    TESSEL_ASSIGN_OR_RETURN(int64_t kib, positive(table, "fast_memory_kib"));
    o.fast_memory_bytes = kib << 10;
    return o;
  }
  const char* memory_key = kind == DeviceKind::kCuda ? "shared_memory_kib" : "local_memory_kib";
  TESSEL_TRY(table.check_keys({"threads", memory_key}));
  TESSEL_ASSIGN_OR_RETURN(int64_t threads, positive(table, "threads"));
  TESSEL_ASSIGN_OR_RETURN(int64_t kib, positive(table, memory_key));
  o.threads_per_block = static_cast<int>(threads);
  o.fast_memory_bytes = kib << 10;
  return o;
}

// An option the device cannot honour: more threads or fast memory than it has.
Status check_against_limits(const TargetSetting& s, const Device& device, const TargetOptions& o) {
  const DeviceLimits limits = device.limits();
  const std::string table = std::string("target.") + device_kind_name(device.kind());
  if (o.threads_per_block > limits.max_threads_per_block)
    return invalid_argument("{}: key '{}.threads': {} threads per block, but {} runs at most {}",
                            s.source, table, o.threads_per_block, device.id(),
                            limits.max_threads_per_block);
  if (device.kind() != DeviceKind::kCpu && o.fast_memory_bytes > limits.fast_memory_bytes) {
    const char* key = device.kind() == DeviceKind::kCuda ? "shared_memory_kib" : "local_memory_kib";
    return invalid_argument("{}: key '{}.{}': {} KiB, but {} has {} KiB per block", s.source, table,
                            key, o.fast_memory_bytes >> 10, device.id(),
                            limits.fast_memory_bytes >> 10);
  }
  return ok_status();
}

}  // namespace

Expected<TargetSetting> parse_target_setting(const Config& config) {
  TargetSetting s;
  s.source = config.source();
  if (config.has("target")) {
    TESSEL_ASSIGN_OR_RETURN(Config table, config.table("target"));
    TESSEL_TRY(table.check_keys({"device", "cpu", "opencl", "cuda"}));
    TESSEL_ASSIGN_OR_RETURN(s.device, table.get_or<std::string>("device", "auto"));
    if (table.has("device") && config.has("device"))
      return invalid_argument(
          "{}: key 'device': the device is set twice, here and in 'target.device'; keep "
          "'[target] device' (the top-level 'device' is its older spelling)",
          s.source);
  }
  if (config.has("device")) {
    TESSEL_ASSIGN_OR_RETURN(s.device, config.get<std::string>("device"));
    s.key = "device";
  }
  std::optional<DeviceKind> named;  // the kind an explicit device id names
  if (s.device != "auto") {
    Expected<DeviceId> id = parse_device_id(s.device);
    if (!id && s.device.find(':') == std::string::npos) {
      return invalid_argument(
          "{}: key '{}': '{}' is not allowed; allowed: auto, cpu, opencl:N, cuda:N (N = 0, 1, ...)",
          s.source, s.key, s.device);
    }
    if (!id) return id.status().with_context("{}: key '{}'", s.source, s.key);
    named = id->kind;
  }
  for (DeviceKind kind : kKinds) {
    const std::string key = std::string("target.") + device_kind_name(kind);
    if (!config.has(key)) continue;
    if (named && *named != kind) {
      return invalid_argument(
          "{}: key '{}': options for {} devices, but '{}' = \"{}\" is a {} device; remove the "
          "table or change the device",
          s.source, key, device_kind_name(kind), s.key, s.device, device_kind_name(*named));
    }
    TESSEL_ASSIGN_OR_RETURN(s.options[kind], parse_options(config, kind));
  }
  return s;
}

Device* auto_device(const std::function<bool(DeviceKind kind)>& usable) {
  std::vector<Device*> devices = available_devices();
  for (DeviceKind kind : {DeviceKind::kCuda, DeviceKind::kOpenCL}) {
    if (usable && !usable(kind)) continue;
    for (Device* d : devices)
      if (d->kind() == kind && d->limits().gpu) return d;
  }
  return cpu_device();
}

Expected<TargetChoice> resolve_target(const TargetSetting& s,
                                      const std::function<bool(DeviceKind kind)>& usable) {
  TargetChoice choice;
  if (s.device == "auto") {
    choice.device = auto_device(usable);
  } else {
    Expected<Device*> device = get_device(s.device);
    if (!device) return device.status().with_context("{}: key '{}'", s.source, s.key);
    choice.device = *device;
  }
  auto it = s.options.find(choice.device->kind());
  if (it != s.options.end()) choice.options = it->second;
  TESSEL_TRY(check_against_limits(s, *choice.device, choice.options));
  choice.target =
      device_target(choice.device->kind(), choice.device->limits(), choice.options);
  return choice;
}

Expected<TargetChoice> target_from_config(const Config& config) {
  TESSEL_ASSIGN_OR_RETURN(TargetSetting setting, parse_target_setting(config));
  return resolve_target(setting);
}

void apply_target(const TargetChoice& choice) {
  set_target_options(choice.device->kind(), choice.options);
}

}  // namespace tessel::ops
