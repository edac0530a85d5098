// AVX2 + FMA variant of the tile gemm templates; included by tile_gemm.h, whose top comment is the
// contract. MR x NR = 6 x 16: 12 ymm accumulators, 2 for B, 1 for the A broadcast (of 16
// registers), the shape BLIS and OpenBLAS use on Haswell-class cores. bf16 has no dot-product
// instruction here: each K pair is widened to f32 (a shift, a mask) and applied as two FMAs, first
// the even K step over all rows, then the odd one, so the register budget stays the same.
// Packing: f32 runs along the panel are copied, f32 runs along K transposed 8 x 8 in registers;
// bf16 the same over K pairs; other types and strides go element-wise.
#pragma once

namespace tessel_cpu {
inline namespace TESSEL_CPU_ISA_NAMESPACE {

template <typename TPack>
struct MicroTile;
template <>
struct MicroTile<float> {
  static constexpr int kMR = 6, kNR = 16, kKPack = 1;
};
template <>
struct MicroTile<bf16> {
  static constexpr int kMR = 6, kNR = 16, kKPack = 2;
};

template <typename TPack>
struct DefaultTiles;
template <>
struct DefaultTiles<float> {
  static constexpr int kBM = 96, kBN = 256, kBK = 256;
};
template <>
struct DefaultTiles<bf16> {
  static constexpr int kBM = 96, kBN = 256, kBK = 256;
};

namespace detail {

// NV = 2 is the whole 6 x 16 micro-tile; NV = 1 its left half, for a last panel of at most 8
// columns (N = 65: the 16-wide tile computed one useful column in 16). B's panel keeps its 16
// columns per K step either way (the packed layout does not change).
// B advances b_step floats per K step: 16 in a packed panel, B's row stride when read in place.
// kPrefetchB (B read in place): each K step touches a line of a row of its own, far from the
// last, which the hardware prefetcher does not follow; the row kRowsAhead steps on is prefetched,
// and the same row's line of the next panel, which the panel after this one starts on.
inline constexpr int kRowsAhead = 16;
template <int MR, int NV, bool kAccumulate, typename AOperand, bool kPrefetchB = false>
__attribute__((always_inline)) inline void kernel_f32(AOperand a, const float* b, int64_t b_step,
                                                      float* c, int64_t ldc, int ksteps) {
  __m256 acc[MR][NV];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 2
    for (int j = 0; j < NV; ++j)
      acc[i][j] = kAccumulate ? _mm256_loadu_ps(c + i * ldc + 8 * j) : _mm256_setzero_ps();
  for (int k = 0; k < ksteps; ++k) {
    if constexpr (kPrefetchB) {
      _mm_prefetch(reinterpret_cast<const char*>(b + kRowsAhead * b_step), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(b + kRowsAhead * b_step + 16), _MM_HINT_T0);
    }
    __m256 bv[NV];
#pragma GCC unroll 2
    for (int j = 0; j < NV; ++j)
      bv[j] = _mm256_loadu_ps(b + 8 * j);
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      const __m256 av = _mm256_broadcast_ss(a.row(i));
#pragma GCC unroll 2
      for (int j = 0; j < NV; ++j)
        acc[i][j] = _mm256_fmadd_ps(av, bv[j], acc[i][j]);
    }
    a.next();
    b += b_step;
  }
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 2
    for (int j = 0; j < NV; ++j)
      _mm256_storeu_ps(c + i * ldc + 8 * j, acc[i][j]);
}

// The K pair (even, odd) of one A row in every 32-bit lane, by one broadcast load; a shift
// (even step) or a mask (odd step) then widens it to f32. Converting each bf16 through a
// general register (to_float, then a broadcast) cost 4 instructions per row and K step.
inline __m256i broadcast_pair(const bf16* p) {
  int32_t pair;
  std::memcpy(&pair, p, sizeof(pair));
  return _mm256_set1_epi32(pair);
}

// `p`, which the compiler may no longer assume equal to what it was: the odd K step reads its
// operands again (L1 hits) rather than have them merged with the even step's reads and kept in
// 8 more registers than the 16 there are, which spilled accumulators to the stack in every K
// step.
template <typename P>
inline P* reread(P* p) {
  __asm__("" : "+r"(p));
  return p;
}

// Each K pair applied as two f32 steps, the even one (B's pairs shifted left 16) over all rows,
// then the odd one (B's pairs masked): 12 accumulators, 2 for B, one A broadcast and the mask.
template <int MR, int NV, bool kAccumulate, typename AOperand>
__attribute__((always_inline)) inline void kernel_bf16(AOperand a, const bf16* b, float* c,
                                                       int64_t ldc, int ksteps) {
  __m256 acc[MR][NV];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 2
    for (int j = 0; j < NV; ++j)
      acc[i][j] = kAccumulate ? _mm256_loadu_ps(c + i * ldc + 8 * j) : _mm256_setzero_ps();
  const __m256i high_half = _mm256_set1_epi32(int(0xffff0000u));
  auto pairs = [](const bf16* p) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  };
  for (int k = 0; k < ksteps; ++k) {
    __m256 bv[NV];
#pragma GCC unroll 2
    for (int j = 0; j < NV; ++j)
      bv[j] = _mm256_castsi256_ps(_mm256_slli_epi32(pairs(b + 16 * j), 16));
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      const __m256 av = _mm256_castsi256_ps(_mm256_slli_epi32(broadcast_pair(a.row(i)), 16));
#pragma GCC unroll 2
      for (int j = 0; j < NV; ++j)
        acc[i][j] = _mm256_fmadd_ps(av, bv[j], acc[i][j]);
    }
    const bf16* b_odd = reread(b);
#pragma GCC unroll 2
    for (int j = 0; j < NV; ++j)
      bv[j] = _mm256_castsi256_ps(_mm256_and_si256(pairs(b_odd + 16 * j), high_half));
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      const __m256i pair = broadcast_pair(reread(a.row(i)));
      const __m256 av = _mm256_castsi256_ps(_mm256_and_si256(pair, high_half));
#pragma GCC unroll 2
      for (int j = 0; j < NV; ++j)
        acc[i][j] = _mm256_fmadd_ps(av, bv[j], acc[i][j]);
    }
    a.next();
    b += 32;
  }
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 2
    for (int j = 0; j < NV; ++j)
      _mm256_storeu_ps(c + i * ldc + 8 * j, acc[i][j]);
}

}  // namespace detail

