// The block loop that generated code for the tile `gemm` kernel performs, written out by hand over
// the templates (tile_gemm.h, tile_gemm_schedule.h), for the tests and the benchmark only: the tile
// compiler emits its own. C[M x N] (f32, row-major, leading dimension ldc) = A[M x K] * B[K x N],
// element (i, k) of A at a[i * a_row_stride + k * a_col_stride] and likewise for B, so either
// operand may be transposed.
//
//   BlockLoopWorkspace<TPack> ws;                  // keep it: its memory is reused across calls
//   reference_block_loop<float, float>(args, /*threads=*/2, ws);             // std::threads
//   reference_block_loop<float, float>(args, 2, ws, runner);  // runner(threads, body): a pool
#pragma once

#include <atomic>
#include <cstdlib>
#include <thread>

#include "tile_gemm.h"
#include "tile_gemm_schedule.h"

namespace tessel_cpu {
inline namespace TESSEL_CPU_ISA_NAMESPACE {

struct BlockLoopArgs {
  int64_t m = 0, n = 0, k = 0;
  const void* a = nullptr;  // TSrc elements
  int64_t a_row_stride = 0, a_col_stride = 0;
  const void* b = nullptr;  // TSrc elements
  int64_t b_row_stride = 0, b_col_stride = 0;
  float* c = nullptr;
  int64_t ldc = 0;
  int bm = 0, bn = 0, bk = 0;  // block sizes, e.g. DefaultTiles<TPack>
  // The schedule of tile_gemm_schedule.h: each tile packed once and shared by all blocks.
  // false: the plain contract, every block packing its own tiles.
  bool share_tiles = true;
  // Tiles packed and multiplied at the full BM x BK / BK x BN, zero padded, instead of at the
  // tile's valid size (the two forms of the contract).
  bool padded_tiles = false;
  // A's tiles read in place (gemm_direct_a) where can_read_a_in_place allows, instead of packed.
  bool read_a_in_place = true;
  // B's tiles read in place (gemm_direct_b) where can_read_b_in_place allows and tiles are not
  // shared, instead of packed.
  bool read_b_in_place = true;
};

struct BlockGrid {
  int64_t m, n, k;  // blocks along M, N and K steps
  explicit BlockGrid(const BlockLoopArgs& args)
      : m((args.m + args.bm - 1) / args.bm),
        n((args.n + args.bn - 1) / args.bn),
        k((args.k + args.bk - 1) / args.bk) {}
};

// Memory of one gemm call: packed tiles of A and B (all of them when tiles are shared, one of
// each per thread when not), their states, one accumulator per thread. Grows to the largest call
// seen and is kept, so that repeated calls do not fault pages in again.
template <typename TPack>
class BlockLoopWorkspace {
 public:
  BlockLoopWorkspace() = default;
  BlockLoopWorkspace(const BlockLoopWorkspace&) = delete;
  BlockLoopWorkspace& operator=(const BlockLoopWorkspace&) = delete;
  ~BlockLoopWorkspace() { std::free(memory_); }

  // Lays the workspace out for `args` on `threads` threads; false if memory ran out.
  bool prepare(const BlockLoopArgs& args, int threads) {
    const BlockGrid grid(args);
    a_tiles_ = args.share_tiles ? grid.m * grid.k : threads;
    b_tiles_ = args.share_tiles ? grid.n * grid.k : threads;
    a_tile_elems_ = round_up(packed_a_elems<TPack>(args.bm, args.bk), 64 / int(sizeof(TPack)));
    b_tile_elems_ = round_up(packed_b_elems<TPack>(args.bk, args.bn), 64 / int(sizeof(TPack)));
    acc_elems_ = round_up(int64_t(args.bm) * args.bn, 16);
    state_bytes_ = round_up(a_tiles_ + b_tiles_, 64);
    const int64_t bytes =
        int64_t(sizeof(TPack)) * (a_tiles_ * a_tile_elems_ + b_tiles_ * b_tile_elems_) +
        int64_t(sizeof(float)) * acc_elems_ * threads + state_bytes_;
    if (bytes > capacity_) {
      std::free(memory_);
      memory_ = static_cast<char*>(std::aligned_alloc(64, size_t(round_up(bytes, 64))));
      capacity_ = memory_ ? bytes : 0;
    }
    return memory_ != nullptr;
  }

  TPack* a_tile(int64_t index) { return reinterpret_cast<TPack*>(memory_) + index * a_tile_elems_; }
  TPack* b_tile(int64_t index) { return a_tile(a_tiles_) + index * b_tile_elems_; }
  float* acc(int thread) {
    return reinterpret_cast<float*>(b_tile(b_tiles_)) + thread * acc_elems_;
  }
  uint8_t* states() { return reinterpret_cast<uint8_t*>(memory_ + capacity_ - state_bytes_); }
  PackedTiles<TPack> shared_a() { return {a_tile(0), states(), a_tiles_, a_tile_elems_}; }
  PackedTiles<TPack> shared_b() {
    return {b_tile(0), states() + a_tiles_, b_tiles_, b_tile_elems_};
  }

 private:
  char* memory_ = nullptr;
  int64_t capacity_ = 0;
  int64_t a_tiles_ = 0, b_tiles_ = 0, a_tile_elems_ = 0, b_tile_elems_ = 0, acc_elems_ = 0;
  int64_t state_bytes_ = 0;
};

// Runs blocks taken from `next_block` until none are left: one thread's share of the grid.
template <typename TSrc, typename TPack>
void reference_block_worker(const BlockLoopArgs& args, BlockLoopWorkspace<TPack>& ws,
                            PackedTiles<TPack>& tiles_a, PackedTiles<TPack>& tiles_b,
                            std::atomic<int64_t>& next_block, int thread) {
  const BlockGrid grid(args);
  const TSrc* a = static_cast<const TSrc*>(args.a);
  const TSrc* b = static_cast<const TSrc*>(args.b);
  float* acc = ws.acc(thread);
  const int64_t ldacc = args.bn;
  for (int64_t block = next_block.fetch_add(1, std::memory_order_relaxed); block < grid.m * grid.n;
       block = next_block.fetch_add(1, std::memory_order_relaxed)) {
    const BlockCoords at = block_coords(block, grid.m, grid.n, kGroupRows);
    const int64_t m0 = at.by * args.bm, n0 = at.bx * args.bn;
    const int rows = int(args.m - m0 < args.bm ? args.m - m0 : args.bm);
    const int cols = int(args.n - n0 < args.bn ? args.n - n0 : args.bn);
    auto depth_at = [&](int64_t kt) {
      return int(args.k - kt * args.bk < args.bk ? args.k - kt * args.bk : args.bk);
    };
    // Packing at the tile's valid size (edge form) or at the full tile (padded form).
    auto pack_a_tile = [&](int64_t kt) {
      return [&, kt](TPack* dst) {
        const int depth = depth_at(kt);
        pack_a<TSrc, TPack>(a + m0 * args.a_row_stride + kt * args.bk * args.a_col_stride,
                            args.a_row_stride, args.a_col_stride, rows, depth,
                            args.padded_tiles ? args.bm : rows, args.padded_tiles ? args.bk : depth,
                            dst);
      };
    };
    auto pack_b_tile = [&](int64_t kt) {
      return [&, kt](TPack* dst) {
        const int depth = depth_at(kt);
        pack_b<TSrc, TPack>(b + kt * args.bk * args.b_row_stride + n0 * args.b_col_stride,
                            args.b_row_stride, args.b_col_stride, depth, cols,
                            args.padded_tiles ? args.bk : depth, args.padded_tiles ? args.bn : cols,
                            dst);
      };
    };
    auto a_in_place = [&](int64_t kt) {
      return args.read_a_in_place && !args.padded_tiles &&
             can_read_a_in_place<TSrc, TPack>(args.a_row_stride, args.a_col_stride, depth_at(kt));
    };
    // As the generated code: only tiles a block packs for itself (a shared one is packed once).
    const bool b_in_place =
        args.read_b_in_place && !args.padded_tiles && !args.share_tiles &&
        can_read_b_in_place<TSrc, TPack>(args.b_row_stride, args.b_col_stride, cols);
    if (args.share_tiles) {
      for (int64_t kt = 0; kt < grid.k; ++kt) {  // claim pass
        if (!a_in_place(kt)) tiles_a.claim(at.by * grid.k + kt, pack_a_tile(kt));
        if (!b_in_place) tiles_b.claim(at.bx * grid.k + kt, pack_b_tile(kt));
      }
    }
    const int acc_rows = args.padded_tiles ? args.bm : rows;
    const int acc_cols = args.padded_tiles ? args.bn : cols;
    // clear(acc) is folded into the first K step (accumulate = false).
    for (int64_t kt = 0; kt < grid.k; ++kt) {
      const bool accumulate = kt > 0;
      const int depth = args.padded_tiles ? args.bk : depth_at(kt);
      if constexpr (std::is_same_v<TSrc, float> && std::is_same_v<TPack, float>) {
        if (b_in_place) {
          const float* b_rows = b + kt * args.bk * args.b_row_stride + n0;
          const float* a_rows = a + m0 * args.a_row_stride + kt * args.bk * args.a_col_stride;
          const float* a_tile = nullptr;
          if (!a_in_place(kt)) {
            if (args.share_tiles) {
              a_tile = tiles_a.get(at.by * grid.k + kt, pack_a_tile(kt));
            } else {
              pack_a_tile(kt)(ws.a_tile(thread));
              a_tile = ws.a_tile(thread);
            }
          }
          gemm_direct_b(a_tile, a_rows, args.a_row_stride, b_rows, args.b_row_stride, acc, ldacc,
                        acc_rows, acc_cols, depth, accumulate);
          continue;
        }
      }
      const TPack* b_tile;
      if (args.share_tiles) {
        b_tile = tiles_b.get(at.bx * grid.k + kt, pack_b_tile(kt));
      } else {
        pack_b_tile(kt)(ws.b_tile(thread));
        b_tile = ws.b_tile(thread);
      }
      if (a_in_place(kt)) {
        // TSrc is TPack here (can_read_a_in_place); the cast only satisfies the other types.
        const TPack* a_rows = reinterpret_cast<const TPack*>(a + m0 * args.a_row_stride +
                                                             kt * args.bk * args.a_col_stride);
        gemm_direct_a<TPack>(a_rows, args.a_row_stride, b_tile, acc, ldacc, acc_rows, acc_cols,
                             depth, accumulate);
        continue;
      }
      const TPack* a_tile;
      if (args.share_tiles) {
        a_tile = tiles_a.get(at.by * grid.k + kt, pack_a_tile(kt));
      } else {
        pack_a_tile(kt)(ws.a_tile(thread));
        a_tile = ws.a_tile(thread);
      }
      gemm_packed<TPack>(a_tile, b_tile, acc, ldacc, acc_rows, acc_cols, depth, accumulate);
    }
    for (int i = 0; i < rows; ++i)  // copy(acc, C): masked store
      std::memcpy(args.c + (m0 + i) * args.ldc + n0, acc + i * ldacc, sizeof(float) * cols);
  }
}

// Runs body(t) for every t in [0, threads), concurrently: threads - 1 std::threads and the
// caller. A runner may also run several t one after the other on one thread (a thread pool with
// fewer threads does): that is safe, because a tile is only ever waited for while the thread that
// claimed it is packing it.
struct StdThreadRunner {
  template <typename Body>
  void operator()(int threads, Body&& body) const {
    constexpr int kMaxThreads = 256;
    std::thread helpers[kMaxThreads];
    const int started = threads - 1 < kMaxThreads ? threads - 1 : kMaxThreads;
    for (int t = 0; t < started; ++t)
      helpers[t] = std::thread([&body, t] { body(t + 1); });
    body(0);
    for (int t = 0; t < started; ++t)
      helpers[t].join();
  }
};

// The whole gemm on `threads` workers. Returns false only if the workspace could not be allocated.
template <typename TSrc, typename TPack, typename Runner = StdThreadRunner>
bool reference_block_loop(const BlockLoopArgs& args, int threads, BlockLoopWorkspace<TPack>& ws,
                          Runner&& run_on_threads = Runner()) {
  if (args.m <= 0 || args.n <= 0) return true;
  if (args.k <= 0) {
    for (int64_t i = 0; i < args.m; ++i)
      std::memset(args.c + i * args.ldc, 0, sizeof(float) * args.n);
    return true;
  }
  threads = threads < 1 ? 1 : threads;
  if (!ws.prepare(args, threads)) return false;
  PackedTiles<TPack> tiles_a = ws.shared_a(), tiles_b = ws.shared_b();
  tiles_a.reset();
  tiles_b.reset();
  std::atomic<int64_t> next_block{0};
  run_on_threads(threads, [&](int t) {
    reference_block_worker<TSrc, TPack>(args, ws, tiles_a, tiles_b, next_block, t);
  });
  return true;
}

}  // namespace TESSEL_CPU_ISA_NAMESPACE
}  // namespace tessel_cpu
