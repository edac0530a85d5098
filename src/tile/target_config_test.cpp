// [target] tables: devices resolve to targets with the device's numbers, options apply, and every
// mistake names the key.
#include "tile/target_config.h"

#include <gtest/gtest.h>

#include "hw/cpu_info.h"
#include "hw/cuda_devices.h"
#include "hw/opencl_devices.h"

namespace tessel::tile {
namespace {

Expected<TargetChoice> choose(const std::string& toml) {
  auto config = Config::parse(toml, "t.toml");
  if (!config) return config.status();
  return target_from_config(*config);
}

TEST(TargetConfig, CpuWithOptions) {
  auto c = choose("[target]\ndevice = \"cpu\"\n[target.cpu]\nisa = \"avx2\"\nfast_memory_kib = 512\n");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->device, "cpu");
  EXPECT_EQ(c->target.kind, TargetKind::kCpu);
  EXPECT_EQ(c->cpu_isa, "avx2");
  EXPECT_EQ(c->target.fast_memory_bytes, 512 << 10);
}

TEST(TargetConfig, CpuDefaultsToThisMachinesL2) {
  auto c = choose("[target]\ndevice = \"cpu\"\n");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->target.fast_memory_bytes, host_cpu_info().caches.l2_bytes);
  EXPECT_EQ(c->cpu_isa, "");
}

TEST(TargetConfig, MistakesNameTheKey) {
  auto unknown = choose("[target]\ndevise = \"cpu\"\n");
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("unknown key 'target.devise'"), std::string::npos)
      << unknown.status().message();

  auto device = choose("[target]\ndevice = \"gpu\"\n");
  ASSERT_FALSE(device.ok());
  EXPECT_EQ(device.status().message(),
            "t.toml: key 'target.device': unknown device 'gpu': expected \"auto\", \"cpu\", "
            "\"opencl:N\" or \"cuda:N\"");

  auto index = choose("[target]\ndevice = \"opencl:x\"\n");
  ASSERT_FALSE(index.ok());
  EXPECT_NE(index.status().message().find("device 'opencl:x': expected a device number"),
            std::string::npos);

  auto isa = choose("[target]\ndevice = \"cpu\"\n[target.cpu]\nisa = \"sse9\"\n");
  ASSERT_FALSE(isa.ok());
  EXPECT_NE(isa.status().message().find("t.toml: key 'target.cpu.isa'"), std::string::npos)
      << isa.status().message();

  auto negative = choose("[target]\ndevice = \"cpu\"\n[target.cpu]\nfast_memory_kib = -4\n");
  ASSERT_FALSE(negative.ok());
  EXPECT_NE(negative.status().message().find("key 'target.cpu.fast_memory_kib': expected a "
                                             "positive integer, got -4"),
            std::string::npos)
      << negative.status().message();

  auto option = choose("[target]\ndevice = \"cpu\"\n[target.cpu]\nthreads = 4\n");
  ASSERT_FALSE(option.ok());
  EXPECT_NE(option.status().message().find("unknown key 'target.cpu.threads'"), std::string::npos)
      << option.status().message();
}

TEST(TargetConfig, OpenClDeviceBringsItsOwnNumbers) {
  auto devices = list_opencl_devices();
  if (!devices || devices->empty()) GTEST_SKIP() << "no OpenCL device here";
  auto c = choose("[target]\ndevice = \"opencl:0\"\n");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->device, "opencl:0");
  EXPECT_EQ(c->target.kind, TargetKind::kOpenCL);
  EXPECT_EQ(c->target.fast_memory_bytes, static_cast<int64_t>((*devices)[0].local_mem_bytes));
  EXPECT_LE(static_cast<size_t>(c->target.threads_per_block), (*devices)[0].max_work_group_size);

  auto tuned = choose("[target]\ndevice = \"opencl:0\"\n[target.opencl]\nthreads = 64\n"
                      "local_memory_kib = 16\n[target.cuda]\nthreads = 512\n");
  ASSERT_TRUE(tuned.ok()) << tuned.status().to_string();
  EXPECT_EQ(tuned->target.threads_per_block, 64);
  EXPECT_EQ(tuned->target.fast_memory_bytes, 16 << 10);

  std::string past = "opencl:" + std::to_string(devices->size());
  auto missing = choose("[target]\ndevice = \"" + past + "\"\n");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find(
                fmt::format("this machine has {} OpenCL device(s)", devices->size())),
            std::string::npos)
      << missing.status().message();
}

TEST(TargetConfig, AutoPrefersCudaThenOpenClGpuThenCpu) {
  std::string expected = "cpu";
  auto opencl = list_opencl_devices();
  if (opencl)
    for (size_t i = opencl->size(); i-- > 0;)
      if ((*opencl)[i].type == "gpu") expected = "opencl:" + std::to_string(i);
  auto gpus = list_cuda_devices();
  if (gpus && !gpus->empty()) expected = "cuda:0";
  auto c = choose("");  // no [target] table at all
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->device, expected);
}

TEST(TargetConfig, CudaWithoutADeviceSaysSo) {
  auto gpus = list_cuda_devices();
  if (gpus) GTEST_SKIP() << "a CUDA device is present";
  auto c = choose("[target]\ndevice = \"cuda:0\"\n");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("no CUDA device"), std::string::npos)
      << c.status().message();
}

}  // namespace
}  // namespace tessel::tile