// One whole MR x NR tile: c (+)= a * b; without kAccumulate the old contents of c are not read.
template <bool kAccumulate, typename AOperand>
inline void micro_kernel(const AOperand& a, const float* b, float* c, int64_t ldc, int ksteps) {
  detail::kernel_f32<MicroTile<float>::kMR, 2, kAccumulate>(a, b, 16, c, ldc, ksteps);
}
// B read in place (gemm_direct_b): 16 floats of each of its rows, ldb apart.
template <bool kAccumulate, typename AOperand>
inline void micro_kernel(const AOperand& a, const RowsB& b, float* c, int64_t ldc, int ksteps) {
  detail::kernel_f32<MicroTile<float>::kMR, 2, kAccumulate, AOperand, true>(a, b.p, b.ldb, c, ldc,
                                                                            ksteps);
}
template <bool kAccumulate, typename AOperand>
inline void micro_kernel(const AOperand& a, const bf16* b, float* c, int64_t ldc, int ksteps) {
  detail::kernel_bf16<MicroTile<bf16>::kMR, 2, kAccumulate>(a, b, c, ldc, ksteps);
}

// A short micro-tile of whole columns: rows = 4 or 2 of the 6 (blocks of 64 or 128 rows, the
// convolutions' channel counts, end in one), run straight on c instead of as a whole tile on a
// copy. false: no such tile, the caller takes the copy. Only f32 with a packed or row-major B.
template <bool kAccumulate, typename AOperand>
inline bool micro_kernel_short(int rows, const AOperand& a, const float* b, float* c, int64_t ldc,
                               int ksteps) {
  if (rows == 4)
    detail::kernel_f32<4, 2, kAccumulate>(a, b, 16, c, ldc, ksteps);
  else if (rows == 2)
    detail::kernel_f32<2, 2, kAccumulate>(a, b, 16, c, ldc, ksteps);
  return rows == 4 || rows == 2;
}
template <bool kAccumulate, typename AOperand>
inline bool micro_kernel_short(int rows, const AOperand& a, const RowsB& b, float* c, int64_t ldc,
                               int ksteps) {
  if (rows == 4)
    detail::kernel_f32<4, 2, kAccumulate, AOperand, true>(a, b.p, b.ldb, c, ldc, ksteps);
  else if (rows == 2)
    detail::kernel_f32<2, 2, kAccumulate, AOperand, true>(a, b.p, b.ldb, c, ldc, ksteps);
  return rows == 4 || rows == 2;
}
template <bool kAccumulate, typename AOperand>
inline bool micro_kernel_short(int, const AOperand&, const bf16*, float*, int64_t, int) {
  return false;
}

