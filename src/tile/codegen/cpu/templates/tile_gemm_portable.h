// Portable C++ variant of the tile gemm templates, for targets without AVX2 (other architectures,
// old x86); included by tile_gemm.h, whose top comment is the contract. Same packed layout as the
// vector variants. The 4 x 16 micro-tile is written as plain loops over a local accumulator
// array, which compilers keep in vector registers where they have them (SSE2, NEON).
#pragma once

#include "tile_gemm_whole_tiles.h"

namespace tessel_cpu {
inline namespace TESSEL_CPU_ISA_NAMESPACE {

template <typename TPack>
struct MicroTile;
template <>
struct MicroTile<float> {
  static constexpr int kMR = 4, kNR = 16, kKPack = 1;
};
template <>
struct MicroTile<bf16> {
  static constexpr int kMR = 4, kNR = 16, kKPack = 2;
};

template <typename TPack>
struct DefaultTiles;
template <>
struct DefaultTiles<float> {
  static constexpr int kBM = 64, kBN = 128, kBK = 256;
};
template <>
struct DefaultTiles<bf16> {
  static constexpr int kBM = 64, kBN = 128, kBK = 256;
};

// One whole MR x NR tile: c (+)= a * b; without kAccumulate the old contents of c are not read.
// B advances b_step elements per K step (group): kNR P in a packed panel, B's row stride when read
// in place (f32 only, P = 1).
template <bool kAccumulate, typename AOperand, typename TPack>
inline void micro_kernel_stepped(AOperand a, const TPack* b, int64_t b_step, float* c, int64_t ldc,
                                 int ksteps) {
  constexpr int kMR = MicroTile<TPack>::kMR, kNR = MicroTile<TPack>::kNR;
  constexpr int P = kKPack<TPack>;
  float acc[kMR][kNR];
  for (int i = 0; i < kMR; ++i)
    for (int j = 0; j < kNR; ++j)
      acc[i][j] = kAccumulate ? c[i * ldc + j] : 0.0f;
  for (int k = 0; k < ksteps; ++k) {
    for (int q = 0; q < P; ++q) {  // the K steps of one packed group
      float bv[kNR];
      for (int j = 0; j < kNR; ++j)
        bv[j] = to_float(b[j * P + q]);
      for (int i = 0; i < kMR; ++i) {
        const float av = to_float(a.row(i)[q]);
        for (int j = 0; j < kNR; ++j)
          acc[i][j] += av * bv[j];
      }
    }
    a.next();
    b += b_step;
  }
  for (int i = 0; i < kMR; ++i)
    for (int j = 0; j < kNR; ++j)
      c[i * ldc + j] = acc[i][j];
}
template <bool kAccumulate, typename AOperand, typename TPack>
inline void micro_kernel(const AOperand& a, const TPack* b, float* c, int64_t ldc, int ksteps) {
  constexpr int64_t kStep = int64_t(MicroTile<TPack>::kNR) * kKPack<TPack>;
  micro_kernel_stepped<kAccumulate>(a, b, kStep, c, ldc, ksteps);
}
template <bool kAccumulate, typename AOperand>
inline void micro_kernel(const AOperand& a, const RowsB& b, float* c, int64_t ldc, int ksteps) {
  micro_kernel_stepped<kAccumulate>(a, b.p, b.ldb, c, ldc, ksteps);
}

// Layout in tile_gemm.h.
template <int R, typename TSrc, typename TPack>
inline void pack_panels(const TSrc* src, int64_t stride_n, int64_t stride_k, int n_valid,
                        int k_valid, int n_total, int k_total, TPack* dst) {
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
    pack_panel_scalar<R>(src + int64_t(p) * R * stride_n, stride_n, stride_k, r_valid, k_valid, 0,
                         kpad, out);
  }
}

}  // namespace TESSEL_CPU_ISA_NAMESPACE
}  // namespace tessel_cpu
