// A whole gemm run by the CPU gemm templates (tile_gemm.h) through the hand-written block loop
// (reference_block_loop.h): what the tile compiler's generated gemm will do, for the tests of the
// templates and for `tessel bench gemm` until the generated kernel exists. The templates are
// compiled once per ISA variant into libtessel (reference_gemm_<isa>.cpp, flags in
// isa_variants.cmake); create() picks one.
//
//   TESSEL_ASSIGN_OR_RETURN(ReferenceGemm gemm, ReferenceGemm::create());   // best for this CPU
//   ReferenceGemmCall call{.m = m, .n = n, .k = k, .a = a, ...};
//   TESSEL_TRY(gemm.run(call));
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "support/status.h"

namespace tessel::tile {

// Element type of A and B. C is always f32, accumulated in f32.
enum class GemmInput { kF32, kF16, kBf16 };
const char* gemm_input_name(GemmInput input);

// C[m x n] = A[m x k] * B[k x n]. Element (i, k) of A is a[i * a_row_stride + k * a_col_stride]
// (B likewise), so a transposed operand is just other strides; C is row-major with leading
// dimension ldc and is overwritten.
struct ReferenceGemmCall {
  int64_t m = 0, n = 0, k = 0;
  GemmInput input = GemmInput::kF32;
  // f32 inputs rounded to bf16 while packing and run on the bf16 kernel (mixed precision).
  bool bf16_compute = false;
  const void* a = nullptr;
  int64_t a_row_stride = 0, a_col_stride = 0;
  const void* b = nullptr;
  int64_t b_row_stride = 0, b_col_stride = 0;
  float* c = nullptr;
  int64_t ldc = 0;
  // Workers of the block loop, run on libtessel's thread pool (ThreadPool::global()).
  int threads = 1;
  int bm = 0, bn = 0, bk = 0;  // block sizes; 0 takes the variant's default
  // The schedule of tile_gemm_schedule.h (each tile packed once, shared by all blocks). false:
  // the plain contract, each block packing its own tiles.
  bool share_tiles = true;
  // Tiles packed and multiplied at their full BM x BK / BK x BN, zero padded, instead of the edge
  // form (the tile's valid size). Both are part of the contract; the tests run both.
  bool padded_tiles = false;
  // Row-major A of the packed type read in place by the micro-kernel instead of packed
  // (gemm_direct_a in tile_gemm.h); false packs every A tile.
  bool read_a_in_place = true;
  // Row-major f32 B read in place by the micro-kernel (gemm_direct_b) instead of packed, where
  // tiles are not shared (share_tiles false), as the generated code does.
  bool read_b_in_place = true;
};

struct GemmTiles {
  int bm = 0, bn = 0, bk = 0;
};

struct ReferenceGemmVariant;  // one ISA variant's entry points (reference_gemm_variant.h)

class ReferenceGemm {
 public:
  // Variants compiled into this build, best first ("avx512bf16", "avx512", "avx2", "portable").
  static std::vector<std::string> compiled_isas();
  // Whether this CPU (and its operating system) runs `isa`.
  static bool supported_here(std::string_view isa);
  // The variant `isa`, or the best one this CPU runs when `isa` is empty.
  static Expected<ReferenceGemm> create(std::string_view isa = {});

  ReferenceGemm(ReferenceGemm&& other) noexcept;
  ReferenceGemm& operator=(ReferenceGemm&& other) noexcept;
  ReferenceGemm(const ReferenceGemm&) = delete;
  ReferenceGemm& operator=(const ReferenceGemm&) = delete;
  ~ReferenceGemm();

  const char* isa() const;
  // Block sizes used when a call leaves them at 0; bf16 for the bf16 kernel (bf16 inputs or
  // bf16_compute), else f32.
  GemmTiles default_tiles(bool bf16) const;
  // Runs one call. Keeps its packing buffers for the next call: one call at a time per object.
  Status run(const ReferenceGemmCall& call);

 private:
  explicit ReferenceGemm(const ReferenceGemmVariant* variant);
  const ReferenceGemmVariant* variant_;
  void* workspaces_;
};

}  // namespace tessel::tile
