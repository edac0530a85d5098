// [target] tables (see target_config.h): parse, resolve "auto" against the devices hw/ finds, and
// apply per-target options.
#include "tile/target_config.h"

#include <algorithm>
#include <charconv>

#include "hw/cpu_info.h"
#include "hw/cuda_devices.h"
#include "hw/opencl_devices.h"
#include "tile/run/cpu_jit.h"

namespace tessel::tile {
namespace {

// "opencl:3" -> 3; an error that quotes the whole string otherwise.
Expected<int> device_index(const std::string& device, size_t prefix_length) {
  std::string digits = device.substr(prefix_length);
  int index = -1;
  auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), index);
  if (digits.empty() || error != std::errc() || end != digits.data() + digits.size() || index < 0)
    return invalid_argument("device '{}': expected a device number after ':', e.g. '{}0'", device,
                            device.substr(0, prefix_length));
  return index;
}

TargetChoice cpu_choice() {
  int64_t l2 = host_cpu_info().caches.l2_bytes;
  return {"cpu", Target::cpu(l2 > 0 ? l2 : 1 << 20), ""};
}

Expected<TargetChoice> opencl_choice(int index) {
  TESSEL_ASSIGN_OR_RETURN(auto devices, list_opencl_devices());
  if (index >= static_cast<int>(devices.size()))
    return not_found("device 'opencl:{}': this machine has {} OpenCL device(s)", index,
                     devices.size());
  const OpenClDeviceInfo& d = devices[index];
  int threads = static_cast<int>(std::min<size_t>(128, std::max<size_t>(1, d.max_work_group_size)));
  int64_t local = d.local_mem_bytes > 0 ? static_cast<int64_t>(d.local_mem_bytes) : 32 << 10;
  return TargetChoice{"opencl:" + std::to_string(index), Target::opencl(local, threads), ""};
}

Expected<TargetChoice> cuda_choice(int index) {
  TESSEL_ASSIGN_OR_RETURN(auto devices, list_cuda_devices());
  if (index >= static_cast<int>(devices.size()))
    return not_found("device 'cuda:{}': this machine has {} CUDA device(s)", index, devices.size());
  const CudaDeviceInfo& d = devices[index];
  int64_t shared = d.shared_mem_per_block_bytes > 0 ? d.shared_mem_per_block_bytes : 48 << 10;
  return TargetChoice{"cuda:" + std::to_string(index), Target::cuda(shared, 256), ""};
}

// A positive integer option, in KiB or a count, from a per-target table.
Expected<int64_t> positive(const Config& table, const std::string& key, int64_t fallback) {
  TESSEL_ASSIGN_OR_RETURN(int64_t value, table.get_or<int64_t>(key, fallback));
  if (value <= 0)
    return invalid_argument("{}: key '{}': expected a positive integer, got {}", table.source(),
                            table.path().empty() ? key : table.path() + "." + key, value);
  return value;
}

Status apply_options(const Config& config, TargetChoice& choice) {
  for (const char* kind : {"cpu", "opencl", "cuda"}) {
    std::string key = std::string("target.") + kind;
    if (!config.has(key)) continue;
    TESSEL_ASSIGN_OR_RETURN(Config table, config.table(key));
    if (kind != choice.target.name()) continue;  // options of other targets are kept, not used
    if (choice.target.kind == TargetKind::kCpu) {
      TESSEL_TRY(table.check_keys({"isa", "fast_memory_kib"}));
      TESSEL_ASSIGN_OR_RETURN(std::string isa, table.get_or<std::string>("isa", "auto"));
      if (isa != "auto") {
        auto known = cpu_isa_named(isa);
        if (!known) return known.status().with_context("{}: key 'target.cpu.isa'", config.source());
        choice.cpu_isa = isa;
      }
      TESSEL_ASSIGN_OR_RETURN(int64_t kib, positive(table, "fast_memory_kib",
                                                    choice.target.fast_memory_bytes >> 10));
      choice.target.fast_memory_bytes = kib << 10;
    } else {
      bool cuda = choice.target.kind == TargetKind::kCuda;
      const char* memory_key = cuda ? "shared_memory_kib" : "local_memory_kib";
      TESSEL_TRY(table.check_keys({"threads", memory_key}));
      TESSEL_ASSIGN_OR_RETURN(int64_t threads, positive(table, "threads",
                                                        choice.target.threads_per_block));
      TESSEL_ASSIGN_OR_RETURN(int64_t kib, positive(table, memory_key,
                                                    choice.target.fast_memory_bytes >> 10));
      choice.target.threads_per_block = static_cast<int>(threads);
      choice.target.fast_memory_bytes = kib << 10;
    }
  }
  return ok_status();
}

}  // namespace

Expected<std::string> auto_device(const std::function<bool(const std::string& kind)>& usable) {
  if (!usable || usable("cuda")) {
    auto gpus = list_cuda_devices();
    if (gpus && !gpus->empty()) return std::string("cuda:0");
  }
  if (!usable || usable("opencl")) {
    auto opencl = list_opencl_devices();
    if (opencl)
      for (size_t i = 0; i < opencl->size(); ++i)
        if ((*opencl)[i].type == "gpu") return "opencl:" + std::to_string(i);
  }
  return std::string("cpu");
}

Expected<TargetChoice> resolve_target_device(const std::string& device) {
  if (device == "cpu") return cpu_choice();
  if (device.rfind("opencl:", 0) == 0) {
    TESSEL_ASSIGN_OR_RETURN(int index, device_index(device, 7));
    return opencl_choice(index);
  }
  if (device.rfind("cuda:", 0) == 0) {
    TESSEL_ASSIGN_OR_RETURN(int index, device_index(device, 5));
    return cuda_choice(index);
  }
  if (device == "auto") {
    TESSEL_ASSIGN_OR_RETURN(std::string chosen, auto_device());
    return resolve_target_device(chosen);
  }
  return invalid_argument("unknown device '{}': expected \"auto\", \"cpu\", \"opencl:N\" or \"cuda:N\"",
                          device);
}

Expected<TargetChoice> target_from_config(const Config& config) {
  std::string device = "auto";
  if (config.has("target")) {
    TESSEL_ASSIGN_OR_RETURN(Config table, config.table("target"));
    TESSEL_TRY(table.check_keys({"device", "cpu", "opencl", "cuda"}));
    TESSEL_ASSIGN_OR_RETURN(device, table.get_or<std::string>("device", "auto"));
  }
  auto choice = resolve_target_device(device);
  if (!choice) return choice.status().with_context("{}: key 'target.device'", config.source());
  TESSEL_TRY(apply_options(config, *choice));
  return choice;
}

}  // namespace tessel::tile
