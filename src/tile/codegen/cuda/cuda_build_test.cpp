// Every specialisation the op library launches on a GPU (kernels/gpu.txt) built for CUDA without
// a GPU: lowered, rendered, compiled to PTX by NVRTC and assembled by ptxas (the CUDA toolkit's,
// found through CUDA_HOME / PATH) for sm_80 (A100) and sm_90 (H100, H200), which is what a
// driver does with the PTX on those GPUs. Each kernel must assemble, fit its launch bounds
// (spilling no more than a few words), and keep its static shared memory within the 48 KiB a
// block gets without opting in. Skipped, saying which, where NVRTC or ptxas is absent. Also: the
// list names every kernel of kernels/*.tile, and ptxas -v output is read right.
#include "tile/codegen/cuda/cuda_build.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <set>
#include <thread>

#include "hw/cuda_api.h"
#include "hw/cuda_ptxas.h"
#include "tile/parse/specialisations.h"
#include "tile/run/test_util.h"

namespace tessel::tile {
namespace {

std::string gpu_list() {
  return testing::kernels_dir() + "/gpu.txt";
}

TEST(CudaBuild, EveryGpuSpecialisationAssemblesForSm80AndSm90) {
  Expected<const NvrtcApi*> rtc = nvrtc_api();
  if (!rtc.ok()) GTEST_SKIP() << "NVRTC is not installed: " << rtc.status().message();
  Expected<std::string> ptxas = find_ptxas();
  if (!ptxas.ok()) GTEST_SKIP() << ptxas.status().message();
  auto list = read_specialisations(gpu_list());
  ASSERT_TRUE(list.ok()) << list.status().to_string();
  auto kernels = parse_kernel_folder(testing::kernels_dir());
  ASSERT_TRUE(kernels.ok()) << kernels.status().to_string();
  const auto start = std::chrono::steady_clock::now();
  // Built on every core (NVRTC and ptxas take most of the time), checked here.
  struct Built {
    std::string what;
    Status status;
    std::string entry, source;
    std::vector<KernelResources> resources;  // sm_80, then sm_90
  };
  std::vector<Built> built(list->size());
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i; (i = next++) < list->size();) {
      const Specialisation& s = (*list)[i];
      Built& out = built[i];
      out.what =
          fmt::format("{}:{}: {}", gpu_list(), s.line, specialisation_string(s.kernel, s.params));
      auto kernel = kernels->find(s.kernel);
      if (kernel == kernels->end()) {
        out.status = not_found("no kernel '{}'", s.kernel);
        continue;
      }
      // PTX for the oldest architecture, assembled for both: what a driver does with it.
      Expected<CudaBuild> b = build_cuda(kernel->second, s.params, Target::cuda(), "compute_80");
      if (!b.ok()) {
        out.status = b.status();
        continue;
      }
      out.entry = b->entry;
      out.source = b->source;
      for (const char* arch : {"sm_80", "sm_90"}) {
        auto r = assemble_ptx(*ptxas, b->ptx, arch, out.what);
        if (!r.ok()) {
          out.status = r.status();
          break;
        }
        out.resources.insert(out.resources.end(), r->begin(), r->end());
      }
    }
  };
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < std::max(1u, std::thread::hardware_concurrency()); ++t)
    threads.emplace_back(work);
  for (std::thread& t : threads)
    t.join();

  int assembled = 0, most_registers = 0;
  std::string spilling;
  int64_t most_shared = 0;
  for (const Built& b : built) {
    SCOPED_TRACE(b.what);
    ASSERT_TRUE(b.status.ok()) << b.status.to_string() << "\n" << b.source;
    ASSERT_EQ(b.resources.size(), 2u);
    for (const KernelResources& r : b.resources) {
      EXPECT_EQ(r.kernel, b.entry);
      // __launch_bounds__(threads): ptxas keeps registers x threads within the 64 K register file.
      EXPECT_GT(r.registers, 0);
      EXPECT_LE(r.registers * Target::cuda().threads_per_block, 65536) << r.arch;
      // A 64-bit integer division by a run-time value (col2im's z / C) is a subroutine call, and
      // ptxas spills a word or two around it; anything more is a kernel that does not fit.
      EXPECT_LE(r.spill_store_bytes, 16) << r.arch << ": registers spill to local memory";
      if (r.spill_store_bytes > 0)
        spilling += fmt::format(" {} on {} ({} B);", b.what, r.arch, r.spill_store_bytes);
      EXPECT_LE(r.shared_bytes, Target::cuda().fast_memory_bytes) << r.arch;
      most_registers = std::max(most_registers, r.registers);
      most_shared = std::max(most_shared, r.shared_bytes);
      ++assembled;
    }
    EXPECT_EQ(b.resources[0].arch, "sm_80");
    EXPECT_EQ(b.resources[1].arch, "sm_90");
  }
  EXPECT_EQ(assembled, 2 * static_cast<int>(list->size()));
  fmt::print(
      "ptxas: {} specialisations x sm_80, sm_90 in {:.1f} s; at most {} registers and {} "
      "bytes of shared memory per block ({}); small spills:{}\n",
      list->size(), std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
      most_registers, most_shared, *ptxas, spilling.empty() ? " none" : spilling);
}

