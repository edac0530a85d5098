// CPU templates for the tile `gemm`: packing operand tiles into `shared` (cache-resident) buffers
// and the register-blocked micro-kernels that multiply them. Generated C++ for the cpu target
// includes this header; it is compiled ahead of time into libtessel and at run time by the system
// compiler, once per ISA variant, so it depends on nothing but the C++ standard library and
// <immintrin.h>.
//
// ISA. Chosen at compile time from the predefined macros, so one source serves every variant
// (flags: isa_variants.cmake):
//   avx512bf16  __AVX512F__ BW DQ VL, __AVX512BF16__, __FMA__, __F16C__
//   avx512      the same without __AVX512BF16__
//   avx2        __AVX2__ and __FMA__ (F16C used when present)
//   portable    anything else: plain C++ loops, any architecture
// Everything lives in namespace tessel_cpu, inside an inline namespace named after the variant
// (tessel_cpu::isa_avx512bf16, ...). Code that says tessel_cpu::gemm_packed gets its own
// variant, and variants compiled into one library never share an instantiation (the linker would
// otherwise keep one copy of an inline function for all of them: an AVX-512 body on an AVX2
// machine). Generated code compiled per variant into one library must wrap itself the same way.
//
// Element types. float, tessel_cpu::bf16 and tessel_cpu::f16 (bit patterns in a uint16_t).
// TPack, the type of the packed tiles, is float for f32 and f16 sources (f16 converted while
// packing) and bf16 for bf16 sources (or f32 sources rounded to bf16 for mixed precision).
// Accumulation is always f32.
//
// The contract with the tile compiler. One block of a tile kernel computes acc[BM x BN] (f32,
// row-major, leading dimension ldacc, in memory) over a K loop of BK steps:
//
//   clear(acc)              memset of acc
//   for k0 in 0, BK, ...:
//     copy(A[m0, k0], As)   pack_a(&A(m0, k0), rs_a, cs_a, rows, cols, BM, BK, As)
//     copy(B[k0, n0], Bs)   pack_b(&B(k0, n0), rs_b, cs_b, rows, cols, BK, BN, Bs)
//     gemm(As, Bs, acc)     gemm_packed(As, Bs, acc, ldacc, BM, BN, BK)
//   copy(acc, C[m0, n0])    the caller's masked store
//
//   template <typename TSrc, typename TPack>
//   void pack_a(const TSrc* src, int64_t row_stride, int64_t col_stride, int rows, int cols,
//               int BM, int BK, TPack* dst);
//   template <typename TSrc, typename TPack>
//   void pack_b(const TSrc* src, int64_t row_stride, int64_t col_stride, int rows, int cols,
//               int BK, int BN, TPack* dst);
//   template <typename TPack>
//   void gemm_packed(const TPack* a_packed, const TPack* b_packed, float* acc, int64_t ldacc,
//                    int BM, int BN, int BK, bool accumulate = true);    // acc += A * B
//   template <typename TPack> constexpr int64_t packed_a_elems(int BM, int BK);
//   template <typename TPack> constexpr int64_t packed_b_elems(int BK, int BN);
//
// - Element (i, k) of the source tile is src[i * row_stride + k * col_stride] (for pack_b:
//   element (k, n) is src[k * row_stride + n * col_stride]), so a transposed operand is just other
//   strides; any strides work, unit strides take the fast paths.
// - rows x cols is the part of the tile inside the tensor (rows < BM or cols < BK at ragged
//   edges); the rest of the BM x BK (BK x BN) tile is packed as zeros, so gemm_packed may always
//   run whole micro-tiles. Size the buffers with packed_a_elems/packed_b_elems (they round BM and
//   BN up to the micro-tile and BK up to a K pair for bf16). Buffers aligned to 64 bytes are best.
// - gemm_packed reads and writes only acc[0..BM) x [0..BN), so acc may be exactly BM x BN.
// - accumulate = false computes acc = A * B without reading acc: the first K step may pass it and
//   drop the clear(acc) before the loop (one pass less over acc per block, which shows at small K).
//   The generated code does (cpu_renderer: `accumulate = k != 0`), keeps the clear for a loop of
//   no step (K = 0), and at an edge block, where the gemm writes only rows x cols of acc, clears
//   the rest with clear_outside(acc, ldacc, BM, BN, rows, cols) at the first step.
// - Optional last argument of gemm_packed, gemm_direct_a and gemm_direct_b: an epilogue,
//   epilogue(i0, j0, rows, cols), called for each micro-tile once it is in acc (still in L1).
//   The generated code passes its element-wise loop after the K loop there at the last K step
//   (cpu_renderer: fused epilogues), so C is stored while the micro-tiles finish.
// - Faster where the types allow: gemm_direct_a(&A(m0, k0), lda, Bs, acc, ldacc, BM, BN, BK,
//   accumulate) reads A's tile in place instead of packing it, when can_read_a_in_place<TSrc,
//   TPack>(lda, cs_a, cols) holds (A already of the packed type, K contiguous, whole K pairs for
//   bf16). A's pack is the transposing one; skipping it gained 2.5% at 2048^3 and 18% at
//   2048x384x1536.
// - Optional, and faster at ragged edges: the packed layout depends only on the BK given (panels
//   of MR rows / NR columns, K-major inside a panel), not on BM or BN. So a block at the edge may
//   call gemm_packed with BM = rows and BN = cols of its tile to skip padding micro-tiles, and the
//   last K step may pack and multiply with BK = the K left (the same value to pack_* and gemm).
//
// Default tile sizes for the cpu target (chosen by measurement, docs/DESIGN.md "CPU gemm
// templates"): tessel_cpu::DefaultTiles<TPack>::kBM, kBN, kBK. Micro-tiles: MicroTile<TPack>.
//
// Speed: with one block packing its own tiles, as above, packing costs about 30% at 2048^3. The
// extension in tile_gemm_schedule.h (each tile packed once per gemm and shared by all blocks, and
// the order blocks run in) is what brings the generated gemm level with vendor BLAS; emit that.
#pragma once

