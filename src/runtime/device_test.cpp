// Device registry and the CPU device: ids, errors for bad ids, aligned memory, copies with
// offsets and their range checks, allocator stats through the device.
#include "runtime/device.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <numeric>
#include <vector>

#include "runtime/cpu/cpu_device.h"

namespace tessel {
namespace {

TEST(DeviceRegistry, FindsTheCpu) {
  Expected<Device*> cpu = get_device("cpu");
  ASSERT_TRUE(cpu.ok()) << cpu.status().to_string();
  EXPECT_EQ(*cpu, cpu_device());
  EXPECT_EQ(*get_device("cpu:0"), cpu_device());
  EXPECT_EQ(cpu_device()->kind(), DeviceKind::kCpu);
  EXPECT_EQ(cpu_device()->index(), 0);
  EXPECT_EQ(cpu_device()->id(), "cpu");
  EXPECT_FALSE(cpu_device()->name().empty());
  std::vector<Device*> all = available_devices();
  ASSERT_FALSE(all.empty());
  EXPECT_EQ(all.front(), cpu_device());
}

TEST(DeviceRegistry, BadIdsSayWhatIsWrong) {
  Expected<Device*> d = get_device("gpu:0");
  EXPECT_EQ(d.status().code(), Code::kInvalidArgument);
  EXPECT_EQ(d.status().message(), "unknown device 'gpu:0': expected cpu, opencl:N or cuda:N");

  for (const char* id : {"cuda:", "cuda:x", "cuda:1x", "opencl:-1"}) {
    d = get_device(id);
    EXPECT_EQ(d.status().code(), Code::kInvalidArgument) << id;
  }
  d = get_device("cpu:1");
  EXPECT_EQ(d.status().code(), Code::kNotFound);
  EXPECT_EQ(d.status().message(),
            "device 'cpu:1': there are 1 cpu device(s) here (cpu:0 to cpu:0)");

  // No machine has this many GPUs; whether or not a CUDA backend and device exist here, the
  // answer is an error, never a crash.
  d = get_device("cuda:999");
  ASSERT_FALSE(d.ok());
  EXPECT_TRUE(d.status().code() == Code::kUnavailable || d.status().code() == Code::kNotFound)
      << d.status().to_string();
}

TEST(CpuDevice, MemoryIsAlignedAndHostAddressable) {
  CpuDevice cpu;
  for (size_t bytes : {1, 100, 1000, 100000}) {
    DeviceBuffer b = *cpu.allocator().allocate(bytes);
    EXPECT_GE(b.bytes, bytes);
    EXPECT_EQ(cpu.host_address(b), b.handle);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(cpu.host_address(b)) % 64, 0u);
    cpu.allocator().release(b);
  }
  EXPECT_EQ(cpu.allocator().stats().current_bytes, 0u);
  EXPECT_EQ(cpu.allocator().stats().allocations, 4);
}

TEST(CpuDevice, CopiesWithOffsets) {
  CpuDevice cpu;
  DeviceBuffer a = *cpu.allocator().allocate(1024);
  DeviceBuffer b = *cpu.allocator().allocate(1024);
  std::vector<uint8_t> src(300);
  std::iota(src.begin(), src.end(), 0);

  ASSERT_TRUE(cpu.copy_from_host(a, 100, src.data(), src.size()).ok());
  ASSERT_TRUE(cpu.copy_on_device(b, 7, a, 150, 200).ok());
  std::vector<uint8_t> back(200, 0xff);
  ASSERT_TRUE(cpu.copy_to_host(back.data(), b, 7, back.size()).ok());
  for (size_t i = 0; i < back.size(); ++i)
    ASSERT_EQ(back[i], static_cast<uint8_t>(50 + i)) << i;
  ASSERT_TRUE(cpu.synchronize().ok());

  Status overrun = cpu.copy_to_host(back.data(), b, 900, 200);
  EXPECT_EQ(overrun.code(), Code::kOutOfRange);
  EXPECT_EQ(overrun.message(),
            "cpu: copy to host of 200 bytes at offset 900 overruns a 1024-byte buffer");
  EXPECT_EQ(cpu.copy_from_host(a, SIZE_MAX, src.data(), 2).code(), Code::kOutOfRange);
  EXPECT_EQ(cpu.copy_on_device(a, 0, a, 10, 20).code(), Code::kInvalidArgument);
  EXPECT_TRUE(cpu.copy_on_device(a, 0, a, 20, 20).ok());  // adjacent, not overlapping
  EXPECT_EQ(cpu.copy_from_host(DeviceBuffer{}, 0, src.data(), 1).code(), Code::kInvalidArgument);

  cpu.allocator().release(a);
  cpu.allocator().release(b);
}

}  // namespace
}  // namespace tessel
