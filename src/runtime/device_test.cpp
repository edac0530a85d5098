// Device registry and the CPU device: ids, errors for bad ids, aligned memory, copies with
// offsets and their range checks, allocator stats through the device.
#include "runtime/device.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <numeric>
#include <utility>
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

TEST(DeviceId, OneParserForEveryId) {
  EXPECT_EQ(parse_device_id("cpu").value().to_string(), "cpu");
  EXPECT_EQ(parse_device_id("cpu:0").value().to_string(), "cpu");
  DeviceId gpu = parse_device_id("cuda:3").value();
  EXPECT_EQ(gpu.kind, DeviceKind::kCuda);
  EXPECT_EQ(gpu.index, 3);
  EXPECT_EQ(gpu.to_string(), "cuda:3");
  EXPECT_EQ(parse_device_id("opencl").value().to_string(), "opencl:0");
  EXPECT_EQ(parse_device_id("opencl:x").status().message(),
            "device 'opencl:x': expected a device number after 'opencl:', e.g. 'opencl:0'");
  EXPECT_EQ(parse_device_id("auto").status().code(), Code::kInvalidArgument);
}

// A kernel by hand in the CPU ABI (one 8-byte slot per parameter; the entry point runs a range
// of blocks and returns 0 or the bytes it could not allocate): y[i] = s * x[i] over blocks of 4
// elements.
constexpr const char* kScaleSource = R"(
#include <cstdint>
union Arg { void* ptr; int64_t i64; double f64; float f32; int32_t i32; };
extern "C" int64_t scale_blocks(const Arg* args, int64_t begin, int64_t end) {
  const float* x = static_cast<const float*>(args[0].ptr);
  float* y = static_cast<float*>(args[1].ptr);
  const float s = args[2].f32;
  const int64_t n = args[3].i64;
  for (int64_t b = begin; b < end; ++b)
    for (int64_t i = 4 * b; i < 4 * b + 4 && i < n; ++i) y[i] = s * x[i];
  return 0;
}
)";

TEST(CpuDevice, BuildsOnceAndLaunchesWithOffsets) {
  Device* cpu = cpu_device();
  const KernelImage image{"scale", "scale_blocks", kScaleSource, ""};
  Expected<std::shared_ptr<KernelModule>> module = cpu->build(image);
  ASSERT_TRUE(module.ok()) << module.status().to_string();
  EXPECT_EQ(cpu->build(image).value(), *module) << "a second build of one image is the first";
  EXPECT_FALSE((*module)->ahead_of_time());
  EXPECT_EQ(&(*module)->device(), cpu);

  const int64_t n = 10;
  DeviceBuffer x = *cpu->allocator().allocate(64 + n * sizeof(float));
  DeviceBuffer y = *cpu->allocator().allocate(n * sizeof(float));
  std::vector<float> values(n);
  std::iota(values.begin(), values.end(), 1.0f);
  ASSERT_TRUE(cpu->copy_from_host(x, 64, values.data(), n * sizeof(float)).ok());
  // x starts 64 bytes into its buffer; 3 blocks of 4 cover 10 elements.
  std::vector<KernelArgument> args = {KernelArgument::memory(x, 64), KernelArgument::memory(y),
                                      KernelArgument::scalar(2.5f), KernelArgument::scalar(n)};
  ASSERT_TRUE(cpu->launch(**module, {{3, 1, 1}, 1}, args).ok());
  std::vector<float> got(n);
  ASSERT_TRUE(cpu->copy_to_host(got.data(), y, 0, n * sizeof(float)).ok());
  for (int64_t i = 0; i < n; ++i)
    EXPECT_EQ(got[i], 2.5f * values[i]) << i;

  // The CPU's queue is always empty: its events have happened.
  Expected<std::shared_ptr<Event>> event = cpu->record_event();
  ASSERT_TRUE(event.ok());
  EXPECT_TRUE((*event)->wait().ok());
  EXPECT_TRUE(cpu->wait_event(**event).ok());

  // Mistakes are errors before anything runs.
  args[0].offset = x.bytes;
  EXPECT_EQ(cpu->launch(**module, {{3, 1, 1}, 1}, args).code(), Code::kOutOfRange);
  args[0].offset = 64;
  args[2].size = 2;
  EXPECT_EQ(cpu->launch(**module, {{3, 1, 1}, 1}, args).code(), Code::kInvalidArgument);
  CpuDevice other;
  EXPECT_EQ(other.launch(**module, {{3, 1, 1}, 1}, args).message(),
            "kernel 'scale' was built for cpu, not cpu");  // another instance, same id
  Expected<std::shared_ptr<KernelModule>> broken =
      cpu->build({"broken", "broken", "this is not C++", ""});
  ASSERT_FALSE(broken.ok());
  EXPECT_EQ(broken.status().message().rfind("building kernel 'broken' for cpu", 0), 0u)
      << broken.status().message();
  for (DeviceBuffer b : {x, y})
    cpu->allocator().release(b);
}