// The left kNarrowNR columns of a micro-tile (gemm_tiles runs it on a last panel that narrow):
// half the FMAs of the whole tile.
template <typename TPack>
inline constexpr int kNarrowNR = 8;
template <bool kAccumulate, typename AOperand>
inline void micro_kernel_narrow(const AOperand& a, const float* b, float* c, int64_t ldc,
                                int ksteps) {
  detail::kernel_f32<MicroTile<float>::kMR, 1, kAccumulate>(a, b, 16, c, ldc, ksteps);
}
template <bool kAccumulate, typename AOperand>
inline void micro_kernel_narrow(const AOperand& a, const bf16* b, float* c, int64_t ldc,
                                int ksteps) {
  detail::kernel_bf16<MicroTile<bf16>::kMR, 1, kAccumulate>(a, b, c, ldc, ksteps);
}

namespace detail {

inline int clamp_count(int64_t n, int most) {
  return n <= 0 ? 0 : n >= most ? most : int(n);
}

// The first n (0..8) floats at p, zeros after; never reads past them.
inline __m256 load_lanes(const float* p, int n) {
  if (n >= 8) return _mm256_loadu_ps(p);
  if (n <= 0) return _mm256_setzero_ps();
  const __m256i mask =
      _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  return _mm256_maskload_ps(p, mask);
}

// Stores the first W lanes of x (W = 8, or 6 for A's panel of 6 rows).
template <int W>
inline void store_lanes(float* p, __m256 x) {
  static_assert(W == 8 || W == 6, "AVX2 panels are 6 or a multiple of 8 wide");
  if constexpr (W == 8) {
    _mm256_storeu_ps(p, x);
  } else {
    _mm_storeu_ps(p, _mm256_castps256_ps128(x));
    _mm_storel_pi(reinterpret_cast<__m64*>(p + 4), _mm256_extractf128_ps(x, 1));
  }
}

// In-register transpose of 8 x 8 floats: r[i] is row i before, column i after.
inline void transpose8x8(__m256 r[8]) {
  __m256 t[8], u[8];
#pragma GCC unroll 4
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);      // lane pairs of columns 0,1 | 4,5
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);  // 2,3 | 6,7
  }
#pragma GCC unroll 2
  for (int q = 0; q < 8; q += 4) {  // u[q + c]: column c | c + 4 of rows q .. q+3
    u[q] = _mm256_shuffle_ps(t[q], t[q + 2], 0x44);
    u[q + 1] = _mm256_shuffle_ps(t[q], t[q + 2], 0xee);
    u[q + 2] = _mm256_shuffle_ps(t[q + 1], t[q + 3], 0x44);
    u[q + 3] = _mm256_shuffle_ps(t[q + 1], t[q + 3], 0xee);
  }
#pragma GCC unroll 4
  for (int c = 0; c < 4; ++c) {
    r[c] = _mm256_permute2f128_ps(u[c], u[4 + c], 0x20);
    r[4 + c] = _mm256_permute2f128_ps(u[c], u[4 + c], 0x31);
  }
}

