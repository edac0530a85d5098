// One ISA variant of the reference gemm: included by exactly one reference_gemm_<isa>.cpp, which
// is compiled with that ISA's flags, so everything here (and in the templates) is instantiated
// inside the variant's own inline namespace (see tile_gemm.h). Internal to reference_gemm.cpp.
#pragma once

#include <type_traits>

#include "tile/codegen/cpu/templates/reference_block_loop.h"
#include "tile/codegen/cpu/templates/reference_gemm.h"

namespace tessel::tile {

// Runs body(body_context, t) for every t in [0, threads), concurrently where it can: libtessel's
// thread pool, handed to the variants as a plain function so that none of its code is compiled
// with a variant's flags.
struct ThreadRunner {
  void (*run)(int threads, void (*body)(void* body_context, int thread), void* body_context);
};

struct ReferenceGemmVariant {
  const char* isa;
  void* (*new_workspaces)();
  void (*delete_workspaces)(void* workspaces);
  // false: out of memory
  bool (*run)(void* workspaces, const ReferenceGemmCall& call, ThreadRunner runner);
  GemmTiles (*default_tiles)(bool bf16);
};

}  // namespace tessel::tile

namespace tessel_cpu {
inline namespace TESSEL_CPU_ISA_NAMESPACE {

struct ReferenceWorkspaces {
  BlockLoopWorkspace<float> f32_kernel;
  BlockLoopWorkspace<bf16> bf16_kernel;
};

// The ThreadRunner as the block loop's Runner.
struct PoolRunner {
  tessel::tile::ThreadRunner runner;
  template <typename Body>
  void operator()(int threads, Body&& body) const {
    using B = std::remove_reference_t<Body>;
    runner.run(
        threads, [](void* context, int t) { (*static_cast<B*>(context))(t); },
        const_cast<void*>(static_cast<const void*>(&body)));
  }
};

template <typename TSrc, typename TPack>
bool run_reference(BlockLoopWorkspace<TPack>& ws, const tessel::tile::ReferenceGemmCall& call,
                   tessel::tile::ThreadRunner runner) {
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
  args.read_a_in_place = call.read_a_in_place;
  args.read_b_in_place = call.read_b_in_place;
  return reference_block_loop<TSrc, TPack>(args, call.threads, ws, PoolRunner{runner});
}

inline bool run_reference_call(void* workspaces, const tessel::tile::ReferenceGemmCall& call,
                               tessel::tile::ThreadRunner runner) {
  using tessel::tile::GemmInput;
  auto& ws = *static_cast<ReferenceWorkspaces*>(workspaces);
  switch (call.input) {
    case GemmInput::kF32:
      return call.bf16_compute ? run_reference<float, bf16>(ws.bf16_kernel, call, runner)
                               : run_reference<float, float>(ws.f32_kernel, call, runner);
    case GemmInput::kF16:
      return call.bf16_compute ? run_reference<f16, bf16>(ws.bf16_kernel, call, runner)
                               : run_reference<f16, float>(ws.f32_kernel, call, runner);
    case GemmInput::kBf16:
      return run_reference<bf16, bf16>(ws.bf16_kernel, call, runner);
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
