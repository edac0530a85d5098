// CudaDevice over the recording fake driver (fake_cuda_driver.h), on a machine without a GPU: what
// tessel asks of the driver. Two fake devices of compute capability 8.6, so that a module built
// for a compute_80 default instead of the device's own would show, and each device's context and
// stream can be told apart. Kernels do not run on the fake: these tests check contexts, streams,
// modules, events and the bytes of launch arguments, never results (scripts/gpu_check.sh runs the
// op tests on a real GPU).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "hw/cuda_api.h"
#include "runtime/cuda/cuda_device.h"
#include "runtime/cuda/testing/fake_cuda_env.h"

namespace tessel {
namespace {

using fake_cuda::Log;

constexpr const char* kScale = R"(
extern "C" __global__ void __launch_bounds__(256) tessel_scale(float* y, const long long y_offset,
    const float* x, const int n, const float alpha, const long long tag) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[y_offset + i] = alpha * x[i] + (float)tag;
}
)";

class FakeCudaDevice : public ::testing::Test {
 protected:
  void SetUp() override {
    log_ = fake_cuda::use_fake_driver(2, "8.6");
    ASSERT_NE(log_, nullptr) << "cannot load the fake driver " << TESSEL_FAKE_CUDA;
    if (!nvrtc_api().ok()) GTEST_SKIP() << "NVRTC is not installed: kernels cannot be built";
    auto dev = get_device("cuda:0");
    ASSERT_TRUE(dev.ok()) << dev.status().to_string();
    gpu_ = *dev;
  }
  void TearDown() override {
    if (log_ && !log_->violations.empty()) ADD_FAILURE() << log_->violations.front();
  }

  std::shared_ptr<KernelModule> build_scale(Device* device) {
    auto module = device->build({"scale", "tessel_scale", kScale, ""});
    EXPECT_TRUE(module.ok()) << module.status().to_string();
    return module.ok() ? *module : nullptr;
  }

  Log* log_ = nullptr;
  Device* gpu_ = nullptr;
};

TEST_F(FakeCudaDevice, ReportsTheDevicesOwnLimits) {
  EXPECT_EQ(gpu_->id(), "cuda:0");
  EXPECT_NE(gpu_->name().find("Fake CUDA device 0"), std::string::npos) << gpu_->name();
  DeviceLimits l = gpu_->limits();
  EXPECT_EQ(l.compute_capability, 86);
  EXPECT_EQ(l.fast_memory_bytes, 48 << 10);
  EXPECT_EQ(l.max_threads_per_block, 1024);
  EXPECT_EQ(l.compute_units, 132);
  EXPECT_EQ(static_cast<CudaDevice*>(gpu_)->ptx_architecture().value(), "compute_86");
}

TEST_F(FakeCudaDevice, BuildsPtxForTheDevicesComputeCapabilityOnce) {
  const size_t before = log_->modules.size();
  std::shared_ptr<KernelModule> m = build_scale(gpu_);
  ASSERT_NE(m, nullptr);
  ASSERT_EQ(log_->modules.size(), before + 1);
  const fake_cuda::Module& loaded = log_->modules.back();
  EXPECT_EQ(loaded.target, "sm_86");  // compute_86 PTX: the device's, not a compute_80 default
  ASSERT_TRUE(loaded.entries.count("tessel_scale"));
  EXPECT_EQ(loaded.entries.at("tessel_scale").params.size(), 6u);
  EXPECT_EQ(loaded.entries.at("tessel_scale").max_threads, 256);
  // The same image again is the cached module: no second load.
  EXPECT_EQ(build_scale(gpu_), m);
  EXPECT_EQ(log_->modules.size(), before + 1);
  // A compile error is the compiler's log with the kernel's name.
  auto broken =
      gpu_->build({"broken", "tessel_broken",
                   "extern \"C\" __global__ void tessel_broken() { undefined_name; }", ""});
  ASSERT_FALSE(broken.ok());
  EXPECT_EQ(broken.status().code(), Code::kInvalidArgument);
  EXPECT_NE(broken.status().message().find("broken"), std::string::npos);
  EXPECT_NE(broken.status().message().find("undefined_name"), std::string::npos);
}

