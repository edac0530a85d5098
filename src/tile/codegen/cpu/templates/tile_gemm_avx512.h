// AVX-512 variants (avx512bf16, avx512) of the tile gemm templates; included by tile_gemm.h, whose
// top comment is the contract. Letters: MR x NR is the micro-tile (rows of A x columns of B held
// in zmm accumulators), NV = NR / 16 vectors per row, P = K steps per packed element group.
//
// f32: 12 x 32, 24 accumulators. Per K step: 2 loads of B, 12 broadcasts of A, 24 FMAs, i.e. 12
//   cycles on two 512-bit FMA pipes (Zen 5, Ice Lake+ servers) and 24 on Zen 4, which splits a
//   512-bit FMA over its two 256-bit pipes; loads to spare either way.
//   (14 x 32, 6 x 64 and 8 x 48 run at the same speed in cache here; 12 x 32 keeps A's panel
//   inside one 16-lane transpose when packing row-major A and divides the usual block sizes.)
// bf16 (avx512bf16): the same shape over K pairs: vdpbf16ps adds a[i][2k]*b[2k][j] +
//   a[i][2k+1]*b[2k+1][j] into f32 lane j, so B is packed as NR pairs per K pair and A as MR pairs
//   (one 32-bit broadcast each). Twice the f32 rate per instruction.
// bf16 (avx512 without BF16): the pairs are widened to f32 (a shift and a mask) and multiplied
//   with two FMAs: exact products, f32 sums.
#pragma once

#include "tile_gemm_whole_tiles.h"

