// Device: id formatting, range checks around the backends' copies, and the registry of backends.
#include "runtime/device.h"

#include <charconv>
#include <map>
#include <mutex>

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

std::string Device::id() const {
  if (kind_ == DeviceKind::kCpu) return "cpu";
  return fmt::format("{}:{}", device_kind_name(kind_), index_);
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
  const std::string_view kind_name = id.substr(0, id.find(':'));
  DeviceKind kind;
  if (kind_name == "cpu") {
    kind = DeviceKind::kCpu;
  } else if (kind_name == "opencl") {
    kind = DeviceKind::kOpenCL;
  } else if (kind_name == "cuda") {
    kind = DeviceKind::kCuda;
  } else {
    return invalid_argument("unknown device '{}': expected cpu, opencl:N or cuda:N", id);
  }
  int index = 0;
  if (kind_name.size() < id.size()) {
    std::string_view digits = id.substr(kind_name.size() + 1);
    auto [end, err] = std::from_chars(digits.data(), digits.data() + digits.size(), index);
    if (digits.empty() || err != std::errc() || end != digits.data() + digits.size() || index < 0) {
      return invalid_argument("device '{}': expected a device number after '{}:'", id, kind_name);
    }
  }

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