#include <cstdint>
#include <cstring>
#include <new>
#include <type_traits>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512DQ__) && \
    defined(__AVX512VL__) && defined(__FMA__) && defined(__F16C__)
#if defined(__AVX512BF16__)
#define TESSEL_CPU_ISA_AVX512BF16 1
#define TESSEL_CPU_ISA_NAMESPACE isa_avx512bf16
#define TESSEL_CPU_ISA_NAME "avx512bf16"
#else
#define TESSEL_CPU_ISA_AVX512 1
#define TESSEL_CPU_ISA_NAMESPACE isa_avx512
#define TESSEL_CPU_ISA_NAME "avx512"
#endif
#elif defined(__AVX2__) && defined(__FMA__)
#define TESSEL_CPU_ISA_AVX2 1
#define TESSEL_CPU_ISA_NAMESPACE isa_avx2
#define TESSEL_CPU_ISA_NAME "avx2"
#else
#define TESSEL_CPU_ISA_PORTABLE 1
#define TESSEL_CPU_ISA_NAMESPACE isa_portable
#define TESSEL_CPU_ISA_NAME "portable"
#endif

namespace tessel_cpu {

// 16-bit floating-point storage types: the bit pattern only (no arithmetic on them).
struct bf16 {
  uint16_t bits;
};
struct f16 {
  uint16_t bits;
};

inline namespace TESSEL_CPU_ISA_NAMESPACE {

inline constexpr const char* kIsaName = TESSEL_CPU_ISA_NAME;

constexpr int64_t round_up(int64_t x, int64_t multiple) {
  return (x + multiple - 1) / multiple * multiple;
}
constexpr int min_int(int a, int b) {
  return a < b ? a : b;
}

// ---- scalar conversions -------------------------------------------------------------------------

inline float bits_to_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
inline uint32_t float_to_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

inline float to_float(float x) {
  return x;
}
inline float to_float(bf16 x) {
  return bits_to_float(uint32_t(x.bits) << 16);
}
inline float to_float(f16 x) {
#if defined(__F16C__)
  return _cvtsh_ss(x.bits);
#else
  const uint32_t sign = uint32_t(x.bits & 0x8000u) << 16;
  const uint32_t exponent = (x.bits >> 10) & 0x1fu;
  uint32_t mantissa = x.bits & 0x3ffu;
  if (exponent == 0x1f) return bits_to_float(sign | 0x7f800000u | (mantissa << 13));  // inf, nan
  if (exponent != 0) return bits_to_float(sign | ((exponent + 112) << 23) | (mantissa << 13));
  if (mantissa == 0) return bits_to_float(sign);
  int shift = 0;  // subnormal: normalise the mantissa
  while (!(mantissa & 0x400u)) {
    mantissa <<= 1;
    ++shift;
  }
  return bits_to_float(sign | uint32_t(113 - shift) << 23 | ((mantissa & 0x3ffu) << 13));
#endif
}

// Round to nearest even, as the hardware conversions do; NaN stays a (quiet) NaN.
inline bf16 float_to_bf16(float f) {
  const uint32_t u = float_to_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return bf16{uint16_t((u >> 16) | 0x40u)};
  return bf16{uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16)};
}

// Converts one source element to the packed type.
template <typename TPack>
struct PackConvert;
template <>
struct PackConvert<float> {
  template <typename TSrc>
  static float from(TSrc x) {
    return to_float(x);
  }
};
template <>
struct PackConvert<bf16> {
  static bf16 from(bf16 x) { return x; }
  template <typename TSrc>
  static bf16 from(TSrc x) {
    return float_to_bf16(to_float(x));
  }
};

// K steps interleaved in the packed layout: bf16 goes in K pairs, the unit of vdpbf16ps.
template <typename TPack>
inline constexpr int kKPack = 1;
template <>
inline constexpr int kKPack<bf16> = 2;

// The packed layout shared by every variant (only R differs): an operand of n_total x k_total
// (n = the M dimension of A or the N dimension of B) is cut into panels of R along n; inside a
// panel the K steps follow each other, each holding R elements (R K-pairs for bf16):
//   element (n, k) -> dst[(n / R) * R * kpad + (k / P) * R * P + (n % R) * P + k % P]
// with P = kKPack<TPack> and kpad = k_total rounded up to P.
//
// Scalar packing of K steps [k_begin, kpad) of one panel whose first n_valid rows are in the
// tensor; the ISA headers call it for what their vector paths do not cover.
template <int R, typename TSrc, typename TPack>
inline void pack_panel_scalar(const TSrc* src, int64_t stride_n, int64_t stride_k, int n_valid,
                              int k_valid, int64_t k_begin, int64_t kpad, TPack* panel) {
  constexpr int P = kKPack<TPack>;
  for (int64_t k = k_begin; k < kpad; ++k) {
    TPack* out = panel + (k / P) * R * P + k % P;
    for (int r = 0; r < R; ++r)
      out[r * P] = (r < n_valid && k < k_valid)
                       ? PackConvert<TPack>::from(src[r * stride_n + k * stride_k])
                       : TPack{};
  }
}

// How a micro-kernel reads A, one K step (one K pair for bf16) at a time: row(i) points at the
// element (pair) of micro-tile row i. From a packed panel (MR elements per K step)...
template <typename TPack, int MR>
struct PackedPanelA {
  static constexpr bool kPrefetch = true;  // a contiguous stream worth prefetching ahead
  const TPack* p;
  const TPack* row(int i) const { return p + i * kKPack<TPack>; }
  void next() { p += MR * kKPack<TPack>; }
  const TPack* ahead(int steps) const { return p + int64_t(steps) * MR * kKPack<TPack>; }
};
// ... or in place, from MR rows of a source whose K is contiguous (gemm_direct_a).
template <typename TPack, int MR>
struct RowsA {
  static constexpr bool kPrefetch = false;  // MR short streams: the hardware follows them
  const TPack* rows[MR];
  int64_t k = 0;
  const TPack* row(int i) const { return rows[i] + k; }
  void next() { k += kKPack<TPack>; }
  const TPack* ahead(int) const { return rows[0] + k; }
};

// B read in place (gemm_direct_b, f32 only): a micro-kernel reads kNR floats at p for its first K
// step, then ldb floats further on for each next one (the rows of a row-major B tile).
struct RowsB {
  const float* p;
  int64_t ldb;
};

}  // namespace TESSEL_CPU_ISA_NAMESPACE
}  // namespace tessel_cpu