TEST_F(FakeCudaDevice, LaunchPacksBufferOffsetsAndScalarsOnTheDeviceStream) {
  std::shared_ptr<KernelModule> m = build_scale(gpu_);
  ASSERT_NE(m, nullptr);
  DeviceBuffer y = gpu_->allocator().allocate(4096).value();
  DeviceBuffer x = gpu_->allocator().allocate(1024).value();
  const size_t launches = log_->launches.size();
  Status s = gpu_->launch(*m, {{3, 1, 1}, 256},
                          {KernelArgument::memory(y, 512), KernelArgument::scalar<int64_t>(7),
                           KernelArgument::memory(x), KernelArgument::scalar<int32_t>(600),
                           KernelArgument::scalar(2.5f), KernelArgument::scalar<int64_t>(-3)});
  ASSERT_TRUE(s.ok()) << s.to_string();
  ASSERT_EQ(log_->launches.size(), launches + 1);
  const fake_cuda::Launch& l = log_->launches.back();
  EXPECT_EQ(l.kernel, "tessel_scale");
  EXPECT_TRUE(l.packed);
  EXPECT_EQ(l.grid[0], 3u);
  EXPECT_EQ(l.block[0], 256u);
  EXPECT_NE(l.stream, nullptr) << "launched on the legacy stream 0";
  ASSERT_EQ(l.args.size(), 6u);
  auto u64 = [&](int i) {
    uint64_t v = 0;
    std::memcpy(&v, l.args[static_cast<size_t>(i)].data(), 8);
    return v;
  };
  // Buffer + byte offset is the device address of that byte, inside the allocation.
  EXPECT_EQ(u64(0), cuda_address(y, 512));
  EXPECT_EQ(l.bytes_to_end[0], 4096 - 512);
  EXPECT_EQ(u64(1), 7u);
  EXPECT_EQ(u64(2), cuda_address(x));
  EXPECT_EQ(l.bytes_to_end[2], 1024);
  int32_t n = 0;
  float alpha = 0;
  ASSERT_EQ(l.args[3].size(), 4u);
  std::memcpy(&n, l.args[3].data(), 4);
  std::memcpy(&alpha, l.args[4].data(), 4);
  EXPECT_EQ(n, 600);
  EXPECT_EQ(alpha, 2.5f);
  EXPECT_EQ(static_cast<int64_t>(u64(5)), -3);
  ASSERT_TRUE(gpu_->synchronize().ok());
  EXPECT_EQ(log_->default_stream_uses, 0);
  gpu_->allocator().release(x);
  gpu_->allocator().release(y);
}

TEST_F(FakeCudaDevice, CopiesGoToTheDeviceStreamAndRoundTrip) {
  DeviceBuffer a = gpu_->allocator().allocate(3000).value();
  DeviceBuffer b = gpu_->allocator().allocate(3000).value();
  std::vector<unsigned char> pattern(2000), back(3000, 1), zeros(3000, 0);
  for (size_t i = 0; i < pattern.size(); ++i)
    pattern[i] = static_cast<unsigned char>(i * 7 + 3);
  ASSERT_TRUE(gpu_->copy_from_host(b, 0, zeros.data(), 3000).ok());
  ASSERT_TRUE(gpu_->copy_from_host(a, 100, pattern.data(), 2000).ok());
  ASSERT_TRUE(gpu_->copy_on_device(b, 500, a, 150, 1000).ok());
  ASSERT_TRUE(gpu_->copy_to_host(back.data(), b, 0, 3000).ok());
  for (size_t i = 0; i < back.size(); ++i)
    ASSERT_EQ(back[i], (i >= 500 && i < 1500) ? pattern[i - 500 + 50] : 0) << "byte " << i;
  EXPECT_GE(log_->copies, 4);
  EXPECT_EQ(log_->default_stream_uses, 0);
  gpu_->allocator().release(a);
  gpu_->allocator().release(b);
}

