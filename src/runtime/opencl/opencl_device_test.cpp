// The OpenCL Device on this machine's OpenCL device (PoCL in CI): registry lookup, copies with
// offsets in every direction checked against the same moves done on a host array, range errors,
// and the caching allocator's statistics through the device.
#include "runtime/opencl/opencl_device.h"

#include <gtest/gtest.h>

#include <numeric>
#include <vector>

namespace tessel {
namespace {

// A private device, so allocator statistics start from zero.
std::unique_ptr<OpenClDevice> fresh_device() {
  Expected<std::shared_ptr<OpenClContext>> ctx = OpenClContext::create_default();
  if (!ctx) return nullptr;
  return std::make_unique<OpenClDevice>(0, *ctx);
}

#define SKIP_WITHOUT_OPENCL(dev) \
  if (!(dev)) GTEST_SKIP() << OpenClContext::create_default().status().to_string()

TEST(OpenClDevice, RegisteredAsOpencl0) {
  Expected<std::vector<OpenClDeviceInfo>> infos = list_opencl_devices();
  if (!infos || infos->empty()) GTEST_SKIP() << "no OpenCL device here";
  Expected<Device*> dev = get_device("opencl:0");
  ASSERT_TRUE(dev.ok()) << dev.status().to_string();
  EXPECT_EQ((*dev)->kind(), DeviceKind::kOpenCL);
  EXPECT_EQ((*dev)->id(), "opencl:0");
  EXPECT_EQ((*dev)->name(), infos->front().name);
  EXPECT_EQ(*get_device("opencl"), *dev);
  Expected<Device*> past = get_device("opencl:" + std::to_string(infos->size()));
  EXPECT_EQ(past.status().code(), Code::kNotFound);
}

TEST(OpenClDevice, CopiesWithOffsetsMatchTheHostModel) {
  auto dev = fresh_device();
  SKIP_WITHOUT_OPENCL(dev);
  const size_t n = 3000;
  std::vector<unsigned char> pattern(n);
  std::iota(pattern.begin(), pattern.end(), 7);  // wraps at 256
  Expected<DeviceBuffer> a = dev->allocator().allocate(n);
  Expected<DeviceBuffer> b = dev->allocator().allocate(n);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(dev->host_address(*a), nullptr);

  // Host model of the two buffers, updated alongside every device operation.
  std::vector<unsigned char> model_a(n, 0), model_b(n, 0);
  std::vector<unsigned char> zeros(n, 0);
  ASSERT_TRUE(dev->copy_from_host(*a, 0, zeros.data(), n).ok());
  ASSERT_TRUE(dev->copy_from_host(*b, 0, zeros.data(), n).ok());

  ASSERT_TRUE(dev->copy_from_host(*a, 123, pattern.data() + 5, 2000).ok());
  std::copy(pattern.begin() + 5, pattern.begin() + 2005, model_a.begin() + 123);
  ASSERT_TRUE(dev->copy_on_device(*b, 999, *a, 200, 1500).ok());
  std::copy(model_a.begin() + 200, model_a.begin() + 1700, model_b.begin() + 999);
  ASSERT_TRUE(dev->copy_on_device(*a, 0, *a, 2500, 400).ok());  // same buffer, disjoint ranges
  std::copy(model_a.begin() + 2500, model_a.begin() + 2900, model_a.begin());
  ASSERT_TRUE(dev->synchronize().ok());

  std::vector<unsigned char> back_a(n), back_b(n - 17);
  ASSERT_TRUE(dev->copy_to_host(back_a.data(), *a, 0, n).ok());
  ASSERT_TRUE(dev->copy_to_host(back_b.data(), *b, 17, n - 17).ok());
  EXPECT_EQ(back_a, model_a);
  EXPECT_EQ(back_b, std::vector<unsigned char>(model_b.begin() + 17, model_b.end()));

  dev->allocator().release(*a);
  dev->allocator().release(*b);
}

TEST(OpenClDevice, RangeErrorsNeverReachTheDriver) {
  auto dev = fresh_device();
  SKIP_WITHOUT_OPENCL(dev);
  DeviceBuffer a = *dev->allocator().allocate(100);
  std::vector<char> host(a.bytes + 1);
  EXPECT_EQ(dev->copy_from_host(a, 1, host.data(), a.bytes).code(), Code::kOutOfRange);
  EXPECT_EQ(dev->copy_to_host(host.data(), a, 0, a.bytes + 1).code(), Code::kOutOfRange);
  EXPECT_EQ(dev->copy_on_device(a, 0, a, 10, 20).code(), Code::kInvalidArgument);  // overlap
  dev->allocator().release(a);
}

TEST(OpenClDevice, AllocatorStatisticsCountDeviceMemory) {
  auto dev = fresh_device();
  SKIP_WITHOUT_OPENCL(dev);
  CachingAllocator& alloc = dev->allocator();
  DeviceBuffer a = *alloc.allocate(1000);
  DeviceBuffer b = *alloc.allocate(5000);
  EXPECT_GE(a.bytes, 1000u);
  EXPECT_GE(b.bytes, 5000u);
  AllocatorStats s = alloc.stats();
  EXPECT_EQ(s.current_bytes, a.bytes + b.bytes);
  EXPECT_EQ(s.peak_bytes, a.bytes + b.bytes);
  EXPECT_EQ(s.raw_allocations, 2);

  alloc.release(a);
  DeviceBuffer again = *alloc.allocate(1000);  // served from the cache: same cl_mem
  EXPECT_EQ(again.handle, a.handle);
  s = alloc.stats();
  EXPECT_EQ(s.cache_hits, 1);
  EXPECT_EQ(s.raw_allocations, 2);

  alloc.release(again);
  alloc.release(b);
  s = alloc.stats();
  EXPECT_EQ(s.current_bytes, 0u);
  EXPECT_EQ(s.cached_bytes, a.bytes + b.bytes);
  alloc.empty_cache();
  s = alloc.stats();
  EXPECT_EQ(s.cached_bytes, 0u);
  EXPECT_EQ(s.raw_frees, 2);
}

}  // namespace
}  // namespace tessel
