// Whole training steps on a CUDA device over the recording fake driver
// (runtime/cuda/testing/fake_cuda_driver.h), on a machine without a GPU: every launch of a GPT
// step (gpt_tiny: nn/gpt.h, V65 T64 L4 H4 C128), of the small CNN and of ResNet-18 (convolution,
// pooling, batch norm), forward, loss, backward and AdamW, read back against the kernel's argument
// list (tile/codegen/abi.h). Checked per launch: the context current on the launching thread is
// the module's, the stream is the device's own (never stream 0), the packed parameters have the
// sizes the PTX declares, and every tensor argument (pointer, element offset, strides, sizes)
// lies inside its allocation. Also: every kernel built is a specialisation kernels/gpu.txt lists
// (so the ptxas test covers it). Kernels do not run on the fake, so no value is checked here:
// the losses are whatever zeroed memory gives. scripts/gpu_check.sh runs the values on a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>

#include "ops/device_kernel.h"
#include "ops/kernel_cache.h"
#include "runtime/cuda/cuda_device.h"
#include "runtime/cuda/testing/fake_cuda_env.h"
#include "tile/codegen/abi.h"
#include "tile/codegen/cuda/cuda_renderer.h"
#include "tile/parse/parser.h"
#include "tile/parse/specialisations.h"
#include "tile/pipeline.h"
#include "tile/run/bind.h"
#include "train/workloads.h"

namespace tessel {
namespace {

std::string source_dir() {
  const char* d = std::getenv("TESSEL_SOURCE_DIR");
  return d ? d : ".";
}

// Every specialisation of kernels/gpu.txt lowered for `target`, by its rendered CUDA source (from
// the kernel text the op library embeds, under the names it gives the files).
struct Listed {
  std::string line;  // "gemm BK=8 BM=32 BN=32 T=f32"
  tile::Kernel lowered;
};
std::map<std::string, Listed> listed_by_source(const tile::Target& target) {
  std::map<std::string, Listed> by_source;
  auto list = tile::read_specialisations(source_dir() + "/kernels/gpu.txt");
  EXPECT_TRUE(list.ok()) << list.status().to_string();
  if (!list.ok()) return by_source;
  std::map<std::string, tile::Kernel> kernels;
  for (const auto& [file, text] : ops::embedded_kernel_files()) {
    Expected<std::vector<tile::Kernel>> parsed = tile::parse_tile(text, "kernels/" + file);
    EXPECT_TRUE(parsed.ok()) << parsed.status().to_string();
    if (!parsed.ok()) continue;
    for (tile::Kernel& k : *parsed) {
      std::string name = k.name;
      kernels.emplace(std::move(name), std::move(k));
    }
  }
  for (const tile::Specialisation& s : *list) {
    auto k = kernels.find(s.kernel);
    if (k == kernels.end()) continue;
    tile::CompileOptions o;
    o.target = target;
    o.params = s.params;
    auto lowered = tile::compile_ir(k->second, o);
    if (!lowered.ok()) continue;  // the ptxas test reports it
    by_source[tile::render_cuda(*lowered, target)] = {
        tile::specialisation_string(s.kernel, s.params), *lowered};
  }
  return by_source;
}

int64_t read_i64(const std::vector<uint8_t>& bytes) {
  int64_t v = 0;
  std::memcpy(&v, bytes.data(), std::min<size_t>(8, bytes.size()));
  return v;
}

// Checks one launch against the lowered kernel it runs; returns the problems found.
std::vector<std::string> check_arguments(const fake_cuda::Launch& l, const tile::Kernel& k) {
  std::vector<std::string> problems;
  const std::vector<tile::ArgSlot> slots = tile::kernel_slots(k);
  if (l.args.size() != slots.size())
    return {
        fmt::format("{} parameters in the PTX, {} in the kernel ABI", l.args.size(), slots.size())};
  std::map<std::string, int64_t> sizes;  // run-time sizes by name (M, N, K)
  for (size_t i = 0; i < slots.size(); ++i) {
    const tile::ArgSlot& s = slots[i];
    // f32 and i32 scalars are 4 bytes, everything else 8 (pointers, offsets, strides, sizes).
    const bool narrow =
        s.kind == tile::ArgSlot::Kind::kScalar && (s.type == tile::DType(tile::ScalarType::kF32) ||
                                                   s.type == tile::DType(tile::ScalarType::kI32));
    const size_t want = narrow ? 4 : 8;
    if (l.args[i].size() != want)
      problems.push_back(fmt::format("parameter {} ({}) is {} bytes, the ABI passes {}", i, s.name,
                                     l.args[i].size(), want));
    if (s.kind == tile::ArgSlot::Kind::kSize) sizes[s.name] = read_i64(l.args[i]);
  }
  if (!problems.empty()) return problems;
  for (size_t i = 0; i < slots.size(); ++i) {
    const tile::ArgSlot& s = slots[i];
    if (s.kind != tile::ArgSlot::Kind::kData) continue;
    const uint64_t address = static_cast<uint64_t>(read_i64(l.args[i]));
    if (address == 0) continue;  // an argument this specialisation does not use
    if (!fake_cuda::is_device_address(address)) {
      problems.push_back(fmt::format("{} is not a device address: {:#x}", s.name, address));
      continue;
    }
    // The elements the tensor spans from its first: offset + sum((dim - 1) * stride) + 1.
    const tile::KernelArg& arg = k.args[static_cast<size_t>(s.arg)];
    int64_t last = read_i64(l.args[i + 1]);  // the offset slot follows the data slot
    bool empty = false;
    for (size_t d = 0; d < arg.tensor->shape.size(); ++d) {
      auto dim = tile::eval_int(arg.tensor->shape[d], sizes);
      if (!dim.ok()) {
        problems.push_back(fmt::format("{}: dimension {}: {}", s.name, d, dim.status().message()));
        break;
      }
      if (*dim == 0) empty = true;
      last += (*dim - 1) * read_i64(l.args[i + 2 + d]);
    }
    if (empty) continue;
    const int64_t need = (last + 1) * s.type.bytes();
    if (l.bytes_to_end[i] < need)
      problems.push_back(fmt::format("{} spans {} bytes from its address, the allocation has {}",
                                     s.name, need, l.bytes_to_end[i]));
  }
  return problems;
}

// The check above finds a tensor that runs past its allocation, and passes one that ends on it.
TEST(FakeCudaArgumentCheck, ATensorPastItsAllocationIsReported) {
  auto parsed = tile::parse_kernel("kernel k(x: f32[N]) { grid (N) as (b) { } }", "k.tile");
  ASSERT_TRUE(parsed.ok()) << parsed.status().to_string();
  tile::CompileOptions o;
  o.target = tile::Target::cuda();
  auto lowered = tile::compile_ir(*parsed, o);
  ASSERT_TRUE(lowered.ok()) << lowered.status().to_string();
  auto bytes = [](int64_t v) {
    std::vector<uint8_t> b(8);
    std::memcpy(b.data(), &v, 8);
    return b;
  };
  fake_cuda::Launch l;  // x at element offset 2, stride 1, N = 10: 12 floats, 48 bytes
  l.args = {bytes(static_cast<int64_t>(fake_cuda::kAddressTag | 0x1000)), bytes(2), bytes(1),
            bytes(10)};
  l.bytes_to_end = {48, -1, -1, -1};
  EXPECT_TRUE(check_arguments(l, *lowered).empty());
  l.bytes_to_end[0] = 44;
  std::vector<std::string> problems = check_arguments(l, *lowered);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].find("spans 48 bytes"), std::string::npos) << problems[0];
  l.args[3].resize(4);  // a 4-byte N where the ABI passes 8
  EXPECT_FALSE(check_arguments(l, *lowered).empty());
}