// f32 panel whose source runs along K (stride_k == 1: A row-major, or B stored [N, K] as a
// linear layer's weight): 8 rows x 8 K steps at a time are loaded, transposed and stored as 8 K
// steps. Element-wise, this was the flash-attention backward's and the nt gemm's packing cost.
// Each source row is a short run in a page of its own, which the hardware prefetcher does not
// follow: while a panel is packed, the same K range of the next panel's rows is prefetched.
template <int R>
inline void pack_k_contiguous_f32(const float* s, int64_t stride_n, int r_valid, int k_valid,
                                  int64_t kpad, float* out) {
  constexpr int kGroup = R < 8 ? R : 8;
  static_assert(R % kGroup == 0, "a panel is whole groups of 8 rows, or fewer than 8");
  const float* next_panel = s + R * stride_n;
  for (int g = 0; g < R; g += kGroup) {
    const int rows_here = clamp_count(r_valid - g, kGroup);
    for (int64_t k0 = 0; k0 < kpad; k0 += 8) {
      const int lanes = clamp_count(k_valid - k0, 8);
      __m256 t[8];
#pragma GCC unroll 8
      for (int i = 0; i < 8; ++i)
        t[i] = i < rows_here ? load_lanes(s + (g + i) * stride_n + k0, lanes) : _mm256_setzero_ps();
      if (k0 % 16 == 0)
        for (int i = 0; i < kGroup; ++i)
          _mm_prefetch(reinterpret_cast<const char*>(next_panel + (g + i) * stride_n + k0),
                       _MM_HINT_T0);
      transpose8x8(t);
      const int steps = clamp_count(kpad - k0, 8);
      for (int step = 0; step < steps; ++step)
        store_lanes<kGroup>(out + (k0 + step) * R + g, t[step]);
    }
  }
}

// f32 operand whose source runs along the panels (stride_n == 1: B row-major, or A stored
// [K, M] as a weight gradient's dY^T): K is the outer loop, so the source is read one row at a
// time across all panels (panel-first order touched a page per K step for every panel), and
// the row kRunPrefetch steps ahead is prefetched, a few lines in a page of its own.
inline constexpr int kRunPrefetch = 6;
template <int R>
inline void pack_n_contiguous_f32(const float* src, int64_t stride_k, int n_valid, int panels,
                                  int k_valid, int64_t kpad, float* out) {
  const int full_panels = n_valid / R;
  const int tail = n_valid - full_panels * R;
  for (int64_t k = 0; k < kpad; ++k) {
    if (k + kRunPrefetch < k_valid) {
      const char* ahead = reinterpret_cast<const char*>(src + (k + kRunPrefetch) * stride_k);
      for (int64_t line = 0; line < int64_t(n_valid) * 4; line += 64)
        _mm_prefetch(ahead + line, _MM_HINT_T0);
    }
    const float* row = src + k * stride_k;
    for (int p = 0; p < panels; ++p) {
      float* d = out + int64_t(p) * R * kpad + k * R;
      const int lanes = k >= k_valid ? 0 : p < full_panels ? R : p == full_panels ? tail : 0;
      if (lanes == R) {
        std::memcpy(d, row + p * R, sizeof(float) * R);
      } else if constexpr (R % 8 == 0) {
        for (int v = 0; v < R; v += 8)
          _mm256_storeu_ps(d + v, load_lanes(row + p * R + v, lanes - v));
      } else {
        for (int r = 0; r < R; ++r)
          d[r] = r < lanes ? row[p * R + r] : 0.0f;
      }
    }
  }
}

// bf16 panels whose source runs along K (A row-major, B stored [N, K]): a K pair of one row is
// one 32-bit unit, and the packed layout (R pairs per K pair) is the f32 one over those units,
// so the f32 transposes move them. Needs an even row stride (whole pairs); an odd last K step
// goes element-wise, its pair's second half zero. Returns false where it does not apply.
template <int R>
inline bool pack_k_contiguous_bf16(const bf16* s, int64_t stride_n, int r_valid, int k_valid,
                                   int64_t kpad, bf16* out) {
  if (stride_n % 2 != 0) return false;
  const int pairs = k_valid / 2;
  pack_k_contiguous_f32<R>(reinterpret_cast<const float*>(s), stride_n / 2, r_valid, pairs, pairs,
                           reinterpret_cast<float*>(out));
  pack_panel_scalar<R>(s, stride_n, int64_t{1}, r_valid, k_valid, int64_t(pairs) * 2, kpad, out);
  return true;
}

