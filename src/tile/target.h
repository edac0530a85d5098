// What the compiler needs to know about a target: its kind, how much fast memory a block may
// use, how many threads run a block. Defaults describe a typical device; callers that know the
// real device (hw/ detection, an OpenCL device query) fill in its numbers.
#pragma once

#include <cstdint>
#include <string>

#include "support/status.h"

namespace tessel::tile {

enum class TargetKind { kCpu, kOpenCL, kCuda };

struct Target {
  TargetKind kind = TargetKind::kCpu;
  // CPU: the per-core L2 cache that a block's tiles should stay in. GPU: local/shared memory per
  // work-group/block.
  int64_t fast_memory_bytes = 1 << 20;
  // GPU: threads per block. CPU: 1 (a block is one task of the thread pool).
  int threads_per_block = 1;
  // GPU: how many f32 registers one thread may spend on fragments before the compiler refuses.
  int max_fragment_registers = 128;
  // GPU: the longest run of adjacent columns one thread owns in a block-shaped parallel loop
  // (passes/place_fragments.h). 1 on GPUs, where neighbouring threads read neighbouring words;
  // an OpenCL CPU device (PoCL) compiles each work-item as plain C, vectorising within it, and
  // wants a vector's worth (16 floats with AVX-512).
  int column_run = 1;

  bool is_gpu() const { return kind != TargetKind::kCpu; }
  std::string name() const;

  static Target cpu(int64_t l2_bytes = 1 << 20);
  static Target opencl(int64_t local_bytes = 32 << 10, int threads = 128);
  static Target cuda(int64_t shared_bytes = 48 << 10, int threads = 256);
};

// The fast-memory budget a CPU block's tiles are checked against, for a core with `l2_bytes` of
// L2: the L2, but never less than 1 MiB. On a CPU the tiles live in ordinary memory (allocated per
// pool thread), so a block larger than the L2 runs, only slower; the budget is there to catch
// tiles no CPU should use. The kernels' CPU defaults (gemm: 640 KiB of tiles) were sized for the
// 1 MiB L2 of a Zen 4; a Zen 3 core has 512 KiB, and with the L2 as a hard limit the build's
// ahead-of-time gemm and every JIT gemm failed to compile there.
int64_t cpu_tile_budget(int64_t l2_bytes);

// "cpu" (this machine's L2 cache per core, see cpu_tile_budget), "opencl", "cuda" (typical
// devices' numbers).
Expected<Target> target_from_name(const std::string& name);

}  // namespace tessel::tile