// GCC 12 warns that _mm512_undefined_*() inside its own intrinsics are used uninitialized once
// they are inlined here (GCC bug 105593); the warning is about the compiler's header, not ours.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace tessel_cpu {
inline namespace TESSEL_CPU_ISA_NAMESPACE {

template <typename TPack>
struct MicroTile;
template <>
struct MicroTile<float> {
  static constexpr int kMR = 12, kNR = 32, kKPack = 1;
};
template <>
struct MicroTile<bf16> {
  static constexpr int kMR = 12, kNR = 32, kKPack = 2;
};

// Block sizes for the cpu target on this family (see docs/DESIGN.md "CPU gemm templates").
template <typename TPack>
struct DefaultTiles;
template <>
struct DefaultTiles<float> {
  static constexpr int kBM = 192, kBN = 256, kBK = 384;
};
template <>
struct DefaultTiles<bf16> {
  static constexpr int kBM = 192, kBN = 256, kBK = 512;
};

namespace detail {

inline __mmask16 lanes16(int n) {
  return n >= 16 ? __mmask16(0xffff) : n <= 0 ? __mmask16(0) : __mmask16((1u << n) - 1);
}
inline __mmask32 lanes32(int n) {
  return n >= 32 ? __mmask32(0xffffffffu) : n <= 0 ? __mmask32(0) : __mmask32((1u << n) - 1);
}

// The packed panels are read once per micro-tile from L2 (or, for the first micro-tile of a
// block, from L3 or memory); prefetching kKernelPrefetch K steps ahead (8 KiB of B) hides that
// latency. Measured here: 190 -> 225 GFLOP/s at 2048^3 from memory, no cost in L1 (recorded as
// per core; this Zen 4 core peaks at ~110, so it must have been both cores).
inline constexpr int kKernelPrefetch = 64;
template <typename AOperand>
__attribute__((always_inline)) inline void prefetch_operands(const AOperand& a, const void* b,
                                                             int b_lines) {
  for (int line = 0; line < b_lines; ++line)
    _mm_prefetch(static_cast<const char*>(b) + 64 * line, _MM_HINT_T0);
  if constexpr (AOperand::kPrefetch)
    _mm_prefetch(reinterpret_cast<const char*>(a.ahead(kKernelPrefetch)), _MM_HINT_T0);
}

// B advances b_step floats per K step: 16 NV in a packed panel, B's row stride when read in place.
template <int MR, int NV, bool kAccumulate, typename AOperand>
__attribute__((always_inline)) inline void kernel_f32(AOperand a, const float* b, int64_t b_step,
                                                      float* c, int64_t ldc, int ksteps) {
  __m512 acc[MR][NV];
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 8
    for (int j = 0; j < NV; ++j)
      acc[i][j] = kAccumulate ? _mm512_loadu_ps(c + i * ldc + 16 * j) : _mm512_setzero_ps();
  for (int k = 0; k < ksteps; ++k) {
    prefetch_operands(a, b + kKernelPrefetch * b_step, NV);
    __m512 bv[NV];
#pragma GCC unroll 8
    for (int j = 0; j < NV; ++j)
      bv[j] = _mm512_loadu_ps(b + 16 * j);
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
      const __m512 av = _mm512_set1_ps(*a.row(i));
#pragma GCC unroll 8
      for (int j = 0; j < NV; ++j)
        acc[i][j] = _mm512_fmadd_ps(av, bv[j], acc[i][j]);
    }
    a.next();
    b += b_step;
  }
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 8
    for (int j = 0; j < NV; ++j)
      _mm512_storeu_ps(c + i * ldc + 16 * j, acc[i][j]);
}

template <int MR, int NV, bool kAccumulate, typename AOperand>
__attribute__((always_inline)) inline void kernel_bf16(AOperand a, const bf16* b, float* c,
                                                       int64_t ldc, int ksteps) {
  __m512 acc[MR][NV];
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 8
    for (int j = 0; j < NV; ++j)
      acc[i][j] = kAccumulate ? _mm512_loadu_ps(c + i * ldc + 16 * j) : _mm512_setzero_ps();
  for (int k = 0; k < ksteps; ++k) {
    prefetch_operands(a, b + kKernelPrefetch * 32 * NV, NV);
#if defined(TESSEL_CPU_ISA_AVX512BF16)
    __m512bh bv[NV];
#pragma GCC unroll 8
    for (int j = 0; j < NV; ++j)
      bv[j] = (__m512bh)_mm512_loadu_si512(b + 32 * j);
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
      uint32_t pair;
      std::memcpy(&pair, a.row(i), sizeof pair);
      const __m512bh av = (__m512bh)_mm512_set1_epi32(int(pair));
#pragma GCC unroll 8
      for (int j = 0; j < NV; ++j)
        acc[i][j] = _mm512_dpbf16_ps(acc[i][j], av, bv[j]);
    }
#else
    __m512 b_even[NV], b_odd[NV];
    const __m512i high_half = _mm512_set1_epi32(int(0xffff0000u));
#pragma GCC unroll 8
    for (int j = 0; j < NV; ++j) {
      const __m512i pairs = _mm512_loadu_si512(b + 32 * j);
      b_even[j] = _mm512_castsi512_ps(_mm512_slli_epi32(pairs, 16));
      b_odd[j] = _mm512_castsi512_ps(_mm512_and_si512(pairs, high_half));
    }
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
      const __m512 a_even = _mm512_set1_ps(to_float(a.row(i)[0]));
      const __m512 a_odd = _mm512_set1_ps(to_float(a.row(i)[1]));
#pragma GCC unroll 8
      for (int j = 0; j < NV; ++j) {
        acc[i][j] = _mm512_fmadd_ps(a_even, b_even[j], acc[i][j]);
        acc[i][j] = _mm512_fmadd_ps(a_odd, b_odd[j], acc[i][j]);
      }
    }
#endif
    a.next();
    b += 32 * NV;
  }
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 8
    for (int j = 0; j < NV; ++j)
      _mm512_storeu_ps(c + i * ldc + 16 * j, acc[i][j]);
}

// In-register transpose of a 16 x 16 block of 32-bit elements: r[i] is row i before, column i
// after. Four rounds of 16 shuffles (32-bit pairs, 64-bit pairs, 128-bit lanes twice).
inline void transpose16x16(__m512 r[16]) {
  __m512 t[16];
#pragma GCC unroll 8
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  }
  __m512 u[16];  // u[4q + c], lane L: column 4L + c of rows 4q .. 4q+3
