// One ISA variant of the reference gemm: included by exactly one reference_gemm_<isa>.cpp, which
// is compiled with that ISA's flags, so everything here (and in the templates) is instantiated
// inside the variant's own inline namespace (see tile_gemm.h). Internal to reference_gemm.cpp.
#pragma once

#include "tile/codegen/cpu/templates/reference_block_loop.h"
#include "tile/codegen/cpu/templates/reference_gemm.h"

namespace tessel::tile {

struct ReferenceGemmVariant {
  const char* isa;
  void* (*new_workspaces)();
  void (*delete_workspaces)(void* workspaces);
  bool (*run)(void* workspaces, const ReferenceGemmCall& call);  // false: out of memory
  GemmTiles (*default_tiles)(bool bf16);
};

}  // namespace tessel::tile

namespace tessel_cpu {
inline namespace TESSEL_CPU_ISA_NAMESPACE {

struct ReferenceWorkspaces {
  BlockLoopWorkspace<float> f32_kernel;
  BlockLoopWorkspace<bf16> bf16_kernel;
};

template <typename TSrc, typename TPack>
bool run_reference(BlockLoopWorkspace<TPack>& ws, const tessel::tile::ReferenceGemmCall& call) {
  BlockLoopArgs args;
  args.m = call.m;
  args.n = call.n;
  args.k = call.k;
  args.a = call.a;
  args.a_row_stride = call.a_row_stride;
  args.a_col_stride = call.a_col_stride;
  args.b = call.b;
  args.b_row_stride = call.b_row_stride;
  args.b_col_stride = call.b_col_stride;
  args.c = call.c;
  args.ldc = call.ldc;
  args.bm = call.bm > 0 ? call.bm : DefaultTiles<TPack>::kBM;
  args.bn = call.bn > 0 ? call.bn : DefaultTiles<TPack>::kBN;
  args.bk = call.bk > 0 ? call.bk : DefaultTiles<TPack>::kBK;
  args.share_tiles = call.share_tiles;
  args.padded_tiles = call.padded_tiles;
  return reference_block_loop<TSrc, TPack>(args, call.threads, ws);
}

inline bool run_reference_call(void* workspaces, const tessel::tile::ReferenceGemmCall& call) {
  using tessel::tile::GemmInput;
  auto& ws = *static_cast<ReferenceWorkspaces*>(workspaces);
  switch (call.input) {
    case GemmInput::kF32:
      return call.bf16_compute ? run_reference<float, bf16>(ws.bf16_kernel, call)
                               : run_reference<float, float>(ws.f32_kernel, call);
    case GemmInput::kF16:
      return call.bf16_compute ? run_reference<f16, bf16>(ws.bf16_kernel, call)
                               : run_reference<f16, float>(ws.f32_kernel, call);
    case GemmInput::kBf16:
      return run_reference<bf16, bf16>(ws.bf16_kernel, call);
  }
  return false;
}

// constexpr: the variable it initialises must be constant-initialised, since code that runs at
// load time in a file built with AVX-512 flags would fault on a CPU without AVX-512.
constexpr tessel::tile::ReferenceGemmVariant make_reference_gemm_variant() {
  return {
      kIsaName,
      [] { return static_cast<void*>(new ReferenceWorkspaces); },
      [](void* workspaces) { delete static_cast<ReferenceWorkspaces*>(workspaces); },
      run_reference_call,
      [](bool bf16_kernel) {
        return bf16_kernel
                   ? tessel::tile::GemmTiles{DefaultTiles<bf16>::kBM, DefaultTiles<bf16>::kBN,
                                             DefaultTiles<bf16>::kBK}
                   : tessel::tile::GemmTiles{DefaultTiles<float>::kBM, DefaultTiles<float>::kBN,
                                             DefaultTiles<float>::kBK};
      },
  };
}

}  // namespace TESSEL_CPU_ISA_NAMESPACE
}  // namespace tessel_cpu
