// A caching allocator that a device backend wraps around its raw allocate/free (aligned host
// memory, clCreateBuffer/clReleaseMemObject, cuMemAlloc/cuMemFree).
//
// Training allocates the same sizes every step, and raw device allocation is slow (a driver call,
// often a synchronisation), so freed blocks are kept and handed out again:
//  - a request is rounded up to a size class: at least kMinBlockBytes, then four classes per power
//    of two (so at most 25% is wasted);
//  - it takes a cached block of its own class, else the smallest cached block of a larger class up
//    to kMaxReuseFactor times its own, before it asks the device for a new one. A step's
//    forward and backward make tensors of many sizes, and with reuse by class only, blocks of
//    forward's classes sat idle in the cache at backward's peak while backward allocated afresh:
//    ResNet-50 (batch 8) held 1499 MiB for a 1197 MiB peak. Reuse up to twice the class holds
//    1420 MiB (peak RSS ~80 MiB lower; ResNet-18 -50 MiB, the cnn -24 MiB), replayed from the
//    workloads' traces; the unused tail of a larger block is never written, so on the CPU its
//    pages cost no resident memory;
//  - release() puts the block in its class's free list; a raw free happens only on empty_cache(),
//    when keeping the block would exceed the cache limit, or at destruction;
//  - when a raw allocation fails, the cache is emptied and the allocation tried once more.
//
//   CachingAllocator alloc("cpu", {raw_alloc, raw_free});
//   Expected<DeviceBuffer> b = alloc.allocate(1000);   // b->bytes == 1024, the usable size
//   alloc.release(*b);                                 // cached, not freed
//   alloc.stats().cached_bytes == 1024
//
// Thread-safe. Releasing a buffer this allocator did not hand out is a bug (TESSEL_CHECK).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "support/status.h"

namespace tessel {

// A block of device memory, as the backend sees it: a host pointer on the CPU, a cl_mem on
// OpenCL, a CUdeviceptr on CUDA. Tensors address into it as handle + byte offset.
struct DeviceBuffer {
  void* handle = nullptr;
  size_t bytes = 0;
};

// Figures an allocator keeps about itself. "Bytes" are block sizes after rounding.
struct AllocatorStats {
  size_t current_bytes = 0;     // in blocks handed out and not yet released
  size_t peak_bytes = 0;        // highest current_bytes since construction or reset_peak()
  size_t requested_bytes = 0;   // what callers asked for, of current_bytes (before rounding)
  size_t cached_bytes = 0;      // in released blocks kept for reuse
  size_t reserved_bytes = 0;    // held from the device: current_bytes + cached_bytes
  int64_t allocations = 0;      // successful allocate() calls
  int64_t cache_hits = 0;       // of those, served from the cache
  int64_t releases = 0;         // release() calls
  int64_t raw_allocations = 0;  // calls to the backend's raw allocate that succeeded
  int64_t raw_frees = 0;        // calls to the backend's raw free
};

// The backend's own allocation functions. allocate returns a buffer whose bytes is the size asked
// for; free gets such a buffer back.
struct RawAllocator {
  std::function<Expected<DeviceBuffer>(size_t bytes)> allocate;
  std::function<void(DeviceBuffer buffer)> free;
};

class CachingAllocator {
 public:
  static constexpr size_t kMinBlockBytes = 256;
  // A request may take a cached block up to this many times its own size class.
  static constexpr size_t kMaxReuseFactor = 2;
  static constexpr size_t kUnlimited = SIZE_MAX;

  // `device` names the device in error messages ("cuda:0"). Released blocks are kept while the
  // cache holds at most max_cached_bytes.
  CachingAllocator(std::string device, RawAllocator raw, size_t max_cached_bytes = kUnlimited);
  // Frees the cached blocks. Blocks still handed out are reported (log_warn) and not freed.
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // A block of at least `bytes` (0 is allowed and gives a kMinBlockBytes block); its `bytes` field
  // is the usable size. Fails with resource_exhausted when the device is out of memory.
  Expected<DeviceBuffer> allocate(size_t bytes);
  void release(DeviceBuffer buffer);

  // Frees every cached block back to the device.
  void empty_cache();
  AllocatorStats stats() const;
  void reset_peak();

  // The block size a request of `bytes` gets.
  static size_t round_size(size_t bytes);

 private:
  void free_cached_locked();

  const std::string device_;
  const RawAllocator raw_;
  const size_t max_cached_bytes_;

  mutable std::mutex mutex_;
  std::map<size_t, std::vector<DeviceBuffer>> free_blocks_;  // by block size
  std::unordered_map<void*, size_t> live_;                   // handle -> requested bytes
  AllocatorStats stats_;
};

}  // namespace tessel
