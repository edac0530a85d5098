// Every specialisation the op library launches on a GPU (kernels/gpu.txt) built for CUDA without
// a GPU: lowered, rendered, compiled to PTX by NVRTC and assembled by ptxas (the CUDA toolkit's,
// found through CUDA_HOME / PATH) for sm_80 (A100) and sm_90 (H100, H200), which is what a
// driver does with the PTX on those GPUs. Each kernel must assemble, fit its launch bounds
// without spilling, and keep its static shared memory within the 48 KiB a block gets without
// opting in. Skipped, saying which, where NVRTC or ptxas is absent. Also: the list names every
// kernel of kernels/*.tile, and ptxas -v output is read right.
#include "tile/codegen/cuda/cuda_build.h"

#include <gtest/gtest.h>

#include <chrono>
#include <set>

#include "hw/cuda_api.h"
#include "hw/cuda_ptxas.h"
#include "support/log.h"
#include "tile/parse/specialisations.h"
#include "tile/run/test_util.h"

namespace tessel::tile {
namespace {

std::string gpu_list() { return testing::kernels_dir() + "/gpu.txt"; }

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
  int assembled = 0, most_registers = 0;
  int64_t most_shared = 0;
  for (const Specialisation& s : *list) {
    const std::string what = specialisation_string(s.kernel, s.params);
    SCOPED_TRACE(fmt::format("{}:{}: {}", gpu_list(), s.line, what));
    auto kernel = kernels->find(s.kernel);
    ASSERT_NE(kernel, kernels->end()) << "no such kernel";
    // PTX for the oldest architecture, assembled for both: what a driver does with it.
    Expected<CudaBuild> b = build_cuda(kernel->second, s.params, Target::cuda(), "compute_80");
    ASSERT_TRUE(b.ok()) << b.status().to_string();
    for (const char* arch : {"sm_80", "sm_90"}) {
      auto resources = assemble_ptx(*ptxas, b->ptx, arch, what);
      ASSERT_TRUE(resources.ok()) << resources.status().to_string() << "\n" << b->source;
      ASSERT_EQ(resources->size(), 1u);
      const KernelResources& r = resources->front();
      EXPECT_EQ(r.kernel, b->entry);
      EXPECT_EQ(r.arch, arch);
      // __launch_bounds__(threads): ptxas keeps registers x threads within the 64 K register file.
      EXPECT_GT(r.registers, 0);
      EXPECT_LE(r.registers * Target::cuda().threads_per_block, 65536) << arch;
      EXPECT_EQ(r.spill_store_bytes, 0) << arch << ": registers spill to local memory";
      EXPECT_LE(r.shared_bytes, Target::cuda().fast_memory_bytes) << arch;
      most_registers = std::max(most_registers, r.registers);
      most_shared = std::max(most_shared, r.shared_bytes);
      ++assembled;
    }
  }
  EXPECT_EQ(assembled, 2 * static_cast<int>(list->size()));
  log_info("ptxas: {} specialisations x sm_80, sm_90 in {:.1f} s; at most {} registers and {} "
           "bytes of shared memory per block ({})",
           list->size(),
           std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
           most_registers, most_shared, *ptxas);
}

TEST(CudaBuild, GpuListNamesEveryKernel) {
  auto list = read_specialisations(gpu_list());
  ASSERT_TRUE(list.ok()) << list.status().to_string();
  auto kernels = parse_kernel_folder(testing::kernels_dir());
  ASSERT_TRUE(kernels.ok()) << kernels.status().to_string();
  std::set<std::string> listed;
  for (const Specialisation& s : *list) {
    EXPECT_TRUE(kernels->count(s.kernel)) << gpu_list() << ":" << s.line << ": no kernel "
                                          << s.kernel;
    listed.insert(s.kernel);
  }
  for (const auto& [name, kernel] : *kernels)
    EXPECT_TRUE(listed.count(name)) << name << " (" << *kernel.loc.file
                                    << ") has no line in kernels/gpu.txt";
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
  auto r = assemble_ptx(*ptxas, ".version 8.0\n.target sm_80\n.address_size 64\nnot ptx\n",
                        "sm_80", "broken.ptx");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_NE(r.status().message().find("broken.ptx"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("syntax error"), std::string::npos) << r.status().message();
}

}  // namespace
}  // namespace tessel::tile
