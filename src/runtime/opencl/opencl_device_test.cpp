// The OpenCL Device on this machine's OpenCL device (PoCL in CI): registry lookup, copies with
// offsets in every direction checked against the same moves done on a host array, range errors,
// the caching allocator's statistics through the device, building and launching kernels with
// buffer + offset arguments, events across queues, and the limits the compiler targets.
#include "runtime/opencl/opencl_device.h"

#include "runtime/opencl/opencl_program.h"

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

TEST(OpenClDevice, BuildsOnceAndLaunchesOnItsQueueWithOffsets) {
  // The path generated kernels take (runtime/device.h): an image built once by the device, a
  // launch queued with buffer + byte offset and scalar arguments, results read back after it.
  // The output lands at an element offset passed as an argument (as the tile ABI does), one
  // input starts at a byte offset of its buffer (a sub-buffer for the launch).
  Expected<Device*> got = get_device("opencl:0");
  if (!got.ok()) GTEST_SKIP() << got.status().to_string();
  Device* dev = *got;
  const int n = 777, out_offset = 5;
  const size_t a_offset = 4096;  // a multiple of every device's base address alignment
  // 2*a is exact for these values, so the device may or may not fuse the multiply-add (OpenCL C
  // allows it) and the host's answer is still bit-for-bit the same.
  std::vector<float> a(n), b(n);
  for (int i = 0; i < n; ++i) {
    a[i] = static_cast<float>(i) * 0.25f;
    b[i] = static_cast<float>(3 * i) - 100.0f;
  }
  DeviceBuffer da = *dev->allocator().allocate(a_offset + n * sizeof(float));
  DeviceBuffer db = *dev->allocator().allocate(n * sizeof(float));
  DeviceBuffer dc = *dev->allocator().allocate((n + out_offset) * sizeof(float));
  ASSERT_TRUE(dev->copy_from_host(da, a_offset, a.data(), n * sizeof(float)).ok());
  ASSERT_TRUE(dev->copy_from_host(db, 0, b.data(), n * sizeof(float)).ok());

  const KernelImage image{"axpb", "axpb", R"(
__kernel void axpb(__global const float* a, __global const float* b, __global float* c,
                   const long offset, const int n) {
  int i = get_global_id(0);
  if (i < n) c[offset + i] = 2.0f * a[i] + b[i];
})",
                          "-cl-std=CL1.2"};
  Expected<std::shared_ptr<KernelModule>> module = dev->build(image);
  ASSERT_TRUE(module.ok()) << module.status().to_string();
  EXPECT_EQ(dev->build(image).value(), *module) << "a second build of one image is the first";
  const std::vector<KernelArgument> args = {
      KernelArgument::memory(da, a_offset), KernelArgument::memory(db),
      KernelArgument::memory(dc), KernelArgument::scalar<int64_t>(out_offset),
      KernelArgument::scalar<int32_t>(n)};
  ASSERT_TRUE(dev->launch(**module, {{25, 1, 1}, 32}, args).ok());

  std::vector<float> c(n);
  ASSERT_TRUE(dev->copy_to_host(c.data(), dc, out_offset * sizeof(float), n * sizeof(float)).ok());
  for (int i = 0; i < n; ++i)
    ASSERT_EQ(c[i], 2.0f * a[i] + b[i]) << "at " << i;

  // Mistakes: a module of another device, an offset past the buffer, a build error's log.
  std::vector<KernelArgument> past = args;
  past[0].offset = da.bytes;
  EXPECT_EQ(dev->launch(**module, {{25, 1, 1}, 32}, past).code(), Code::kOutOfRange);
  Expected<std::shared_ptr<KernelModule>> broken =
      dev->build({"broken", "broken", "__kernel void broken() { nonsense }", ""});
  ASSERT_FALSE(broken.ok());
  EXPECT_NE(broken.status().message().find("building kernel 'broken' for opencl:0"),
            std::string::npos)
      << broken.status().message();
  for (DeviceBuffer buf : {da, db, dc})
    dev->allocator().release(buf);
}

TEST(OpenClDevice, EventsOrderWorkAcrossQueues) {
  Expected<Device*> got = get_device("opencl:0");
  if (!got.ok()) GTEST_SKIP() << got.status().to_string();
  Device* dev = *got;
  const int n = 1 << 16;
  std::vector<float> host(n, 3.0f), back(n, 0.0f);
  DeviceBuffer src = *dev->allocator().allocate(n * sizeof(float));
  DeviceBuffer dst = *dev->allocator().allocate(n * sizeof(float));
  ASSERT_TRUE(dev->copy_from_host(src, 0, host.data(), n * sizeof(float)).ok());
  ASSERT_TRUE(dev->copy_on_device(dst, 0, src, 0, n * sizeof(float)).ok());  // queued
  Expected<std::shared_ptr<Event>> copied = dev->record_event();
  ASSERT_TRUE(copied.ok()) << copied.status().to_string();
  // The CPU's queue (and the host) wait for it; then the copy's bytes are there.
  ASSERT_TRUE(cpu_device()->wait_event(**copied).ok());
  ASSERT_TRUE((*copied)->wait().ok());
  ASSERT_TRUE(dev->wait_event(**copied).ok());  // its own queue: a barrier, no host wait
  ASSERT_TRUE(dev->copy_to_host(back.data(), dst, 0, n * sizeof(float)).ok());
  EXPECT_EQ(back, host);
  // And the other way: an event of the CPU (whose work is always done) in this queue.
  ASSERT_TRUE(dev->wait_event(*cpu_device()->record_event().value()).ok());
  ASSERT_TRUE(dev->synchronize().ok());
  for (DeviceBuffer buf : {src, dst})
    dev->allocator().release(buf);
}

TEST(OpenClDevice, LimitsAreTheDevicesOwn) {
  Expected<std::vector<OpenClDeviceInfo>> infos = list_opencl_devices();
  Expected<Device*> got = get_device("opencl:0");
  if (!got.ok() || !infos || infos->empty()) GTEST_SKIP() << "no OpenCL device here";
  const DeviceLimits l = (*got)->limits();
  const OpenClDeviceInfo& info = infos->front();
  EXPECT_EQ(l.memory_bytes, static_cast<int64_t>(info.global_mem_bytes));
  EXPECT_EQ(l.fast_memory_bytes, static_cast<int64_t>(info.local_mem_bytes));
  EXPECT_EQ(static_cast<size_t>(l.max_threads_per_block), info.max_work_group_size);
  EXPECT_EQ(l.compute_units, static_cast<int>(info.compute_units));
  EXPECT_EQ(l.f64, info.fp64);
  EXPECT_EQ(l.gpu, info.type == "gpu");
}

}  // namespace
}  // namespace tessel
