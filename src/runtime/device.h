// One interface for every device tessel computes on (the CPU, an OpenCL device, a CUDA GPU), and
// the registry that finds them by name. A Device is the whole backend: memory, copies, building
// kernels, launching them on its queue, events, and the limits the compiler targets. Nothing
// outside runtime/<kind>/ knows which kind of device it talks to.
//
//   TESSEL_ASSIGN_OR_RETURN(Device* gpu, get_device("cuda:0"));
//   TESSEL_ASSIGN_OR_RETURN(DeviceBuffer buf, gpu->allocator().allocate(n * sizeof(float)));
//   TESSEL_TRY(gpu->copy_from_host(buf, 0, host.data(), n * sizeof(float)));
//   TESSEL_ASSIGN_OR_RETURN(auto module, gpu->build({"scale", "tessel_scale", source, ""}));
//   TESSEL_TRY(gpu->launch(*module, {{blocks, 1, 1}, 256},
//                          {KernelArgument::memory(buf), KernelArgument::scalar(2.0f)}));
//   TESSEL_TRY(gpu->copy_to_host(host.data(), buf, 0, n * sizeof(float)));  // after the kernel
//   gpu->allocator().release(buf);
//
// Memory is an opaque DeviceBuffer (caching_allocator.h): a host pointer on the CPU, a cl_mem on
// OpenCL, a CUdeviceptr on CUDA. Code outside a backend never dereferences a handle; it names a
// place in device memory as buffer + byte offset, which works on all three. host_address() gives
// a real pointer where the memory is host-addressable (the CPU), so host code can skip copies.
//
// Ordering: each device runs its work in one in-order queue. copy_from_host returns once `src`
// may be reused, copy_to_host once the bytes are in `dst` (so after every kernel queued before
// it); copy_on_device and launch may return before the work is done; synchronize() waits for
// everything queued. Work on two devices is ordered with an event: record_event() on one, then
// wait_event() on the other (or Event::wait() on the host).
//
// Devices are made by their backend when first asked for and live until the process ends, so a
// Device* stays valid everywhere.
//
// A new backend is one folder, runtime/<kind>/, with a Device subclass that implements the
// virtual functions below and registers itself (register_backend), over an API loader in hw/;
// the tile compiler adds a renderer (its dialect table) for the kind.
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "runtime/caching_allocator.h"
#include "support/status.h"

namespace tessel {

enum class DeviceKind { kCpu, kOpenCL, kCuda };
class Device;

// "cpu", "opencl", "cuda": the spelling used in device ids and configs.
const char* device_kind_name(DeviceKind kind);

// A device as configs and get_device() name it: "cpu" (or "cpu:0"), "opencl:N", "cuda:N";
// "opencl" and "cuda" alone mean index 0. The one parser of device ids in tessel.
struct DeviceId {
  DeviceKind kind = DeviceKind::kCpu;
  int index = 0;
  std::string to_string() const;  // "cpu", "opencl:0"
};
// invalid_argument, saying what was expected, for anything else.
Expected<DeviceId> parse_device_id(std::string_view id);

// What a device offers the compiler; tile targets are derived from this (ops/device_kernel.h).
struct DeviceLimits {
  int64_t memory_bytes = 0;       // global memory (the CPU: physical memory)
  int64_t fast_memory_bytes = 0;  // what one block may keep close: the CPU's L2 per core, OpenCL
                                  // local memory per work-group, CUDA shared memory per block
  int max_threads_per_block = 1;  // the CPU: 1 (a block is one task of the thread pool)
  int compute_units = 1;          // cores, compute units, multiprocessors
  bool f64 = true;                // kernels may compute in double
  int compute_capability = 0;     // CUDA: 10 * major + minor (90 for sm_90); 0 elsewhere
  bool gpu = false;               // a GPU (what target "auto" prefers to the CPU); PoCL's OpenCL
                                  // device, which runs on this CPU, is not one
};

// ---- Kernels ----

// What a renderer made for one kind of device, ready for Device::build.
struct KernelImage {
  std::string name;     // the kernel's name, for messages: "gemm"
  std::string entry;    // the symbol to launch: "tessel_gemm"
  std::string code;     // the CPU: C++ (compiled ahead of time when the build has it, else by the
                        // JIT); OpenCL: OpenCL C; CUDA: CUDA C++ (NVRTC)
  std::string options;  // the CPU: an ISA variant ("" = the best here); OpenCL: build options;
                        // CUDA: NVRTC options, one per line
};

// A kernel built for one device. Made by Device::build, which keeps it (and returns the same
// module for the same image) for the life of the device; launched by the same device only.
class KernelModule {
 public:
  virtual ~KernelModule() = default;
  const Device& device() const { return *device_; }
  const std::string& name() const { return name_; }
  // The CPU: true when the code came from the build's ahead-of-time library (no compiler ran).
  virtual bool ahead_of_time() const { return false; }

