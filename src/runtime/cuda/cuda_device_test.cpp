// The CUDA Device through the registry. Without a driver or GPU (CI) every path is a
// "no CUDA device" Status; with a GPU, copies with offsets round-trip and the allocator counts.
#include "runtime/cuda/cuda_device.h"

#include <gtest/gtest.h>

#include <numeric>
#include <vector>

namespace tessel {
namespace {

TEST(CudaDevice, RegistryAnswersWithOrWithoutAGpu) {
  Expected<Device*> dev = get_device("cuda:0");
  Expected<std::vector<CudaDeviceInfo>> gpus = list_cuda_devices();
  if (!gpus.ok()) {
    ASSERT_FALSE(dev.ok());
    EXPECT_EQ(dev.status().code(), Code::kUnavailable);
    EXPECT_NE(dev.status().message().find("no CUDA device"), std::string::npos)
        << dev.status().message();
    return;
  }
  ASSERT_TRUE(dev.ok()) << dev.status().to_string();
  EXPECT_EQ((*dev)->id(), "cuda:0");
  EXPECT_EQ((*dev)->name(), gpus->front().name);
}

TEST(CudaDevice, CopiesWithOffsetsRoundTrip) {
  Expected<Device*> got = get_device("cuda:0");
  if (!got.ok()) GTEST_SKIP() << got.status().to_string();
  Device* dev = *got;
  const size_t n = 3000;
  std::vector<unsigned char> pattern(n), back(n, 0);
  std::iota(pattern.begin(), pattern.end(), 7);
  DeviceBuffer a = *dev->allocator().allocate(n);
  DeviceBuffer b = *dev->allocator().allocate(n);
  std::vector<unsigned char> zeros(n, 0);
  ASSERT_TRUE(dev->copy_from_host(b, 0, zeros.data(), n).ok());
  ASSERT_TRUE(dev->copy_from_host(a, 100, pattern.data(), 2000).ok());
  ASSERT_TRUE(dev->copy_on_device(b, 500, a, 150, 1000).ok());
  ASSERT_TRUE(dev->copy_to_host(back.data(), b, 0, n).ok());
  for (size_t i = 0; i < n; ++i) {
    unsigned char want = (i >= 500 && i < 1500) ? pattern[i - 500 + 50] : 0;
    ASSERT_EQ(back[i], want) << "byte " << i;
  }
  AllocatorStats s = dev->allocator().stats();
  EXPECT_GE(s.current_bytes, 2 * n);
  dev->allocator().release(a);
  dev->allocator().release(b);
}

}  // namespace
}  // namespace tessel
