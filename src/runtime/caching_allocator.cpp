// Caching allocator: size classes, per-class free lists, reuse of larger cached blocks, statistics.
#include "runtime/caching_allocator.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <utility>

#include "runtime/allocation_observer.h"
#include "support/log.h"

namespace tessel {
namespace {

std::atomic<AllocationObserver> g_observer{nullptr};
std::atomic<void*> g_observer_context{nullptr};

void observe(const CachingAllocator* allocator, const void* handle, size_t requested, size_t block,
             bool allocate) {
  AllocationObserver observer = g_observer.load(std::memory_order_acquire);
  if (observer)
    observer({allocator, handle, requested, block, allocate},
             g_observer_context.load(std::memory_order_acquire));
}

std::string format_bytes(size_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024 && unit < 4) {
    value /= 1024;
    ++unit;
  }
  return unit == 0 ? fmt::format("{} B", bytes) : fmt::format("{:.1f} {}", value, units[unit]);
}

}  // namespace

void set_allocation_observer(AllocationObserver observer, void* context) {
  g_observer_context.store(context, std::memory_order_release);
  g_observer.store(observer, std::memory_order_release);
}

CachingAllocator::CachingAllocator(std::string device, RawAllocator raw, size_t max_cached_bytes)
    : device_(std::move(device)), raw_(std::move(raw)), max_cached_bytes_(max_cached_bytes) {}

CachingAllocator::~CachingAllocator() {
  std::lock_guard<std::mutex> lock(mutex_);
  free_cached_locked();
  if (!live_.empty()) {
    log_warn("{}: allocator destroyed with {} block(s) ({}) still in use; not freeing them",
             device_, live_.size(), format_bytes(stats_.current_bytes));
  }
}

size_t CachingAllocator::round_size(size_t bytes) {
  if (bytes <= kMinBlockBytes) return kMinBlockBytes;
  // For 2^k < bytes <= 2^(k+1) the classes are steps of 2^(k-2): four per power of two.
  const size_t power = std::bit_floor(bytes - 1);  // 2^k
  const size_t step = power / 4;
  return (bytes + step - 1) / step * step;
}

Expected<DeviceBuffer> CachingAllocator::allocate(size_t bytes) {
  const size_t block = round_size(bytes);
  std::lock_guard<std::mutex> lock(mutex_);

  DeviceBuffer buffer;
  auto cached = free_blocks_.end();
  for (auto it = free_blocks_.lower_bound(block);
       it != free_blocks_.end() && it->first <= kMaxReuseFactor * block; ++it)
    if (!it->second.empty()) {
      cached = it;
      break;
    }
  if (cached != free_blocks_.end()) {
    buffer = cached->second.back();
    cached->second.pop_back();
    stats_.cached_bytes -= buffer.bytes;
    ++stats_.cache_hits;
  } else {
    Expected<DeviceBuffer> raw = raw_.allocate(block);
    if (!raw && stats_.cached_bytes > 0) {  // out of memory? give the cache back and try again
      free_cached_locked();
      raw = raw_.allocate(block);
    }
    if (!raw) {
      return resource_exhausted("{}: cannot allocate {} ({} in use, {} cached): {}", device_,
                                format_bytes(block), format_bytes(stats_.current_bytes),
                                format_bytes(stats_.cached_bytes), raw.status().message());
    }
    buffer = *raw;
    TESSEL_CHECK(buffer.bytes == block, "{}: raw allocator returned {} bytes for {}", device_,
                 buffer.bytes, block);
    ++stats_.raw_allocations;
  }

  const bool fresh = live_.emplace(buffer.handle, bytes).second;
  TESSEL_CHECK(fresh, "{}: handle {} handed out twice", device_, buffer.handle);
  ++stats_.allocations;
  stats_.current_bytes += buffer.bytes;
  stats_.requested_bytes += bytes;
  stats_.peak_bytes = std::max(stats_.peak_bytes, stats_.current_bytes);
  stats_.reserved_bytes = stats_.current_bytes + stats_.cached_bytes;
  observe(this, buffer.handle, bytes, buffer.bytes, true);
  return buffer;
}

void CachingAllocator::release(DeviceBuffer buffer) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto live = live_.find(buffer.handle);
  TESSEL_CHECK(live != live_.end(), "{}: release of a buffer this allocator did not hand out",
               device_);
  TESSEL_CHECK(buffer.bytes >= round_size(live->second) &&
                   buffer.bytes <= kMaxReuseFactor * round_size(live->second),
               "{}: release with a wrong size", device_);
  observe(this, buffer.handle, live->second, buffer.bytes, false);
  stats_.requested_bytes -= live->second;
  live_.erase(live);
  ++stats_.releases;
  stats_.current_bytes -= buffer.bytes;

  if (stats_.cached_bytes + buffer.bytes <= max_cached_bytes_) {
    free_blocks_[buffer.bytes].push_back(buffer);
    stats_.cached_bytes += buffer.bytes;
  } else {
    raw_.free(buffer);
    ++stats_.raw_frees;
  }
  stats_.reserved_bytes = stats_.current_bytes + stats_.cached_bytes;
}

void CachingAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(mutex_);
  free_cached_locked();
}

void CachingAllocator::free_cached_locked() {
  for (auto& [size, blocks] : free_blocks_) {
    for (const DeviceBuffer& b : blocks) {
      raw_.free(b);
      ++stats_.raw_frees;
    }
  }
  free_blocks_.clear();
  stats_.cached_bytes = 0;
  stats_.reserved_bytes = stats_.current_bytes;
}

AllocatorStats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

void CachingAllocator::reset_peak() {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.peak_bytes = stats_.current_bytes;
}

}  // namespace tessel