#pragma GCC unroll 4
  for (int q = 0; q < 16; q += 4) {
    const __m512d t0 = _mm512_castps_pd(t[q]), t1 = _mm512_castps_pd(t[q + 1]);
    const __m512d t2 = _mm512_castps_pd(t[q + 2]), t3 = _mm512_castps_pd(t[q + 3]);
    u[q] = _mm512_castpd_ps(_mm512_unpacklo_pd(t0, t2));
    u[q + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(t0, t2));
    u[q + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(t1, t3));
    u[q + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(t1, t3));
  }
#pragma GCC unroll 4
  for (int c = 0; c < 4; ++c) {
    const __m512 v_even = _mm512_shuffle_f32x4(u[c], u[4 + c], 0x88);
    const __m512 v_odd = _mm512_shuffle_f32x4(u[c], u[4 + c], 0xdd);
    const __m512 w_even = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0x88);
    const __m512 w_odd = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0xdd);
    r[c] = _mm512_shuffle_f32x4(v_even, w_even, 0x88);
    r[8 + c] = _mm512_shuffle_f32x4(v_even, w_even, 0xdd);
    r[4 + c] = _mm512_shuffle_f32x4(v_odd, w_odd, 0x88);
    r[12 + c] = _mm512_shuffle_f32x4(v_odd, w_odd, 0xdd);
  }
}

// Packs a panel whose source runs along K (stride 1 in K): 16 rows x 16 32-bit words at a time
// are loaded, transposed and stored as 16 K steps. `load(r, w0)` returns words w0 .. w0+15 of row
// r (zeros past the valid K); `words` is the panel's K extent in 32-bit words.
// The source rows of a panel are short runs far apart (one 4 KiB page each for wide matrices),
// too short for the hardware prefetcher to pick up, so while one panel is packed the same
// columns of the next panel's rows are prefetched: `next_panel` points at its first row,
// `row_bytes` apart, `word_bytes` of source per packed word.
template <int R, typename LoadRow>
inline void pack_transposed(int r_valid, int64_t words, LoadRow load, float* out,
                            const char* next_panel, int64_t row_bytes, int word_bytes) {
  for (int g = 0; g < R; g += 16) {
    const __mmask16 store_mask = lanes16(R - g);
    const int rows_here = min_int(16, r_valid - g);
    for (int64_t w0 = 0; w0 < words; w0 += 16) {
      __m512 t[16];
      for (int i = 0; i < 16; ++i)
        t[i] = i < rows_here ? load(g + i, w0) : _mm512_setzero_ps();
      for (int i = 0; i < min_int(16, R - g); ++i)
        for (int line = 0; line < 16 * word_bytes; line += 64)
          _mm_prefetch(next_panel + (g + i) * row_bytes + w0 * word_bytes + line, _MM_HINT_T0);
      transpose16x16(t);
      const int64_t steps = words - w0 < 16 ? words - w0 : 16;
      for (int s = 0; s < steps; ++s)
        _mm512_mask_storeu_ps(out + (w0 + s) * R + g, store_mask, t[s]);
    }
  }
}

inline int clamp_count(int64_t n, int most) {
  return n <= 0 ? 0 : n >= most ? most : int(n);
}

