// [target] tables: devices resolve through the registry to targets with the device's numbers,
// options apply (and reach the op library), and every mistake names the key.
#include "ops/target_config.h"

#include <gtest/gtest.h>

#include "hw/cpu_info.h"
#include "hw/cuda_devices.h"
#include "hw/opencl_devices.h"

namespace tessel::ops {
namespace {

Expected<TargetChoice> choose(const std::string& toml) {
  auto config = Config::parse(toml, "t.toml");
  if (!config) return config.status();
  return target_from_config(*config);
}

std::string error_of(const std::string& toml) {
  Expected<TargetChoice> c = choose(toml);
  return c.ok() ? std::string("(no error)") : c.status().message();
}

TEST(TargetConfig, CpuWithOptions) {
  auto c =
      choose("[target]\ndevice = \"cpu\"\n[target.cpu]\nisa = \"avx2\"\nfast_memory_kib = 512\n");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->device, cpu_device());
  EXPECT_EQ(c->target.kind, tile::TargetKind::kCpu);
  EXPECT_EQ(c->options.cpu_isa, "avx2");
  EXPECT_EQ(c->target.fast_memory_bytes, 512 << 10);
}

TEST(TargetConfig, CpuDefaultsToThisMachinesL2ButNoLessThanOneMiB) {
  auto c = choose("[target]\ndevice = \"cpu\"\n");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  const int64_t l2 = host_cpu_info().caches.l2_bytes;
  EXPECT_EQ(c->target.fast_memory_bytes, l2 > (1 << 20) ? l2 : 1 << 20);
  EXPECT_EQ(c->options.cpu_isa, "");
}

TEST(TargetConfig, TopLevelDeviceIsTheSameSetting) {
  auto config = Config::parse("device = \"cpu\"\n", "t.toml").value();
  TargetSetting s = parse_target_setting(config).value();
  EXPECT_EQ(s.device, "cpu");
  EXPECT_EQ(s.key, "device");
  EXPECT_EQ(error_of("device = \"cpu\"\n[target]\ndevice = \"cpu\"\n"),
            "t.toml: key 'device': the device is set twice, here and in 'target.device'; keep "
            "'[target] device' (the top-level 'device' is its older spelling)");
}

TEST(TargetConfig, MistakesNameTheKey) {
  EXPECT_NE(error_of("[target]\ndevise = \"cpu\"\n").find("unknown key 'target.devise'"),
            std::string::npos);
  EXPECT_EQ(error_of("[target]\ndevice = \"gpu\"\n"),
            "t.toml: key 'target.device': 'gpu' is not allowed; allowed: auto, cpu, opencl:N, "
            "cuda:N (N = 0, 1, ...)");
  EXPECT_EQ(error_of("[target]\ndevice = \"opencl:x\"\n"),
            "t.toml: key 'target.device': device 'opencl:x': expected a device number after "
            "'opencl:', e.g. 'opencl:0'");
  EXPECT_NE(error_of("[target]\ndevice = \"cpu\"\n[target.cpu]\nisa = \"sse9\"\n")
                .find("t.toml: key 'target.cpu.isa'"),
            std::string::npos);
  EXPECT_EQ(error_of("[target]\ndevice = \"cpu\"\n[target.cpu]\nfast_memory_kib = -4\n"),
            "t.toml: key 'target.cpu.fast_memory_kib': expected a positive integer, got -4");
  EXPECT_NE(error_of("[target]\ndevice = \"cpu\"\n[target.cpu]\nthreads = 4\n")
                .find("unknown key 'target.cpu.threads'"),
            std::string::npos);
  // Options for a kind the named device is not: a mistake, not silently unused.
  EXPECT_EQ(error_of("[target]\ndevice = \"cpu\"\n[target.opencl]\nthreads = 64\n"),
            "t.toml: key 'target.opencl': options for opencl devices, but 'target.device' = "
            "\"cpu\" is a cpu device; remove the table or change the device");
  // Under "auto" the tables of every kind may be there: the chosen kind's apply.
  EXPECT_TRUE(choose("[target.cuda]\nthreads = 512\n[target.opencl]\nthreads = 64\n").ok());
}

TEST(TargetConfig, OpenClDeviceBringsItsOwnNumbersAndTheOptionsReachTheKernels) {
  auto devices = list_opencl_devices();
  if (!devices || devices->empty()) GTEST_SKIP() << "no OpenCL device here";
  auto c = choose("[target]\ndevice = \"opencl:0\"\n");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->device->id(), "opencl:0");
  EXPECT_EQ(c->target.kind, tile::TargetKind::kOpenCL);
  EXPECT_EQ(c->target.fast_memory_bytes, static_cast<int64_t>((*devices)[0].local_mem_bytes));
  EXPECT_LE(static_cast<size_t>(c->target.threads_per_block), (*devices)[0].max_work_group_size);

  auto tuned = choose(
      "[target]\ndevice = \"opencl:0\"\n[target.opencl]\nthreads = 64\n"
      "local_memory_kib = 16\n");
  ASSERT_TRUE(tuned.ok()) << tuned.status().to_string();
  EXPECT_EQ(tuned->target.threads_per_block, 64);
  EXPECT_EQ(tuned->target.fast_memory_bytes, 16 << 10);
  // Applied, the kernels the op library compiles for the device get those numbers.
  const TargetOptions before = target_options(DeviceKind::kOpenCL);
  apply_target(*tuned);
  EXPECT_EQ(device_target(*tuned->device).threads_per_block, 64);
  EXPECT_EQ(device_target(*tuned->device).fast_memory_bytes, 16 << 10);
  set_target_options(DeviceKind::kOpenCL, before);

  const size_t most = (*devices)[0].max_work_group_size;
  EXPECT_EQ(error_of(fmt::format("[target]\ndevice = \"opencl:0\"\n[target.opencl]\nthreads = {}\n",
                                 most * 2)),
            fmt::format("t.toml: key 'target.opencl.threads': {} threads per block, but opencl:0 "
                        "runs at most {}",
                        most * 2, most));

  std::string past = "opencl:" + std::to_string(devices->size());
  EXPECT_NE(error_of("[target]\ndevice = \"" + past + "\"\n")
                .find(fmt::format("t.toml: key 'target.device': device '{}': there are {} opencl "
                                  "device(s) here",
                                  past, devices->size())),
            std::string::npos)
      << error_of("[target]\ndevice = \"" + past + "\"\n");
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
  EXPECT_EQ(c->device->id(), expected);
}

TEST(TargetConfig, CudaWithoutADeviceSaysWhatIsMissing) {
  auto gpus = list_cuda_devices();
  if (gpus) GTEST_SKIP() << "a CUDA device is present";
  std::string message = error_of("[target]\ndevice = \"cuda:0\"\n");
  EXPECT_EQ(message.rfind("t.toml: key 'target.device': device 'cuda:0': no CUDA device", 0), 0u)
      << message;
  EXPECT_NE(message.find(gpus.status().message()), std::string::npos) << message;
}

}  // namespace
}  // namespace tessel::ops