TEST(CudaBuild, GpuListNamesEveryKernel) {
  auto list = read_specialisations(gpu_list());
  ASSERT_TRUE(list.ok()) << list.status().to_string();
  auto kernels = parse_kernel_folder(testing::kernels_dir());
  ASSERT_TRUE(kernels.ok()) << kernels.status().to_string();
  std::set<std::string> listed;
  for (const Specialisation& s : *list) {
    EXPECT_TRUE(kernels->count(s.kernel))
        << gpu_list() << ":" << s.line << ": no kernel " << s.kernel;
    listed.insert(s.kernel);
  }
  for (const auto& [name, kernel] : *kernels)
    EXPECT_TRUE(listed.count(name))
        << name << " (" << *kernel.loc.file << ") has no line in kernels/gpu.txt";
}

TEST(CudaBuild, ArchitecturesMapToTheirVirtualOnes) {
  EXPECT_EQ(virtual_arch_of("sm_90").value(), "compute_90");
  EXPECT_EQ(virtual_arch_of("sm_90a").value(), "compute_90a");
  EXPECT_EQ(virtual_arch_of("compute_75").value(), "compute_75");
  Expected<std::string> bad = virtual_arch_of("hopper");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("'hopper'"), std::string::npos);
}

// Output of ptxas 13.0 -v: sm_80 reports cmem[0], sm_90 does not.
TEST(CudaPtxas, ReadsRegistersSpillsAndSharedMemory) {
  const char* log =
      "ptxas info    : 0 bytes gmem\n"
      "ptxas info    : Compiling entry function 'tessel_gemm' for 'sm_80'\n"
      "ptxas info    : Function properties for tessel_gemm\n"
      "    16 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads\n"
      "ptxas info    : Used 48 registers, used 1 barriers, 16 bytes cumulative stack size, "
      "8192 bytes smem, 380 bytes cmem[0]\n"
      "ptxas info    : Compile time = 100.981 ms\n"
      "ptxas info    : Compiling entry function 'k2' for 'sm_90'\n"
      "ptxas info    : Function properties for k2\n"
      "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
      "ptxas info    : Used 25 registers, used 0 barriers\n";
  std::vector<KernelResources> k = parse_ptxas_verbose(log);
  ASSERT_EQ(k.size(), 2u);
  EXPECT_EQ(k[0].kernel, "tessel_gemm");
  EXPECT_EQ(k[0].arch, "sm_80");
  EXPECT_EQ(k[0].registers, 48);
  EXPECT_EQ(k[0].barriers, 1);
  EXPECT_EQ(k[0].stack_frame_bytes, 16);
  EXPECT_EQ(k[0].spill_store_bytes, 8);
  EXPECT_EQ(k[0].spill_load_bytes, 12);
  EXPECT_EQ(k[0].shared_bytes, 8192);
  EXPECT_EQ(k[0].constant_bytes, 380);
  EXPECT_EQ(k[1].kernel, "k2");
  EXPECT_EQ(k[1].registers, 25);
  EXPECT_EQ(k[1].shared_bytes, 0);
  EXPECT_EQ(k[1].spill_store_bytes, 0);
}

TEST(CudaPtxas, RejectedPtxCarriesPtxasMessages) {
  Expected<std::string> ptxas = find_ptxas();
  if (!ptxas.ok()) GTEST_SKIP() << ptxas.status().message();
  auto r = assemble_ptx(*ptxas, ".version 8.0\n.target sm_80\n.address_size 64\nnot ptx\n", "sm_80",
                        "broken.ptx");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_NE(r.status().message().find("broken.ptx"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("syntax error"), std::string::npos) << r.status().message();
}

}  // namespace
}  // namespace tessel::tile