// Source runs along K (stride_k == 1): transposing paths. Return false where there is none.
template <int R, typename TSrc, typename TPack>
inline bool pack_k_contiguous(const TSrc*, int64_t, int, int, int64_t, TPack*) {
  return false;
}
template <int R>
inline bool pack_k_contiguous(const float* s, int64_t stride_n, int r_valid, int k_valid,
                              int64_t kpad, float* out) {
  auto load = [&](int r, int64_t k0) {
    return _mm512_maskz_loadu_ps(lanes16(clamp_count(k_valid - k0, 16)), s + r * stride_n + k0);
  };
  pack_transposed<R>(r_valid, kpad, load, out, reinterpret_cast<const char*>(s + R * stride_n),
                     stride_n * 4, 4);
  return true;
}
template <int R>
inline bool pack_k_contiguous(const f16* s, int64_t stride_n, int r_valid, int k_valid,
                              int64_t kpad, float* out) {
  auto load = [&](int r, int64_t k0) {
    const __mmask16 mask = lanes16(clamp_count(k_valid - k0, 16));
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask, s + r * stride_n + k0));
  };
  pack_transposed<R>(r_valid, kpad, load, out, reinterpret_cast<const char*>(s + R * stride_n),
                     stride_n * 2, 2);
  return true;
}
template <int R>
inline bool pack_k_contiguous(const bf16* s, int64_t stride_n, int r_valid, int k_valid,
                              int64_t kpad, bf16* out) {
  auto load = [&](int r, int64_t w0) {
    const __mmask32 mask = lanes32(clamp_count(k_valid - 2 * w0, 32));
    return _mm512_castsi512_ps(_mm512_maskz_loadu_epi16(mask, s + r * stride_n + 2 * w0));
  };
  pack_transposed<R>(r_valid, kpad / 2, load, reinterpret_cast<float*>(out),
                     reinterpret_cast<const char*>(s + R * stride_n), stride_n * 2, 4);
  return true;
}
#if defined(TESSEL_CPU_ISA_AVX512BF16)
template <int R>
inline bool pack_k_contiguous(const float* s, int64_t stride_n, int r_valid, int k_valid,
                              int64_t kpad, bf16* out) {
  auto load = [&](int r, int64_t w0) {
    const float* row = s + r * stride_n + 2 * w0;
    const __m512 lo = _mm512_maskz_loadu_ps(lanes16(clamp_count(k_valid - 2 * w0, 16)), row);
    const __m512 hi =
        _mm512_maskz_loadu_ps(lanes16(clamp_count(k_valid - 2 * w0 - 16, 16)), row + 16);
    return _mm512_castsi512_ps((__m512i)_mm512_cvtne2ps_pbh(hi, lo));
  };
  pack_transposed<R>(r_valid, kpad / 2, load, reinterpret_cast<float*>(out),
                     reinterpret_cast<const char*>(s + R * stride_n), stride_n * 4, 8);
  return true;
}
#endif

// Source runs along the panel dimension (stride_n == 1): each K step is a contiguous run that is
// cut into the panels. K is the outer loop, so the source is read one contiguous row at a time
// (a row per 4 KiB page for wide matrices: panel-first order would touch a new page per element
// group and miss the TLB). Returns false where there is no vector path for the types.
template <int R, typename TSrc, typename TPack>
inline bool pack_n_contiguous(const TSrc*, int64_t, int, int, int, int64_t, TPack*) {
  return false;
}

// Prefetches the source run of K step k + kRunPrefetch while step k is packed: each run is a few
// cache lines in a page of its own, too short for the hardware prefetcher to follow.
inline constexpr int kRunPrefetch = 6;
inline void prefetch_run(const char* run, int64_t bytes) {
  for (int64_t line = 0; line < bytes; line += 64)
    _mm_prefetch(run + line, _MM_HINT_T0);
}

// Lane masks of a panel's ceil(R / 16) vectors: loads stop at the tensor, stores at the panel.
template <int R>
struct PanelMasks {
  static constexpr int kVectors = (R + 15) / 16;
  __mmask16 load[kVectors], store[kVectors];
  explicit PanelMasks(int r_valid) {
    for (int v = 0; v < kVectors; ++v) {
      load[v] = lanes16(r_valid - 16 * v);
      store[v] = lanes16(R - 16 * v);
    }
  }
};