// A kernel by hand with one tile of per-thread scratch (tile/codegen/cpu/prelude.h) whose size
// is an argument: y[b] = 2 b + 1 through the tile, or the bytes it could not allocate.
constexpr const char* kTileMemorySource = R"(
#include "tile/codegen/cpu/prelude.h"
extern "C" int64_t tile_memory_blocks(const tessel_cpu::Arg* args, int64_t begin, int64_t end) {
  float* y = static_cast<float*>(args[0].ptr);
  static thread_local tessel_cpu::Scratch<1> scratch;
  float* tile = scratch.get<float>(0, args[1].i64);
  if (const int64_t unallocated = scratch.take_unallocated()) return unallocated;
  for (int64_t b = begin; b < end; ++b) {
    tile[0] = float(b);
    y[b] = 2.0f * tile[0] + 1.0f;
  }
  return 0;
}
)";

TEST(CpuDevice, AKernelOutOfTileMemoryIsAnErrorNamingItAndTheBytes) {
  Device* cpu = cpu_device();
  Expected<std::shared_ptr<KernelModule>> module =
      cpu->build({"tile_memory", "tile_memory_blocks", kTileMemorySource, ""});
  ASSERT_TRUE(module.ok()) << module.status().to_string();
  const int64_t blocks = 16;
  DeviceBuffer y = *cpu->allocator().allocate(blocks * sizeof(float));
  auto run = [&](int64_t tile_elems) {
    const std::vector<float> untouched(blocks, -1.0f);
    EXPECT_TRUE(cpu->copy_from_host(y, 0, untouched.data(), blocks * sizeof(float)).ok());
    Status s = cpu->launch(**module, {{blocks, 1, 1}, 1},
                           {KernelArgument::memory(y), KernelArgument::scalar(tile_elems)});
    std::vector<float> got(blocks);
    EXPECT_TRUE(cpu->copy_to_host(got.data(), y, 0, blocks * sizeof(float)).ok());
    return std::make_pair(s, got);
  };
  // 2^60 bytes: more than any address space (sanitizers: allocator_may_return_null=1, as the
  // Makefile sets). No block runs; every thread's failure is the same size.
  auto [failed, untouched] = run(int64_t{1} << 58);
  EXPECT_EQ(failed.code(), Code::kResourceExhausted);
  EXPECT_EQ(failed.message(),
            "kernel 'tile_memory' on cpu: host memory: could not allocate 1152921504606846976 "
            "bytes of tile memory");
  for (int64_t b = 0; b < blocks; ++b)
    EXPECT_EQ(untouched[b], -1.0f) << "block " << b << " ran without its tile";
  // The same module runs once the memory is there.
  auto [ran, values] = run(16);
  ASSERT_TRUE(ran.ok()) << ran.to_string();
  for (int64_t b = 0; b < blocks; ++b)
    EXPECT_EQ(values[b], 2.0f * float(b) + 1.0f) << b;
  cpu->allocator().release(y);
}

TEST(CpuDevice, LimitsAreThisMachines) {
  const DeviceLimits l = cpu_device()->limits();
  EXPECT_EQ(l.max_threads_per_block, 1);
  EXPECT_GT(l.fast_memory_bytes, 0);
  EXPECT_GE(l.compute_units, 1);
  EXPECT_TRUE(l.f64);
  EXPECT_FALSE(l.gpu);
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
