// One interface for every device tessel computes on (the CPU, an OpenCL device, a CUDA GPU), and
// the registry that finds them by name.
//
//   TESSEL_ASSIGN_OR_RETURN(Device* gpu, get_device("cuda:0"));
//   TESSEL_ASSIGN_OR_RETURN(DeviceBuffer buf, gpu->allocator().allocate(n * sizeof(float)));
//   TESSEL_TRY(gpu->copy_from_host(buf, 0, host.data(), n * sizeof(float)));
//   ...
//   gpu->allocator().release(buf);
//
// Memory is an opaque DeviceBuffer (caching_allocator.h): a host pointer on the CPU, a cl_mem on
// OpenCL, a CUdeviceptr on CUDA. Code outside a backend never dereferences a handle; it names a
// place in device memory as buffer + byte offset, which works on all three. host_address() gives
// a real pointer where the memory is host-addressable (the CPU), so host code can skip copies.
//
// Ordering: each device runs its work in one in-order queue. copy_from_host returns once `src`
// may be reused, copy_to_host once the bytes are in `dst`; copy_on_device (and, later, kernel
// launches) may return before the work is done; synchronize() waits for everything queued.
//
// Devices are made by their backend when first asked for and live until the process ends, so a
// Device* stays valid everywhere.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/caching_allocator.h"
#include "support/status.h"

namespace tessel {

enum class DeviceKind { kCpu, kOpenCL, kCuda };

// "cpu", "opencl", "cuda": the spelling used in device ids and configs.
const char* device_kind_name(DeviceKind kind);

class Device {
 public:
  virtual ~Device() = default;
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  DeviceKind kind() const { return kind_; }
  // Position among the devices of its kind, from 0.
  int index() const { return index_; }
  // "cpu", "opencl:0", "cuda:1": what get_device() accepts.
  std::string id() const;
  // What it is, for people: the CPU model, "NVIDIA H200", ...
  const std::string& name() const { return name_; }

  // ---- Memory ----
  // Every buffer of this device comes from and goes back to this allocator (it keeps the stats).
  virtual CachingAllocator& allocator() = 0;
  // A host pointer to the start of `buffer` where device memory is host-addressable, else nullptr.
  virtual void* host_address(DeviceBuffer buffer) const = 0;

  // ---- Copies (byte offsets into the buffers; out-of-bounds ranges fail with out_of_range) ----
  Status copy_from_host(DeviceBuffer dst, size_t dst_offset, const void* src, size_t bytes);
  Status copy_to_host(void* dst, DeviceBuffer src, size_t src_offset, size_t bytes);
  // Both buffers belong to this device. Overlapping ranges are not allowed.
  Status copy_on_device(DeviceBuffer dst, size_t dst_offset, DeviceBuffer src, size_t src_offset,
                        size_t bytes);
  // Waits until all work queued on this device is done.
  virtual Status synchronize() = 0;

  // ---- Kernels ----
  // Loading compiled kernels onto the device and launching them is added here with the tile
  // compiler's runtime (a compiled module in, a launch over a grid with buffer + offset arguments
  // on this device's queue). Until then a device holds memory and copies it.

 protected:
  Device(DeviceKind kind, int index, std::string name)
      : kind_(kind), index_(index), name_(std::move(name)) {}

  // The backend's copies; ranges are already checked against the buffers' sizes.
  virtual Status do_copy_from_host(DeviceBuffer dst, size_t dst_offset, const void* src,
                                   size_t bytes) = 0;
  virtual Status do_copy_to_host(void* dst, DeviceBuffer src, size_t src_offset, size_t bytes) = 0;
  virtual Status do_copy_on_device(DeviceBuffer dst, size_t dst_offset, DeviceBuffer src,
                                   size_t src_offset, size_t bytes) = 0;

 private:
  const DeviceKind kind_;
  const int index_;
  const std::string name_;
};

// ---- Registry ----

// Finds the devices of one backend (called once, when a device of that kind is first asked for,
// under the registry's lock: it must not call get_device). A failure (no driver, no ICD loader)
// is kept and returned to every later request for the kind.
using BackendEnumerator = std::function<Expected<std::vector<std::unique_ptr<Device>>>()>;

// Called by a backend at start-up, from its own .cpp:
//   static const bool kRegistered = register_backend(DeviceKind::kCuda, enumerate_cuda_devices);
// Returns true, for that idiom. Registering a kind twice is a bug.
bool register_backend(DeviceKind kind, BackendEnumerator enumerate);

// "cpu" (or "cpu:0"), "opencl:N", "cuda:N"; "opencl" and "cuda" mean index 0. Fails with
// invalid_argument for a malformed id, unavailable when the backend is missing or has no
// devices here, not_found when the index is past the last device.
Expected<Device*> get_device(std::string_view id);

// The CPU, which is always there.
Device* cpu_device();

// Every device of every backend that works here, CPU first.
std::vector<Device*> available_devices();

}  // namespace tessel