// f32 results. load(k, n0, mask) returns 16 floats of K step k from panel column n0 on.
template <int R, typename Load>
inline void pack_runs_f32(int n_valid, int panels, int k_valid, int64_t kpad, Load load, float* out,
                          const char* src, int64_t run_stride_bytes, int64_t run_bytes) {
  const int full_panels = n_valid / R;
  const PanelMasks<R> full(R), last(n_valid - full_panels * R);
  for (int64_t k = 0; k < kpad; ++k) {
    if (k + kRunPrefetch < k_valid)
      prefetch_run(src + (k + kRunPrefetch) * run_stride_bytes, run_bytes);
    for (int p = 0; p < panels; ++p) {
      const PanelMasks<R>& m = p < full_panels ? full : last;
      float* dst = out + p * R * kpad + k * R;
      for (int v = 0; v < PanelMasks<R>::kVectors; ++v) {
        const __m512 x = k < k_valid && p <= full_panels ? load(k, p * R + 16 * v, m.load[v])
                                                         : _mm512_setzero_ps();
        _mm512_mask_storeu_ps(dst + 16 * v, m.store[v], x);
      }
    }
  }
}
template <int R>
inline bool pack_n_contiguous(const float* s, int64_t stride_k, int n_valid, int panels,
                              int k_valid, int64_t kpad, float* out) {
  auto load = [&](int64_t k, int n0, __mmask16 mask) {
    return _mm512_maskz_loadu_ps(mask, s + k * stride_k + n0);
  };
  pack_runs_f32<R>(n_valid, panels, k_valid, kpad, load, out, reinterpret_cast<const char*>(s),
                   stride_k * 4, n_valid * 4);
  return true;
}
template <int R>
inline bool pack_n_contiguous(const f16* s, int64_t stride_k, int n_valid, int panels, int k_valid,
                              int64_t kpad, float* out) {
  auto load = [&](int64_t k, int n0, __mmask16 mask) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask, s + k * stride_k + n0));
  };
  pack_runs_f32<R>(n_valid, panels, k_valid, kpad, load, out, reinterpret_cast<const char*>(s),
                   stride_k * 2, n_valid * 2);
  return true;
}

// bf16 pairs: K steps 2k and 2k+1 of 16 columns are widened to 32 bits and interleaved.
// load16(k, n0, mask) returns 16 bf16 of K step k from panel column n0 on.
template <int R, typename Load16>
inline void pack_runs_pairs(int n_valid, int panels, int k_valid, int64_t kpad, Load16 load16,
                            bf16* out_bf16, const char* src, int64_t run_stride_bytes,
                            int64_t run_bytes) {
  uint32_t* out = reinterpret_cast<uint32_t*>(out_bf16);
  const int full_panels = n_valid / R;
  const PanelMasks<R> full(R), last(n_valid - full_panels * R);
  for (int64_t kp = 0; kp < kpad / 2; ++kp) {
    const int64_t k = 2 * kp;
    for (int64_t ahead = k + kRunPrefetch; ahead < k + kRunPrefetch + 2 && ahead < k_valid; ++ahead)
      prefetch_run(src + ahead * run_stride_bytes, run_bytes);
    for (int p = 0; p < panels; ++p) {
      const PanelMasks<R>& m = p < full_panels ? full : last;
      uint32_t* dst = out + p * R * (kpad / 2) + kp * R;
      const bool in_tensor = p <= full_panels;
      for (int v = 0; v < PanelMasks<R>::kVectors; ++v) {
        const int n0 = p * R + 16 * v;
        const __m512i even = in_tensor && k < k_valid
                                 ? _mm512_cvtepu16_epi32(load16(k, n0, m.load[v]))
                                 : _mm512_setzero_si512();
        const __m512i odd = in_tensor && k + 1 < k_valid
                                ? _mm512_cvtepu16_epi32(load16(k + 1, n0, m.load[v]))
                                : _mm512_setzero_si512();
        _mm512_mask_storeu_epi32(dst + 16 * v, m.store[v],
                                 _mm512_or_si512(even, _mm512_slli_epi32(odd, 16)));
      }
    }
  }
}
template <int R>
inline bool pack_n_contiguous(const bf16* s, int64_t stride_k, int n_valid, int panels, int k_valid,
                              int64_t kpad, bf16* out) {
  auto load16 = [&](int64_t k, int n0, __mmask16 mask) {
    return _mm256_maskz_loadu_epi16(mask, s + k * stride_k + n0);
  };
  pack_runs_pairs<R>(n_valid, panels, k_valid, kpad, load16, out, reinterpret_cast<const char*>(s),
                     stride_k * 2, n_valid * 2);
  return true;
}
#if defined(TESSEL_CPU_ISA_AVX512BF16)
template <int R>
inline bool pack_n_contiguous(const float* s, int64_t stride_k, int n_valid, int panels,
                              int k_valid, int64_t kpad, bf16* out) {
  auto load16 = [&](int64_t k, int n0, __mmask16 mask) {
    return (__m256i)_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(mask, s + k * stride_k + n0));
  };
  pack_runs_pairs<R>(n_valid, panels, k_valid, kpad, load16, out, reinterpret_cast<const char*>(s),
                     stride_k * 4, n_valid * 4);
  return true;
}
#endif

}  // namespace detail

