// Device: id formatting, range checks around the backends' copies, and the registry of backends.
#include "runtime/device.h"

#include <charconv>
#include <map>
#include <mutex>

#include "support/hash.h"
#include "support/log.h"

namespace tessel {
namespace {

Status check_range(const Device& device, const char* what, DeviceBuffer buffer, size_t offset,
                   size_t bytes) {
  if (buffer.handle == nullptr)
    return invalid_argument("{}: {} into a null buffer", device.id(), what);
  if (offset > buffer.bytes || bytes > buffer.bytes - offset) {
    return out_of_range("{}: {} of {} bytes at offset {} overruns a {}-byte buffer", device.id(),
                        what, bytes, offset, buffer.bytes);
  }
  return ok_status();
}

struct Backend {
  BackendEnumerator enumerate;
  bool enumerated = false;
  Status failure;  // why enumeration failed, if it did
  std::vector<std::unique_ptr<Device>> devices;
};

// Never destroyed: devices must outlive every tensor, including those in static objects.
struct Registry {
  std::mutex mutex;
  std::map<DeviceKind, Backend> backends;
};

Registry& registry() {
  static Registry* r = new Registry;
  return *r;
}

// Enumerates the kind's devices on first use. Returns null (with *status set) if there are none.
const std::vector<std::unique_ptr<Device>>* devices_of(DeviceKind kind, Status* status) {
  Registry& r = registry();  // caller holds r.mutex
  auto it = r.backends.find(kind);
  if (it == r.backends.end()) {
    *status = unavailable("no {} backend in this build of tessel", device_kind_name(kind));
    return nullptr;
  }
  Backend& backend = it->second;
  if (!backend.enumerated) {
    backend.enumerated = true;
    Expected<std::vector<std::unique_ptr<Device>>> found = backend.enumerate();
    if (found) {
      backend.devices = std::move(*found);
    } else {
      backend.failure = found.status();
      log_debug("{} devices unavailable: {}", device_kind_name(kind), backend.failure.message());
    }
  }
  if (!backend.failure.ok()) {
    *status = backend.failure;
    return nullptr;
  }
  if (backend.devices.empty()) {
    *status = unavailable("no {} device here", device_kind_name(kind));
    return nullptr;
  }
  return &backend.devices;
}

}  // namespace

const char* device_kind_name(DeviceKind kind) {
  switch (kind) {
    case DeviceKind::kCpu:
      return "cpu";
    case DeviceKind::kOpenCL:
      return "opencl";
    case DeviceKind::kCuda:
      return "cuda";
  }
  return "unknown";
}

std::string DeviceId::to_string() const {
  if (kind == DeviceKind::kCpu) return "cpu";
  return fmt::format("{}:{}", device_kind_name(kind), index);
}

Expected<DeviceId> parse_device_id(std::string_view id) {
  const std::string_view kind_name = id.substr(0, id.find(':'));
  DeviceId out;
  if (kind_name == "cpu") {
    out.kind = DeviceKind::kCpu;
  } else if (kind_name == "opencl") {
    out.kind = DeviceKind::kOpenCL;
  } else if (kind_name == "cuda") {
    out.kind = DeviceKind::kCuda;
  } else {
    return invalid_argument("unknown device '{}': expected cpu, opencl:N or cuda:N", id);
  }
  if (kind_name.size() < id.size()) {
    std::string_view digits = id.substr(kind_name.size() + 1);
    auto [end, err] = std::from_chars(digits.data(), digits.data() + digits.size(), out.index);
    if (digits.empty() || err != std::errc() || end != digits.data() + digits.size() ||
        out.index < 0) {
      return invalid_argument("device '{}': expected a device number after '{}:', e.g. '{}:0'", id,
                              kind_name, kind_name);
    }
  }
  return out;
}

std::string Device::id() const {
  return DeviceId{kind_, index_}.to_string();
}

Expected<std::shared_ptr<KernelModule>> Device::build(const KernelImage& image) {
  Hasher h;
  h.add_field(image.code);
  h.add_field(image.options);
  const std::string key = image.entry + "|" + h.hex_digest();
  std::lock_guard<std::mutex> lock(modules_mutex_);
  auto it = modules_.find(key);
  if (it != modules_.end()) return it->second;
  Expected<std::shared_ptr<KernelModule>> built = do_build(image);
  if (!built) return built.status().with_context("building kernel '{}' for {}", image.name, id());
  modules_.emplace(key, *built);
  return built;
}

Status Device::launch(const KernelModule& module, const LaunchGrid& grid,
                      const std::vector<KernelArgument>& args) {
  if (&module.device() != this) {
    return invalid_argument("kernel '{}' was built for {}, not {}", module.name(),
                            module.device().id(), id());
  }
  for (size_t i = 0; i < args.size(); ++i) {
    const KernelArgument& a = args[i];
    if (a.kind == KernelArgument::Kind::kScalar) {
      if (a.size != 4 && a.size != 8)
        return invalid_argument("kernel '{}': argument {} is a {}-byte scalar (4 or 8 allowed)",
                                module.name(), i, a.size);
      continue;
    }
    if (a.buffer.handle != nullptr && a.buffer.bytes > 0 && a.offset >= a.buffer.bytes) {
      return out_of_range("kernel '{}': argument {} starts at byte {} of a {}-byte buffer",
                          module.name(), i, a.offset, a.buffer.bytes);
    }
  }
  for (int64_t b : grid.blocks) {
    if (b < 0) return invalid_argument("kernel '{}': negative grid {}", module.name(), b);
    if (b == 0) return ok_status();
  }
  if (grid.threads_per_block < 1)
    return invalid_argument("kernel '{}': {} threads per block", module.name(),
                            grid.threads_per_block);
  if (grid.block_columns < 0 ||
      (grid.block_columns > 0 && grid.threads_per_block % grid.block_columns != 0))
    return invalid_argument("kernel '{}': {} threads per block do not form rows of {}",
                            module.name(), grid.threads_per_block, grid.block_columns);
  return do_launch(module, grid, args).with_context("kernel '{}' on {}", module.name(), id());
}

Status Device::copy_from_host(DeviceBuffer dst, size_t dst_offset, const void* src, size_t bytes) {
  TESSEL_TRY(check_range(*this, "copy from host", dst, dst_offset, bytes));
  if (bytes == 0) return ok_status();
  return do_copy_from_host(dst, dst_offset, src, bytes);
}

Status Device::copy_to_host(void* dst, DeviceBuffer src, size_t src_offset, size_t bytes) {
  TESSEL_TRY(check_range(*this, "copy to host", src, src_offset, bytes));
  if (bytes == 0) return ok_status();
  return do_copy_to_host(dst, src, src_offset, bytes);
}

Status Device::copy_on_device(DeviceBuffer dst, size_t dst_offset, DeviceBuffer src,
                              size_t src_offset, size_t bytes) {
  TESSEL_TRY(check_range(*this, "copy on device (source)", src, src_offset, bytes));
  TESSEL_TRY(check_range(*this, "copy on device (destination)", dst, dst_offset, bytes));
  if (bytes == 0) return ok_status();
  if (dst.handle == src.handle && dst_offset < src_offset + bytes &&
      src_offset < dst_offset + bytes) {
    return invalid_argument("{}: copy on device between overlapping ranges [{}, {}) and [{}, {})",
                            id(), src_offset, src_offset + bytes, dst_offset, dst_offset + bytes);
  }
  return do_copy_on_device(dst, dst_offset, src, src_offset, bytes);
}

bool register_backend(DeviceKind kind, BackendEnumerator enumerate) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  Backend backend;
  backend.enumerate = std::move(enumerate);
  const bool fresh = r.backends.emplace(kind, std::move(backend)).second;
  TESSEL_CHECK(fresh, "backend {} registered twice", device_kind_name(kind));
  return true;
}