// Each ISA header defines, inside the same namespaces: MicroTile<TPack> {kMR, kNR, kKPack},
// DefaultTiles<TPack> {kBM, kBN, kBK}, micro_kernel<kAccumulate>(a, b, c, ldc, ksteps) for one
// whole kMR x kNR tile (`a` a PackedPanelA or RowsA), kNarrowNR<TPack> and micro_kernel_narrow
// (the left kNarrowNR columns of a tile, for a last panel that narrow; kNarrowNR 0: none), and
// pack_panels<R>(...) (below, with fast paths where it has them).
#if defined(TESSEL_CPU_ISA_AVX512BF16) || defined(TESSEL_CPU_ISA_AVX512)
#include "tile_gemm_avx512.h"
#elif defined(TESSEL_CPU_ISA_AVX2)
#include "tile_gemm_avx2.h"
#else
#include "tile_gemm_portable.h"
#endif

namespace tessel_cpu {
inline namespace TESSEL_CPU_ISA_NAMESPACE {

template <typename TPack>
constexpr int64_t packed_a_elems(int BM, int BK) {
  return round_up(BM, MicroTile<TPack>::kMR) * round_up(BK, MicroTile<TPack>::kKPack);
}
template <typename TPack>
constexpr int64_t packed_b_elems(int BK, int BN) {
  return round_up(BN, MicroTile<TPack>::kNR) * round_up(BK, MicroTile<TPack>::kKPack);
}

template <typename TSrc, typename TPack>
inline void pack_a(const TSrc* src, int64_t row_stride, int64_t col_stride, int rows, int cols,
                   int BM, int BK, TPack* dst) {
  pack_panels<MicroTile<TPack>::kMR>(src, row_stride, col_stride, rows, cols, BM, BK, dst);
}

template <typename TSrc, typename TPack>
inline void pack_b(const TSrc* src, int64_t row_stride, int64_t col_stride, int rows, int cols,
                   int BK, int BN, TPack* dst) {
  pack_panels<MicroTile<TPack>::kNR>(src, col_stride, row_stride, cols, rows, BN, BK, dst);
}

// What a gemm runs after each micro-tile: nothing (below), or the generated kernel's epilogue
// for the last K step, `epilogue(i0, j0, rows, cols)` over acc[i0, i0 + rows) x [j0, j0 + cols),
// which the micro-kernel has just written (so it is in L1). Storing C as the micro-tiles finish
// overlaps those stores with the FMAs; a pass over the whole accumulator after the K loop read
// it back from L2 (192 x 256 floats) and was ~7% of a 2048x1152x384 f32 gemm (perf, 1 thread).
struct NoEpilogue {
  void operator()(int, int, int, int) const {}
};

// acc[0..BM) x [0..BN) (+)= A * B over micro-tiles; make_a(i0, rows) gives the A operand of the
// micro-tile row starting at i0, make_b(j0) the B operand of the panel starting at column j0 (a
// packed panel, or RowsB for B read in place, whose panels are then all kNR wide). Whole
// micro-tiles run straight on acc; one that sticks out of BM x BN runs on a small copy so that
// nothing outside is touched. Each micro-tile, once in acc, goes to `epilogue`.
template <bool kAccumulate, typename TPack, typename MakeA, typename MakeB,
          typename Epilogue = NoEpilogue>
inline void gemm_tiles(MakeA make_a, MakeB make_b, float* acc, int64_t ldacc, int BM, int BN,
                       int ksteps, Epilogue&& epilogue = {}) {
  constexpr int kMR = MicroTile<TPack>::kMR;
  constexpr int kNR = MicroTile<TPack>::kNR;
  constexpr bool kPackedB = std::is_pointer_v<decltype(make_b(0))>;
  // A's micro-panel (MR x BK) stays in L1 while B's panels stream past it from L2; measured a
  // few per cent faster than the B-panel-outer order on Zen 4 (the B tile fits L2, A's is reused).
  // B read in place goes the other way: its panel (rows far apart, one line each per K step) is
  // kept in L1 while A's packed micro-panels stream past it.
  const int outer_end = kPackedB ? BM : BN, inner_end = kPackedB ? BN : BM;
  const int outer_step = kPackedB ? kMR : kNR, inner_step = kPackedB ? kNR : kMR;
  for (int o0 = 0; o0 < outer_end; o0 += outer_step) {
    for (int n0 = 0; n0 < inner_end; n0 += inner_step) {
      const int i0 = kPackedB ? o0 : n0, j0 = kPackedB ? n0 : o0;
      const int rows = min_int(kMR, BM - i0);
      const auto a = make_a(i0, rows);
      const auto b_panel = make_b(j0);
      const int cols = min_int(kNR, BN - j0);
      float* c = acc + i0 * ldacc + j0;
      if (rows == kMR && cols == kNR) {
        micro_kernel<kAccumulate>(a, b_panel, c, ldacc, ksteps);
        epilogue(i0, j0, rows, cols);
        continue;
      }
      // 64 rows on 6-row micro-tiles end in 4: ~5% of a 1x1 convolution ran that tile on a copy.
      if (cols == kNR && micro_kernel_short<kAccumulate>(rows, a, b_panel, c, ldacc, ksteps)) {
        epilogue(i0, j0, rows, cols);
        continue;
      }
      // A last panel of at most kNarrowNR columns runs the ISA's narrower tile (N = 65 ran a
      // 16-wide tile for one column).
      const bool narrow = kPackedB && kNarrowNR<TPack> > 0 && cols <= kNarrowNR<TPack>;
      if constexpr (kPackedB) {
        if (narrow && rows == kMR && cols == kNarrowNR<TPack>) {
          micro_kernel_narrow<kAccumulate>(a, b_panel, c, ldacc, ksteps);
          epilogue(i0, j0, rows, cols);
          continue;
        }
      }
      alignas(64) float edge[kMR * kNR] = {};
      if (kAccumulate)
        for (int i = 0; i < rows; ++i)
          std::memcpy(edge + i * kNR, c + i * ldacc, sizeof(float) * cols);
      if constexpr (kPackedB) {
        if (narrow) {
          micro_kernel_narrow<kAccumulate>(a, b_panel, edge, kNR, ksteps);
          for (int i = 0; i < rows; ++i)
            std::memcpy(c + i * ldacc, edge + i * kNR, sizeof(float) * cols);
          epilogue(i0, j0, rows, cols);
          continue;
        }
      }
      micro_kernel<kAccumulate>(a, b_panel, edge, kNR, ksteps);
      for (int i = 0; i < rows; ++i)
        std::memcpy(c + i * ldacc, edge + i * kNR, sizeof(float) * cols);
      epilogue(i0, j0, rows, cols);
    }
  }
}

// acc[0..BM) x [0..BN) += A * B from packed tiles, or = A * B when `accumulate` is false (the
// first K step after clear(acc) may pass false and skip the clear: acc is then not read).
// With an epilogue (see NoEpilogue), each micro-tile goes to it once written.
template <typename TPack, typename Epilogue = NoEpilogue>
inline void gemm_packed(const TPack* a_packed, const TPack* b_packed, float* acc, int64_t ldacc,
                        int BM, int BN, int BK, bool accumulate = true, Epilogue&& epilogue = {}) {
  constexpr int kMR = MicroTile<TPack>::kMR;
  const int ksteps = (BK + kKPack<TPack> - 1) / kKPack<TPack>;
  const int64_t panel_k = int64_t(ksteps) * kKPack<TPack>;
  auto make_a = [&](int i0, int) { return PackedPanelA<TPack, kMR>{a_packed + i0 * panel_k}; };
  auto make_b = [&](int j0) { return b_packed + j0 * panel_k; };
  if (accumulate)
    gemm_tiles<true, TPack>(make_a, make_b, acc, ldacc, BM, BN, ksteps, epilogue);
  else
    gemm_tiles<false, TPack>(make_a, make_b, acc, ldacc, BM, BN, ksteps, epilogue);
}

// Sets acc[0..BM) x [0..BN) to zero outside its first rows x cols: what a clear(acc) before the
// K loop left there, for a first K step that wrote only rows x cols (accumulate = false at an
// edge block). An epilogue may read the whole tile (flash attention's and conv's do).
inline void clear_outside(float* acc, int64_t ldacc, int BM, int BN, int rows, int cols) {
  if (cols < BN)
    for (int i = 0; i < rows; ++i)
      std::memset(acc + i * ldacc + cols, 0, sizeof(float) * size_t(BN - cols));
  for (int i = rows; i < BM; ++i)
    std::memset(acc + i * ldacc, 0, sizeof(float) * size_t(BN));
}

// Whether A's tile can be read in place by gemm_direct_a instead of packed: its elements are
// already of the packed type (f32 for the f32 kernel, bf16 for the bf16 one), K is contiguous
// (col_stride 1), for bf16 the tile's depth is even (the kernel reads whole K pairs, and an odd
// depth would read one element past the tile), and its rows are not a multiple of 4 KiB apart.
// The micro-kernel broadcasts from MR rows at once; 4 KiB apart they all fall into one set of
// the L1 data cache (64 sets of 64 bytes on Zen 4 and Intel's cores alike), more rows than its 8
// (12 on Intel) ways, and evict each other at every K step: single thread, 1024^3 f32 ran at
// 65 GFLOP/s per CPU second read in place against 93 packed (1040^3: 95 and 93).
template <typename TSrc, typename TPack>
inline bool can_read_a_in_place(int64_t row_stride, int64_t col_stride, int depth) {
  if constexpr (!std::is_same_v<TSrc, TPack>) return false;
  constexpr int64_t kL1SetPeriod = 4096;  // bytes after which addresses map to the same L1 set
  const bool rows_alias = (row_stride * int64_t(sizeof(TSrc))) % kL1SetPeriod == 0;
  return col_stride == 1 && depth % kKPack<TPack> == 0 && !rows_alias;
}

// gemm_packed with A read in place: rows of A at a, a + lda, ... (BM of them, BK elements each,
// K contiguous; check can_read_a_in_place first). Skips A's packing, the transposing one, which
// pays where A is not reused much: +18% at 2048x384x1536 single-threaded, +2.5% at 2048^3.
// Rows past BM are never read (a short micro-tile repeats its last row).
template <typename TPack, typename Epilogue = NoEpilogue>
inline void gemm_direct_a(const TPack* a, int64_t lda, const TPack* b_packed, float* acc,
                          int64_t ldacc, int BM, int BN, int BK, bool accumulate = true,
                          Epilogue&& epilogue = {}) {
  constexpr int kMR = MicroTile<TPack>::kMR;
  const int ksteps = (BK + kKPack<TPack> - 1) / kKPack<TPack>;
  const int64_t panel_k = int64_t(ksteps) * kKPack<TPack>;
  auto make_a = [&](int i0, int rows) {
    RowsA<TPack, kMR> rows_a;
    for (int i = 0; i < kMR; ++i)
      rows_a.rows[i] = a + (i0 + (i < rows ? i : rows - 1)) * lda;
    return rows_a;
  };
  auto make_b = [&](int j0) { return b_packed + j0 * panel_k; };
  if (accumulate)
    gemm_tiles<true, TPack>(make_a, make_b, acc, ldacc, BM, BN, ksteps, epilogue);
  else
    gemm_tiles<false, TPack>(make_a, make_b, acc, ldacc, BM, BN, ksteps, epilogue);
}

// ---- B read in place ----------------------------------------------------------------------------
//
// A row-major f32 B tile (columns contiguous, rows ldb apart) is already what a micro-kernel needs
// per K step: kNR consecutive floats. gemm_direct_b reads it in place, two (one) vector loads
// per K step at b + k * ldb + j, and skips pack_b. The convolution's implicit gemm reads every
// tap's B tile as such a view of its relaid input (kernels/conv.tile conv_implicit), where
// packing B was ~21% of a 1x1 layer on 56 x 56 images (perf, stop 30).

// Whether B's tile (depth K steps, cols columns) can be read in place: f32 from f32, columns
// contiguous, at least one whole panel of kNR columns (a narrower tile is packed), and rows not
// a multiple of 4 KiB apart: as for A (can_read_a_in_place), the rows a micro-kernel walks down
// would all fall into one L1 set and evict each other.
template <typename TSrc, typename TPack>
inline bool can_read_b_in_place(int64_t row_stride, int64_t col_stride, int cols) {
  if constexpr (!std::is_same_v<TSrc, float> || !std::is_same_v<TPack, float>) {
    return false;
  } else {
    constexpr int64_t kL1SetPeriod = 4096;
    const bool rows_alias = (row_stride * int64_t(sizeof(float))) % kL1SetPeriod == 0;
    return col_stride == 1 && cols >= MicroTile<float>::kNR && !rows_alias;
  }
}

namespace detail {

// A thread's buffer for the packed last panel of an in-place B tile (BK x kNR floats).
inline float* tail_panel_buffer(int64_t elems) {
  struct Buffer {
    float* p = nullptr;
    int64_t size = 0;
    ~Buffer() { ::operator delete[](p, std::align_val_t(64)); }
  };
  static thread_local Buffer buffer;
  if (buffer.size < elems) {
    ::operator delete[](buffer.p, std::align_val_t(64));
    buffer.p =
        static_cast<float*>(::operator new[](sizeof(float) * size_t(elems), std::align_val_t(64)));
    buffer.size = elems;
  }
  return buffer.p;
}

// acc (+)= A * B with B's rows read in place; the panels of whole kNR columns straight from b,
// the last, narrower one (BN not a multiple of kNR) packed first, since reading kNR columns there
// would run past the tile.
template <bool kAccumulate, typename MakeA, typename Epilogue>
inline void gemm_tiles_rows_b(MakeA make_a, const float* b, int64_t ldb, float* acc, int64_t ldacc,
                              int BM, int BN, int BK, Epilogue& epilogue) {
  constexpr int kNR = MicroTile<float>::kNR;
  const int whole = BN / kNR * kNR;
  if (whole > 0)
    gemm_tiles<kAccumulate, float>(
        make_a,
        [&](int j0) {
          return RowsB{b + j0, ldb};
        },
        acc, ldacc, BM, whole, BK, epilogue);
  if (whole == BN) return;
  float* tail = tail_panel_buffer(packed_b_elems<float>(BK, kNR));
  pack_b<float, float>(b + whole, ldb, 1, BK, BN - whole, BK, kNR, tail);
  // The tail's micro-tiles start at column `whole` of acc.
  auto shifted = [&](int i0, int j0, int rows, int cols) { epilogue(i0, whole + j0, rows, cols); };
  gemm_tiles<kAccumulate, float>(
      make_a, [&](int) { return static_cast<const float*>(tail); }, acc + whole, ldacc, BM,
      BN - whole, BK, shifted);
}

}  // namespace detail

// gemm_packed with B read in place: BK rows of B at b, b + ldb, ..., BN floats each (check
// can_read_b_in_place first); A packed (a_packed) or, where a_packed is null, read in place
// from its rows at a, lda apart (as gemm_direct_a). f32 only.
template <typename Epilogue = NoEpilogue>
inline void gemm_direct_b(const float* a_packed, const float* a, int64_t lda, const float* b,
                          int64_t ldb, float* acc, int64_t ldacc, int BM, int BN, int BK,
                          bool accumulate = true, Epilogue&& epilogue = {}) {
  constexpr int kMR = MicroTile<float>::kMR;
  auto packed_a = [&](int i0, int) {
    return PackedPanelA<float, kMR>{a_packed + i0 * int64_t(BK)};
  };
  auto rows_a = [&](int i0, int rows) {
    RowsA<float, kMR> r;
    for (int i = 0; i < kMR; ++i)
      r.rows[i] = a + (i0 + (i < rows ? i : rows - 1)) * lda;
    return r;
  };
  if (a_packed) {
    if (accumulate)
      detail::gemm_tiles_rows_b<true>(packed_a, b, ldb, acc, ldacc, BM, BN, BK, epilogue);
    else
      detail::gemm_tiles_rows_b<false>(packed_a, b, ldb, acc, ldacc, BM, BN, BK, epilogue);
  } else {
    if (accumulate)
      detail::gemm_tiles_rows_b<true>(rows_a, b, ldb, acc, ldacc, BM, BN, BK, epilogue);
    else
      detail::gemm_tiles_rows_b<false>(rows_a, b, ldb, acc, ldacc, BM, BN, BK, epilogue);
  }
}

}  // namespace TESSEL_CPU_ISA_NAMESPACE
}  // namespace tessel_cpu