class FakeCudaTraining : public ::testing::TestWithParam<std::string> {};

TEST_P(FakeCudaTraining, StepLaunchesLandInsideTheirBuffersOnTheDeviceStream) {
  fake_cuda::Log* log = fake_cuda::use_fake_driver(1, "9.0");
  ASSERT_NE(log, nullptr) << "cannot load the fake driver " << TESSEL_FAKE_CUDA;
  if (!nvrtc_api().ok()) GTEST_SKIP() << "NVRTC is not installed: kernels cannot be built";
  Device* gpu = get_device("cuda:0").value();
  const size_t first_launch = log->launches.size();
  auto run = train::WorkloadRun::create(GetParam(), gpu, 1);
  ASSERT_TRUE(run.ok()) << run.status().to_string();
  for (int step = 0; step < 2; ++step) {
    Status s = (*run)->step();
    ASSERT_TRUE(s.ok()) << "step " << step << ": " << s.to_string();
  }
  ASSERT_TRUE(gpu->synchronize().ok());
  if (!log->violations.empty())
    ADD_FAILURE() << log->violations.size()
                  << " violations, the first: " << log->violations.front();
  EXPECT_EQ(log->default_stream_uses, 0);

  const std::vector<KernelImage> images = static_cast<CudaDevice*>(gpu)->built_images();
  ASSERT_EQ(images.size(), log->modules.size()) << "every module this process loaded is cuda:0's";
  const auto listed = listed_by_source(ops::device_target(*gpu));
  std::set<int> unlisted_reported;
  std::set<const void*> streams, contexts;
  int checked = 0;
  for (size_t i = first_launch; i < log->launches.size(); ++i) {
    const fake_cuda::Launch& l = log->launches[i];
    streams.insert(l.stream);
    contexts.insert(l.context);
    EXPECT_EQ(log->modules[static_cast<size_t>(l.module - 1)].context, l.context);
    const KernelImage& image = images[static_cast<size_t>(l.module - 1)];
    auto spec = listed.find(image.code);
    if (spec == listed.end()) {
      if (unlisted_reported.insert(l.module).second)
        ADD_FAILURE() << "kernel '" << image.name
                      << "' was built from a specialisation kernels/gpu.txt does not list";
      continue;
    }
    for (const std::string& p : check_arguments(l, spec->second.lowered))
      ADD_FAILURE() << "launch " << i - first_launch << " of " << spec->second.line << ": " << p;
    ++checked;
  }
  EXPECT_EQ(streams.size(), 1u) << "one stream for the device";
  EXPECT_EQ(contexts.size(), 1u);
  EXPECT_GT(checked, 20) << "a training step is dozens of launches";
  std::printf("%s: %zu launches of %zu kernels over 2 steps, %d read back against their ABI\n",
              GetParam().c_str(), log->launches.size() - first_launch, images.size(), checked);
}

INSTANTIATE_TEST_SUITE_P(Workloads, FakeCudaTraining,
                         ::testing::Values("gpt_tiny", "cnn", "resnet18"));

}  // namespace
}  // namespace tessel