// One whole MR x NR tile: c (+)= a * b over `ksteps` K steps (K pairs for bf16); without
// kAccumulate the old contents of c are not read. `a`: PackedPanelA or RowsA (tile_gemm.h).
template <bool kAccumulate, typename AOperand>
inline void micro_kernel(const AOperand& a, const float* b, float* c, int64_t ldc, int ksteps) {
  constexpr int kNR = MicroTile<float>::kNR;
  detail::kernel_f32<MicroTile<float>::kMR, kNR / 16, kAccumulate>(a, b, kNR, c, ldc, ksteps);
}
// B read in place (gemm_direct_b): kNR floats of each of its rows, ldb apart.
template <bool kAccumulate, typename AOperand>
inline void micro_kernel(const AOperand& a, const RowsB& b, float* c, int64_t ldc, int ksteps) {
  constexpr int kNR = MicroTile<float>::kNR;
  detail::kernel_f32<MicroTile<float>::kMR, kNR / 16, kAccumulate>(a, b.p, b.ldb, c, ldc, ksteps);
}
template <bool kAccumulate, typename AOperand>
inline void micro_kernel(const AOperand& a, const bf16* b, float* c, int64_t ldc, int ksteps) {
  detail::kernel_bf16<MicroTile<bf16>::kMR, MicroTile<bf16>::kNR / 16, kAccumulate>(a, b, c, ldc,
                                                                                    ksteps);
}

// Packs n_total x k_total (the first n_valid x k_valid from src) into panels of R; layout in
// tile_gemm.h. Unit strides take the vector paths; anything else, and conversions without one,
// the scalar path.
template <int R, typename TSrc, typename TPack>
inline void pack_panels(const TSrc* src, int64_t stride_n, int64_t stride_k, int n_valid,
                        int k_valid, int n_total, int k_total, TPack* dst) {
  const int64_t kpad = round_up(k_total, kKPack<TPack>);
  const int panels = (n_total + R - 1) / R;
  if (n_valid > 0 && k_valid > 0 && stride_n == 1 &&
      detail::pack_n_contiguous<R>(src, stride_k, min_int(n_valid, panels * R), panels, k_valid,
                                   kpad, dst))
    return;
  for (int p = 0; p < panels; ++p) {
    TPack* out = dst + int64_t(p) * R * kpad;
    const int r_valid = detail::clamp_count(n_valid - int64_t(p) * R, R);
    if (r_valid == 0 || k_valid <= 0) {
      std::memset(static_cast<void*>(out), 0, sizeof(TPack) * R * kpad);
      continue;
    }
    const TSrc* s = src + int64_t(p) * R * stride_n;
    if (stride_k == 1 && detail::pack_k_contiguous<R>(s, stride_n, r_valid, k_valid, kpad, out))
      continue;
    pack_panel_scalar<R>(s, stride_n, stride_k, r_valid, k_valid, 0, kpad, out);
  }
}

}  // namespace TESSEL_CPU_ISA_NAMESPACE
}  // namespace tessel_cpu

#pragma GCC diagnostic pop