TEST_F(FakeCudaDevice, EveryThreadGetsTheContextOfTheDeviceItUses) {
  Device* second = get_device("cuda:1").value();
  std::shared_ptr<KernelModule> m0 = build_scale(gpu_), m1 = build_scale(second);
  ASSERT_TRUE(m0 && m1);
  DeviceBuffer y0 = gpu_->allocator().allocate(1024).value();
  DeviceBuffer y1 = second->allocator().allocate(1024).value();
  auto args = [](DeviceBuffer y) {
    return std::vector<KernelArgument>{
        KernelArgument::memory(y),    KernelArgument::scalar<int64_t>(0),
        KernelArgument::memory(y),    KernelArgument::scalar<int32_t>(256),
        KernelArgument::scalar(1.0f), KernelArgument::scalar<int64_t>(0)};
  };
  const size_t first = log_->launches.size();
  // Fresh threads have no current context; each alternates between the two devices.
  std::vector<std::thread> threads;
  std::vector<Status> results(4);
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 3; ++i) {
        Status s = (i + t) % 2 == 0 ? gpu_->launch(*m0, {{1, 1, 1}, 256}, args(y0))
                                    : second->launch(*m1, {{1, 1, 1}, 256}, args(y1));
        if (!s.ok()) results[static_cast<size_t>(t)] = s;
      }
    });
  for (std::thread& t : threads)
    t.join();
  for (const Status& s : results)
    EXPECT_TRUE(s.ok()) << s.to_string();
  ASSERT_EQ(log_->launches.size(), first + 12);
  std::map<const void*, const void*> stream_of_context;
  std::set<std::thread::id> thread_ids;
  for (size_t i = first; i < log_->launches.size(); ++i) {
    const fake_cuda::Launch& l = log_->launches[i];
    thread_ids.insert(l.thread);
    ASSERT_NE(l.stream, nullptr);
    auto [it, inserted] = stream_of_context.emplace(l.context, l.stream);
    EXPECT_EQ(it->second, l.stream) << "one stream per device";
  }
  EXPECT_EQ(stream_of_context.size(), 2u) << "two devices, two contexts";
  EXPECT_EQ(thread_ids.size(), 4u);
  ASSERT_TRUE(gpu_->synchronize().ok() && second->synchronize().ok());
  gpu_->allocator().release(y0);
  second->allocator().release(y1);
}

TEST_F(FakeCudaDevice, EventsOrderOneDevicesStreamAfterAnothers) {
  Device* second = get_device("cuda:1").value();
  const int created = log_->events_created;
  auto event = gpu_->record_event();
  ASSERT_TRUE(event.ok()) << event.status().to_string();
  ASSERT_TRUE(second->wait_event(**event).ok());
  ASSERT_TRUE((*event)->wait().ok());
  EXPECT_EQ(log_->events_created, created + 1);
  const int destroyed = log_->events_destroyed;
  event->reset();
  EXPECT_EQ(log_->events_destroyed, destroyed + 1);
  EXPECT_EQ(log_->default_stream_uses, 0);
}

TEST_F(FakeCudaDevice, GridsPastTheGpuLimitsAreFoldedOrClearErrors) {
  std::shared_ptr<KernelModule> m = build_scale(gpu_);
  ASSERT_NE(m, nullptr);
  const size_t launches = log_->launches.size();
  // 70000 blocks in y: launched as 70000 in x (the renderer's kernels unflatten the block index).
  DeviceBuffer y = gpu_->allocator().allocate(1024).value();
  std::vector<KernelArgument> args = {
      KernelArgument::memory(y),    KernelArgument::scalar<int64_t>(0),
      KernelArgument::memory(y),    KernelArgument::scalar<int32_t>(256),
      KernelArgument::scalar(1.0f), KernelArgument::scalar<int64_t>(0)};
  Status s = gpu_->launch(*m, {{3, 70000, 1}, 256}, args);
  ASSERT_TRUE(s.ok()) << s.to_string();
  ASSERT_EQ(log_->launches.size(), launches + 1);
  EXPECT_EQ(log_->launches.back().grid[0], 210000u);
  EXPECT_EQ(log_->launches.back().grid[1], 1u);
  // More blocks than x (2^31 - 1) times y (65535) hold, and too many threads: refused here.
  s = gpu_->launch(*m, {{2147483647, 65536, 2}, 256}, args);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("more than a CUDA launch can hold"), std::string::npos) << s.message();
  s = gpu_->launch(*m, {{1, 1, 1}, 2048}, args);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_EQ(log_->launches.size(), launches + 1) << "nothing more reaches the driver";
  gpu_->allocator().release(y);
}

