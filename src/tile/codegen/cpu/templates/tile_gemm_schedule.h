// How generated code runs the blocks of a tile `gemm` kernel on a CPU so that it keeps up with
// vendor BLAS: an extension of the contract in tile_gemm.h (read that first). Header-only.
//
// Why. With the plain contract every block packs its own A and B tiles, so A is packed
// cdiv(N, BN) times and B cdiv(M, BM) times (8 and 11 times at 2048^3 with the default tiles),
// from rows that are each a short run in a page of their own: on this Zen 4 that was 30% of the run
// time. But an A tile depends only on (by, k) and a B tile only on (k, bx): a copy into `shared`
// whose source depends on one grid axis is the same for every block along the other axis. So:
//
// 1. Memoised copies. Each tile is packed once per gemm call into a grid-wide buffer and shared
//    by all blocks and threads (PackedTiles below): tile (by, k) of A at index by * grid_k + k,
//    tile (k, bx) of B at bx * grid_k + k. The first block that needs a tile packs it; a block
//    that finds it being packed by another thread waits for it (rare: see 3).
// 2. Block order (block_coords): blocks go out one at a time from an atomic counter (so a thread
//    slowed down by a neighbour takes fewer), in groups of kGroupRows block rows, column by
//    column inside a group: the group's packed A panels and one packed B column panel are what
//    the threads read at any time, and they fit in L3 (2 x 1.5 MiB A + 2 MiB B at 2048^3).
// 3. Claim pass: before its K loop a block packs every tile it needs that nobody has claimed
//    yet (PackedTiles::claim), so two threads starting on the same column split its B tiles
//    instead of waiting for each other.
//
// Generated code for a block then reads (storage for the tiles comes from the runtime):
//
//   auto [by, bx] = block_coords(block, grid_m, grid_n, kGroupRows);
//   for k: tiles_a.claim(by * grid_k + k, pack_a_tile(k));
//          tiles_b.claim(bx * grid_k + k, pack_b_tile(k));
//   clear(acc)
//   for k: gemm_packed(tiles_a.get(by * grid_k + k, pack_a_tile(k)),
//                      tiles_b.get(bx * grid_k + k, pack_b_tile(k)),
//                      acc, ldacc, rows, cols, depth);
//   copy(acc, C[...])
//
// Where can_read_a_in_place holds for a K step, A's tile is not packed or claimed at all and the
// block calls gemm_direct_a on the source rows instead (reference_block_loop.h does both).
//
// Tiles are packed in the edge form of the contract (rows x depth of the tile, at the tile's
// slot of packed_a_elems(BM, BK) elements), so ragged tiles cost no padding work.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstring>
#include <thread>

#include "tile_gemm.h"

namespace tessel_cpu {
inline namespace TESSEL_CPU_ISA_NAMESPACE {

inline constexpr int kGroupRows = 4;

struct BlockCoords {
  int64_t by, bx;
};

// The block that the n-th task runs: groups of `group_rows` block rows, column-major inside.
inline BlockCoords block_coords(int64_t block, int64_t grid_m, int64_t grid_n, int group_rows) {
  const int64_t group = block / (group_rows * grid_n);
  const int64_t first_row = group * group_rows;
  const int64_t rows = grid_m - first_row < group_rows ? grid_m - first_row : group_rows;
  const int64_t in_group = block - group * group_rows * grid_n;
  return {first_row + in_group % rows, in_group / rows};
}

// The packed tiles of one operand for one gemm call, each packed once by whichever thread needs
// it first. Storage (tiles * tile_elems elements, 64-byte aligned) and the per-tile states belong
// to the caller and are reused across calls; reset() before each call.
template <typename TPack>
class PackedTiles {
 public:
  PackedTiles(TPack* storage, uint8_t* states, int64_t tiles, int64_t tile_elems)
      : storage_(storage), states_(states), tiles_(tiles), tile_elems_(tile_elems) {}

  // Before the threads start.
  void reset() { std::memset(states_, kEmpty, size_t(tiles_)); }

  // Packs tile `index` with pack(TPack* dst) if no thread has claimed it; never waits.
  template <typename Pack>
  void claim(int64_t index, Pack&& pack) {
    std::atomic_ref<uint8_t> state(states_[index]);
    uint8_t expected = kEmpty;
    if (state.load(std::memory_order_relaxed) != kEmpty ||
        !state.compare_exchange_strong(expected, kPacking, std::memory_order_acquire))
      return;
    pack(slot(index));
    state.store(kReady, std::memory_order_release);
  }

  // Tile `index`, packed: by this thread now if nobody has claimed it, else by whoever did.
  template <typename Pack>
  const TPack* get(int64_t index, Pack&& pack) {
    std::atomic_ref<uint8_t> state(states_[index]);
    if (state.load(std::memory_order_acquire) != kReady) {
      claim(index, pack);
      // The packer is usually done within microseconds; on an oversubscribed machine it may have
      // been descheduled, so after a while give the core to it (or to anyone) instead.
      for (int spins = 0; state.load(std::memory_order_acquire) != kReady; ++spins) {
        if (spins < kSpinsBeforeYield)
          pause();
        else
          std::this_thread::yield();
      }
    }
    return slot(index);
  }

 private:
  static constexpr uint8_t kEmpty = 0, kPacking = 1, kReady = 2;
  static constexpr int kSpinsBeforeYield = 4096;
  static void pause() {
#if defined(__x86_64__) || defined(__i386__)
    _mm_pause();
#endif
  }
  TPack* slot(int64_t index) const {
    return storage_ + index * tile_elems_;
  }

  TPack* storage_;
  uint8_t* states_;  // kEmpty, kPacking, kReady; accessed through std::atomic_ref
  int64_t tiles_, tile_elems_;
};

}  // namespace TESSEL_CPU_ISA_NAMESPACE
}  // namespace tessel_cpu
