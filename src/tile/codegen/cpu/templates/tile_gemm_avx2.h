// AVX2 + FMA variant of the tile gemm templates; included by tile_gemm.h, whose top comment is the
// contract. MR x NR = 6 x 16: 12 ymm accumulators, 2 for B, 1 for the A broadcast (of 16
// registers), the shape BLIS and OpenBLAS use on Haswell-class cores. bf16 has no dot-product
// instruction here: each K pair is widened to f32 (a shift, a mask) and applied as two FMAs, first
// the even K step over all rows, then the odd one, so the register budget stays the same.
// Packing uses the scalar path (plus a straight copy for f32 runs); the micro-kernel dominates.
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

template <int MR, bool kAccumulate, typename AOperand>
__attribute__((always_inline)) inline void kernel_f32(AOperand a, const float* b, float* c,
                                                      int64_t ldc, int ksteps) {
  __m256 acc[MR][2];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) {
    acc[i][0] = kAccumulate ? _mm256_loadu_ps(c + i * ldc) : _mm256_setzero_ps();
    acc[i][1] = kAccumulate ? _mm256_loadu_ps(c + i * ldc + 8) : _mm256_setzero_ps();
  }
  for (int k = 0; k < ksteps; ++k) {
    const __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      const __m256 av = _mm256_broadcast_ss(a.row(i));
      acc[i][0] = _mm256_fmadd_ps(av, b0, acc[i][0]);
      acc[i][1] = _mm256_fmadd_ps(av, b1, acc[i][1]);
    }
    a.next();
    b += 16;
  }
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) {
    _mm256_storeu_ps(c + i * ldc, acc[i][0]);
    _mm256_storeu_ps(c + i * ldc + 8, acc[i][1]);
  }
}

template <int MR, bool kAccumulate, typename AOperand>
__attribute__((always_inline)) inline void kernel_bf16(AOperand a, const bf16* b, float* c,
                                                       int64_t ldc, int ksteps) {
  __m256 acc[MR][2];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) {
    acc[i][0] = kAccumulate ? _mm256_loadu_ps(c + i * ldc) : _mm256_setzero_ps();
    acc[i][1] = kAccumulate ? _mm256_loadu_ps(c + i * ldc + 8) : _mm256_setzero_ps();
  }
  const __m256i high_half = _mm256_set1_epi32(int(0xffff0000u));
  for (int k = 0; k < ksteps; ++k) {
    const __m256i p0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b));
    const __m256i p1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 16));
    __m256 b0 = _mm256_castsi256_ps(_mm256_slli_epi32(p0, 16));
    __m256 b1 = _mm256_castsi256_ps(_mm256_slli_epi32(p1, 16));
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      const __m256 av = _mm256_set1_ps(to_float(a.row(i)[0]));
      acc[i][0] = _mm256_fmadd_ps(av, b0, acc[i][0]);
      acc[i][1] = _mm256_fmadd_ps(av, b1, acc[i][1]);
    }
    b0 = _mm256_castsi256_ps(_mm256_and_si256(p0, high_half));
    b1 = _mm256_castsi256_ps(_mm256_and_si256(p1, high_half));
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      const __m256 av = _mm256_set1_ps(to_float(a.row(i)[1]));
      acc[i][0] = _mm256_fmadd_ps(av, b0, acc[i][0]);
      acc[i][1] = _mm256_fmadd_ps(av, b1, acc[i][1]);
    }
    a.next();
    b += 32;
  }
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) {
    _mm256_storeu_ps(c + i * ldc, acc[i][0]);
    _mm256_storeu_ps(c + i * ldc + 8, acc[i][1]);
  }
}

}  // namespace detail

// One whole MR x NR tile: c (+)= a * b; without kAccumulate the old contents of c are not read.
template <bool kAccumulate, typename AOperand>
inline void micro_kernel(const AOperand& a, const float* b, float* c, int64_t ldc, int ksteps) {
  detail::kernel_f32<MicroTile<float>::kMR, kAccumulate>(a, b, c, ldc, ksteps);
}
template <bool kAccumulate, typename AOperand>
inline void micro_kernel(const AOperand& a, const bf16* b, float* c, int64_t ldc, int ksteps) {
  detail::kernel_bf16<MicroTile<bf16>::kMR, kAccumulate>(a, b, c, ldc, ksteps);
}

// Layout in tile_gemm.h. Whole f32 runs along the panel are copied; the rest goes element-wise.
template <int R, typename TSrc, typename TPack>
inline void pack_panels(const TSrc* src, int64_t stride_n, int64_t stride_k, int n_valid,
                        int k_valid, int n_total, int k_total, TPack* dst) {
  constexpr bool kSameF32 = sizeof(TSrc) == 4 && sizeof(TPack) == 4;  // float -> float
  const int64_t kpad = round_up(k_total, kKPack<TPack>);
  const int panels = (n_total + R - 1) / R;
  for (int p = 0; p < panels; ++p) {
    TPack* out = dst + int64_t(p) * R * kpad;
    const int64_t left = n_valid - int64_t(p) * R;
    const int r_valid = left <= 0 ? 0 : left >= R ? R : int(left);
    if (r_valid == 0 || k_valid <= 0) {
      std::memset(static_cast<void*>(out), 0, sizeof(TPack) * R * kpad);
      continue;
    }
    const TSrc* s = src + int64_t(p) * R * stride_n;
    int64_t k_done = 0;
    if (kSameF32 && stride_n == 1 && r_valid == R) {
      for (; k_done < k_valid; ++k_done)
        std::memcpy(static_cast<void*>(out + k_done * R), s + k_done * stride_k, sizeof(TPack) * R);
    }
    pack_panel_scalar<R>(s, stride_n, stride_k, r_valid, k_valid, k_done, kpad, out);
  }
}

}  // namespace TESSEL_CPU_ISA_NAMESPACE
}  // namespace tessel_cpu