// The fake itself refuses what a driver refuses: without these, the checks above prove nothing.
TEST_F(FakeCudaDevice, TheFakeCatchesMisuse) {
  const CudaDriverApi& cu = *cuda_driver_api().value();
  std::thread([&] {
    cuda::CUdeviceptr p = 0;
    EXPECT_NE(cu.cuMemAlloc(&p, 64), cuda::kCudaSuccess);  // no current context on this thread
  }).join();
  ASSERT_EQ(log_->violations.size(), 1u);
  EXPECT_NE(log_->violations[0].find("no current context"), std::string::npos);
  log_->violations.clear();
  // PTX for a newer GPU than the device fails to load, as on a driver.
  auto ctx = static_cast<CudaDevice*>(gpu_)->context();
  auto newer = CudaModule::load_ptx(
      ctx, ".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry k()\n{\nret;\n}\n", "k");
  ASSERT_FALSE(newer.ok());
  EXPECT_NE(newer.status().message().find("higher than the device"), std::string::npos)
      << newer.status().message();
}

// The child of ModulesStreamsAndContextsAreReleasedAtExit: builds and launches, then exits.
TEST_F(FakeCudaDevice, ChildBuildsLaunchesAndExits) {
  if (!std::getenv("TESSEL_FAKE_CUDA_REPORT")) GTEST_SKIP() << "run by the exit test";
  std::shared_ptr<KernelModule> m = build_scale(gpu_);
  ASSERT_NE(m, nullptr);
  DeviceBuffer y = gpu_->allocator().allocate(1024).value();
  ASSERT_TRUE(gpu_->launch(*m, {{1, 1, 1}, 256},
                           {KernelArgument::memory(y), KernelArgument::scalar<int64_t>(0),
                            KernelArgument::memory(y), KernelArgument::scalar<int32_t>(256),
                            KernelArgument::scalar(1.0f), KernelArgument::scalar<int64_t>(0)})
                  .ok());
  ASSERT_TRUE(get_device("cuda:1").ok());
  gpu_->allocator().release(y);
}

TEST_F(FakeCudaDevice, ModulesStreamsAndContextsAreReleasedAtExit) {
  const std::string report = ::testing::TempDir() + "tessel_fake_cuda_report.txt";
  std::remove(report.c_str());
  char self[4096] = {};
  ASSERT_GT(::readlink("/proc/self/exe", self, sizeof self - 1), 0);
  pid_t pid = ::fork();
  if (pid == 0) {
    setenv("TESSEL_FAKE_CUDA_REPORT", report.c_str(), 1);
    ::execl(self, self, "--gtest_filter=FakeCudaDevice.ChildBuildsLaunchesAndExits",
            static_cast<char*>(nullptr));
    ::_exit(127);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
  std::ifstream in(report);
  ASSERT_TRUE(in) << "the fake wrote no report to " << report;
  std::map<std::string, long> n;
  std::string key;
  std::ostringstream violations;
  for (long value; in >> key;) {
    if (key == "violation") {
      std::string line;
      std::getline(in, line);
      violations << line << "\n";
    } else if (in >> value) {
      n[key] = value;
    }
  }
  EXPECT_EQ(n["violations"], 0) << violations.str();
  EXPECT_EQ(n["launches"], 1);
  EXPECT_EQ(n["modules_loaded"], 1);
  EXPECT_EQ(n["modules_unloaded"], 1) << "the module outlived the process's CUDA devices";
  EXPECT_EQ(n["streams_created"], 2);  // one per device
  EXPECT_EQ(n["streams_destroyed"], 2);
  EXPECT_EQ(n["primary_retains"], 2);
  EXPECT_EQ(n["primary_releases"], 2);
  EXPECT_EQ(n["live_bytes"], 0) << "the allocator's cache was not emptied";
}

}  // namespace
}  // namespace tessel