// bf16 B row-major ([K, N], N contiguous) into 16-column panels: the rows of one K pair are
// interleaved 16 columns at a time (unpack, then the 128-bit halves put in column order). A
// ragged last panel and an odd last K step go element-wise.
inline void pack_n_contiguous_bf16(const bf16* src, int64_t stride_k, int n_valid, int panels,
                                   int k_valid, int64_t kpad, bf16* out) {
  constexpr int R = 16;
  const int full_panels = n_valid / R;
  const int64_t even_k = k_valid / 2 * 2;
  for (int64_t k = 0; k < even_k; k += 2) {
    const bf16* row0 = src + k * stride_k;
    const bf16* row1 = row0 + stride_k;
    for (int p = 0; p < full_panels; ++p) {
      const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row0 + p * R));
      const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row1 + p * R));
      const __m256i lo = _mm256_unpacklo_epi16(a, b);  // columns 0-3 | 8-11
      const __m256i hi = _mm256_unpackhi_epi16(a, b);  // columns 4-7 | 12-15
      bf16* d = out + int64_t(p) * R * kpad + k * R;
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(d), _mm256_permute2x128_si256(lo, hi, 0x20));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + 16),
                          _mm256_permute2x128_si256(lo, hi, 0x31));
    }
  }
  for (int p = 0; p < panels; ++p) {
    const int64_t left = n_valid - int64_t(p) * R;
    const int r_valid = left <= 0 ? 0 : left >= R ? R : int(left);
    const int64_t done = p < full_panels ? even_k : 0;  // K steps the loop above packed
    pack_panel_scalar<R>(src + int64_t(p) * R, int64_t{1}, stride_k, r_valid, k_valid, done, kpad,
                         out + int64_t(p) * R * kpad);
  }
}

}  // namespace detail

// Layout in tile_gemm.h. f32 from f32 and bf16 from bf16 take the vector paths for unit strides
// (along the panel: copied or interleaved runs; along K: 8 x 8 transposes); the rest goes
// element-wise.
template <int R, typename TSrc, typename TPack>
inline void pack_panels(const TSrc* src, int64_t stride_n, int64_t stride_k, int n_valid,
                        int k_valid, int n_total, int k_total, TPack* dst) {
  constexpr bool kF32 = std::is_same_v<TSrc, float> && std::is_same_v<TPack, float>;
  constexpr bool kBf16 = std::is_same_v<TSrc, bf16> && std::is_same_v<TPack, bf16>;
  const int64_t kpad = round_up(k_total, kKPack<TPack>);
  const int panels = (n_total + R - 1) / R;
  if constexpr (kF32) {
    if (stride_n == 1 && n_valid > 0 && k_valid > 0) {
      detail::pack_n_contiguous_f32<R>(src, stride_k, min_int(n_valid, panels * R), panels, k_valid,
                                       kpad, dst);
      return;
    }
  }
  if constexpr (kBf16 && R == 16) {
    if (stride_n == 1 && n_valid > 0 && k_valid > 0) {
      detail::pack_n_contiguous_bf16(src, stride_k, min_int(n_valid, panels * R), panels, k_valid,
                                     kpad, dst);
      return;
    }
  }
  for (int p = 0; p < panels; ++p) {
    TPack* out = dst + int64_t(p) * R * kpad;
    const int64_t left = n_valid - int64_t(p) * R;
    const int r_valid = left <= 0 ? 0 : left >= R ? R : int(left);
    if (r_valid == 0 || k_valid <= 0) {
      std::memset(static_cast<void*>(out), 0, sizeof(TPack) * R * kpad);
      continue;
    }
    const TSrc* s = src + int64_t(p) * R * stride_n;
    if constexpr (kF32) {
      if (stride_k == 1) {
        detail::pack_k_contiguous_f32<R>(s, stride_n, r_valid, k_valid, kpad, out);
        continue;
      }
    }
    if constexpr (kBf16) {
      if (stride_k == 1 &&
          detail::pack_k_contiguous_bf16<R>(s, stride_n, r_valid, k_valid, kpad, out))
        continue;
    }
    pack_panel_scalar<R>(s, stride_n, stride_k, r_valid, k_valid, 0, kpad, out);
  }
}

}  // namespace TESSEL_CPU_ISA_NAMESPACE
}  // namespace tessel_cpu