 protected:
  KernelModule(const Device* device, std::string name) : device_(device), name_(std::move(name)) {}

 private:
  const Device* device_;
  std::string name_;
};

// How many blocks (work-groups, thread blocks, thread-pool tasks) and threads in each.
struct LaunchGrid {
  std::array<int64_t, 3> blocks = {1, 1, 1};
  int threads_per_block = 1;  // the CPU ignores it: one task runs a whole block
  // OpenCL: when > 0, a block is a 2-D work-group of block_columns x (threads_per_block /
  // block_columns) work-items (the kernel's `threads (R, C)`); others launch blocks 1-D.
  int block_columns = 0;
};

// One parameter of a kernel, in the order the kernel declares them: a place in device memory
// (a buffer of the launching device + a byte offset into it; a null buffer is allowed for a
// parameter the kernel does not touch) or a scalar's bytes (int32, int64, float, double).
struct KernelArgument {
  enum class Kind { kBuffer, kScalar };
  Kind kind = Kind::kScalar;
  DeviceBuffer buffer;
  size_t offset = 0;
  std::array<unsigned char, 8> bytes = {};
  size_t size = 0;  // of the scalar

  static KernelArgument memory(DeviceBuffer buffer, size_t offset = 0) {
    KernelArgument a;
    a.kind = Kind::kBuffer;
    a.buffer = buffer;
    a.offset = offset;
    return a;
  }
  template <typename T>
  static KernelArgument scalar(T value) {
    static_assert(std::is_arithmetic_v<T> && sizeof(T) <= 8,
                  "scalars are numbers of 8 bytes or less");
    KernelArgument a;
    std::memcpy(a.bytes.data(), &value, sizeof(T));
    a.size = sizeof(T);
    return a;
  }
};

// A point in a device's queue. Waiting on it (from the host, or from another device's queue)
// waits for everything queued on its device before it.
class Event {
 public:
  virtual ~Event() = default;
  // Blocks the calling thread until the work before the event is done.
  virtual Status wait() const = 0;
};

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

  // ---- What it offers the compiler ----
  virtual DeviceLimits limits() const = 0;

  // ---- Kernels ----
  // Compiles (or loads) `image` for this device, once: later calls with the same image return the
  // same module. A compile error is invalid_argument with the compiler's log and the kernel's
  // name; a device that cannot build kernels says unimplemented/unavailable and why.
  Expected<std::shared_ptr<KernelModule>> build(const KernelImage& image);
  // Queues `module` over `grid` with `args` on this device's queue; may return before it has run
  // (the CPU runs it before returning). Argument buffers must stay allocated until the kernel has
  // run: returning them to this device's allocator is enough, since later users queue behind it.
  Status launch(const KernelModule& module, const LaunchGrid& grid,
                const std::vector<KernelArgument>& args);

  // ---- Ordering across queues ----
  // An event at the current end of this device's queue.
  virtual Expected<std::shared_ptr<Event>> record_event() = 0;
  // Work queued on this device after this call waits for `event` (of any device). The default
  // waits on the host; a backend orders its own events in its queue without blocking.
  virtual Status wait_event(const Event& event) { return event.wait(); }

 protected:
  Device(DeviceKind kind, int index, std::string name)
      : kind_(kind), index_(index), name_(std::move(name)) {}

  // The backend's copies; ranges are already checked against the buffers' sizes.
  virtual Status do_copy_from_host(DeviceBuffer dst, size_t dst_offset, const void* src,
                                   size_t bytes) = 0;
  virtual Status do_copy_to_host(void* dst, DeviceBuffer src, size_t src_offset, size_t bytes) = 0;
  virtual Status do_copy_on_device(DeviceBuffer dst, size_t dst_offset, DeviceBuffer src,
                                   size_t src_offset, size_t bytes) = 0;
  // The backend's build and launch; build() caches, launch() has checked that the module is this
  // device's and that buffer offsets lie inside their buffers.
  virtual Expected<std::shared_ptr<KernelModule>> do_build(const KernelImage& image) = 0;
  virtual Status do_launch(const KernelModule& module, const LaunchGrid& grid,
                           const std::vector<KernelArgument>& args) = 0;

 private:
  const DeviceKind kind_;
  const int index_;
  const std::string name_;
  std::mutex modules_mutex_;  // held while building: two threads never build one image twice
  std::map<std::string, std::shared_ptr<KernelModule>> modules_;  // by a hash of the image
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

// The device with id `id` (parse_device_id). Fails with invalid_argument for a malformed id,
// unavailable when the backend is missing or has no devices here (saying why: "no CUDA device:
// ..."), not_found when the index is past the last device.
Expected<Device*> get_device(std::string_view id);

// The CPU, which is always there.
Device* cpu_device();

// Every device of every backend that works here, CPU first.
std::vector<Device*> available_devices();

}  // namespace tessel