Expected<Device*> get_device(std::string_view id) {
  TESSEL_ASSIGN_OR_RETURN(DeviceId parsed, parse_device_id(id));
  const DeviceKind kind = parsed.kind;
  const int index = parsed.index;
  const char* kind_name = device_kind_name(kind);

  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  Status status;
  const auto* devices = devices_of(kind, &status);
  if (devices == nullptr) return status.with_context("device '{}'", id);
  if (index >= static_cast<int>(devices->size())) {
    return not_found("device '{}': there are {} {} device(s) here ({}:0 to {}:{})", id,
                     devices->size(), kind_name, kind_name, kind_name, devices->size() - 1);
  }
  return (*devices)[index].get();
}

Device* cpu_device() {
  static Device* cpu = [] {
    Expected<Device*> device = get_device("cpu");
    TESSEL_CHECK(device.ok(), "the CPU device is missing: {}", device.status().to_string());
    return *device;
  }();
  return cpu;
}

std::vector<Device*> available_devices() {
  std::vector<Device*> all;
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  for (DeviceKind kind : {DeviceKind::kCpu, DeviceKind::kOpenCL, DeviceKind::kCuda}) {
    Status status;
    if (const auto* devices = devices_of(kind, &status)) {
      for (const auto& d : *devices)
        all.push_back(d.get());
    }
  }
  return all;
}

}  // namespace tessel
