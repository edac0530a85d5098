// The OpenCL Device on this machine's OpenCL device (PoCL in CI): registry lookup, copies with
// offsets in every direction checked against the same moves done on a host array, range errors,
// and the caching allocator's statistics through the device.
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

TEST(OpenClDevice, RunsAKernelOnItsBuffersAtAnOffset) {
  // The path generated kernels take: device buffers in, a program built on the device's context,
  // a launch on its queue, results copied back. The output lands at an element offset passed as a
  // kernel argument, since a cl_mem cannot be offset like a pointer.
  Expected<Device*> got = get_device("opencl:0");
  if (!got.ok()) GTEST_SKIP() << got.status().to_string();
  auto* dev = static_cast<OpenClDevice*>(*got);
  const int n = 777, out_offset = 5;
  // 2*a is exact for these values, so the device may or may not fuse the multiply-add (OpenCL C
  // allows it) and the host's answer is still bit-for-bit the same.
  std::vector<float> a(n), b(n);
  for (int i = 0; i < n; ++i) {
    a[i] = static_cast<float>(i) * 0.25f;
    b[i] = static_cast<float>(3 * i) - 100.0f;
  }
  DeviceBuffer da = *dev->allocator().allocate(n * sizeof(float));
  DeviceBuffer db = *dev->allocator().allocate(n * sizeof(float));
  DeviceBuffer dc = *dev->allocator().allocate((n + out_offset) * sizeof(float));
  ASSERT_TRUE(dev->copy_from_host(da, 0, a.data(), n * sizeof(float)).ok());
  ASSERT_TRUE(dev->copy_from_host(db, 0, b.data(), n * sizeof(float)).ok());

  const char* source = R"(
__kernel void axpb(__global const float* a, __global const float* b, __global float* c,
                   const int offset, const int n) {
  int i = get_global_id(0);
  if (i < n) c[offset + i] = 2.0f * a[i] + b[i];
})";
  Expected<OpenClProgram> program = OpenClProgram::build(dev->context(), source, "", "axpb.cl");
  ASSERT_TRUE(program.ok()) << program.status().to_string();
  Expected<OpenClKernel> kernel = program->kernel("axpb");
  ASSERT_TRUE(kernel.ok());
  ASSERT_TRUE(kernel->set_args(opencl_mem(da), opencl_mem(db), opencl_mem(dc), out_offset, n).ok());
  ASSERT_TRUE(kernel->launch({800}, {32}).ok());
  ASSERT_TRUE(dev->synchronize().ok());

  std::vector<float> c(n);
  ASSERT_TRUE(dev->copy_to_host(c.data(), dc, out_offset * sizeof(float), n * sizeof(float)).ok());
  for (int i = 0; i < n; ++i)
    ASSERT_EQ(c[i], 2.0f * a[i] + b[i]) << "at " << i;
  for (DeviceBuffer buf : {da, db, dc})
    dev->allocator().release(buf);
}

}  // namespace
}  // namespace tessel
