// What the CPU renderer does to let the C++ compiler vectorise element loops, checked on the
// generated source and by running it: trailing dimensions of literal extent get constant strides
// in the contiguous version of a loop (with the any-strides version still right), `&&` / `||`
// become `&` / `|` unless the right side could trap, and a loop stopped at a tensor's edge runs in
// whole vectors with the edge as a mask; a load's bounds on the inner index are tested once per
// inner loop where they can be. A clear(acc) before a K loop whose only use of acc is
// its gemm is folded into the loop's first step (kept for a loop of no step), and kept where the
// loop reads acc otherwise; the loop over acc after a K loop runs per micro-tile in its last step
// where it reads acc only at its own element. Reductions over scratch tiles vectorise along rows
// (partial lanes) and down columns (the serial loop outside).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <sstream>

#include "tile/codegen/cpu/cpu_renderer.h"
#include "tile/parse/parser.h"
#include "tile/pipeline.h"
#include "tile/run/test_backends.h"

namespace tessel::tile {
namespace {

// Y[r, n, 0] = the larger of each pair X[r, n, 0..1] when both are positive, else the first;
// Y[r, n, 1] = the second.
constexpr const char* kPairs = R"(
kernel pairs(X: f32[R, N, 2], Y: f32[R, N, 2]) {
  grid (cdiv(N, 16), R) as (bx, r) {
    parallel (j) in [16] {
      n = bx * 16 + j
      a = X[r, n, 0]
      b = X[r, n, 1]
      Y[r, n, 0] = select(a > 0.0 && b > 0.0, max(a, b), a)
      Y[r, n, 1] = b
    }
  }
}
)";

std::string rendered(const char* source) {
  Expected<Kernel> parsed = parse_kernel(source, "test.tile");
  EXPECT_TRUE(parsed.ok()) << parsed.status().to_string();
  Expected<Kernel> lowered = lower_for_cpu(*parsed);
  EXPECT_TRUE(lowered.ok()) << lowered.status().to_string();
  return render_cpu(*lowered);
}

TEST(CpuRenderer, LiteralTrailingDimensionsGetConstantStrides) {
  std::string src = rendered(kPairs);
  EXPECT_NE(src.find("X_stride2 == 1 && X_stride1 == 2"), std::string::npos) << src;
  EXPECT_NE(src.find("n * 2 + 1]"), std::string::npos) << src;
  // The version for any strides is still there.
  EXPECT_NE(src.find("n * X_stride1 + 1 * X_stride2]"), std::string::npos) << src;
}

TEST(CpuRenderer, LogicWithoutTrapsIsEager) {
  EXPECT_NE(rendered(kPairs).find("((a > 0.0f) & (b > 0.0f))"), std::string::npos);
  // A division on the right keeps the short circuit: it may be what the left side guards.
  std::string src = rendered(R"(
kernel guarded(X: i64[N], Y: i64[N], d: i64) {
  grid (cdiv(N, 8)) as (b) {
    parallel (j) in [8] {
      Y[b * 8 + j] = select(d != 0 && X[b * 8 + j] / d > 1, 1, 0)
    }
  }
}
)");
  EXPECT_NE(src.find("(d != 0) && "), std::string::npos) << src;
}

// Both versions of the loop give the same results: a contiguous X, and one whose pairs are
// spread out (strides 9, 3, 2).
TEST(CpuRenderer, PairsKernelIsRightForAnyStrides) {
  Expected<testing::Launcher> k = testing::cpu_launcher(parse_kernel(kPairs, "test.tile").value());
  ASSERT_TRUE(k.ok()) << k.status().to_string();
  const int64_t rows = 2, n = 3;
  for (bool spread : {false, true}) {
    SCOPED_TRACE(spread ? "spread" : "contiguous");
    std::vector<int64_t> strides =
        spread ? std::vector<int64_t>{9, 3, 2} : std::vector<int64_t>{6, 2, 1};
    std::vector<float> x(18, 0.0f), y(12, -7.0f);
    const float pairs[6][2] = {{1, 2}, {3, -1}, {-2, 5}, {4, 0.5f}, {-1, -3}, {0.25f, 8}};
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t i = 0; i < n; ++i)
        for (int64_t e = 0; e < 2; ++e)
          x[r * strides[0] + i * strides[1] + e * strides[2]] = pairs[r * n + i][e];
    ASSERT_TRUE((*k)({TensorArg{x.data(), ScalarType::kF32, {rows, n, 2}, strides},
                      TensorArg{y.data(), ScalarType::kF32, {rows, n, 2}, {}}})
                    .ok());
    for (int64_t p = 0; p < rows * n; ++p) {
      const float a = pairs[p][0], b = pairs[p][1];
      EXPECT_EQ(y[2 * p], a > 0 && b > 0 ? std::max(a, b) : a) << "pair " << p;
      EXPECT_EQ(y[2 * p + 1], b) << "pair " << p;
    }
  }
}

// Y[r, n] = 2 X[r, n + 1] + X[r, n] over rows of any length: a 32-wide tile, so that short rows
// end inside the tile's first vector.
constexpr const char* kShift = R"(
kernel shift(X: f32[R, N], Y: f32[R, M]) {
  grid (cdiv(M, 32), R) as (bx, r) {
    parallel (j) in [32] {
      n = bx * 32 + j
      Y[r, n] = 2.0 * X[r, n + 1] + X[r, n]
    }
  }
}
)";

TEST(CpuRenderer, EdgeOfATensorIsAMaskInWholeVectors) {
  std::string src = rendered(kShift);
  // Inside the tensor, the literal extent; at its edge, whole vectors under a mask.
  EXPECT_NE(src.find("if (_tlimitj == 32)"), std::string::npos) << src;
  // Whole vectors before the limit unmasked, the last partial one masked.
  EXPECT_NE(src.find("const int64_t _tfullj = std::max<int64_t>(_tlimitj, 0) / 16 * 16;"),
            std::string::npos)
      << src;
  EXPECT_NE(src.find("for (int64_t j = 0; j < _tfullj; ++j)"), std::string::npos) << src;
  EXPECT_NE(src.find("j = _tfullj; j < std::min<int64_t>(32, (_tlimitj + 15) / 16 * 16)"),
            std::string::npos)
      << src;
  EXPECT_NE(src.find("if ((j - _tlimitj) >> 63)"), std::string::npos) << src;
  // Rows that end in the first vector, in the second, and past the tile (a full block, then an
  // edge); elements past a row's end in the output's storage (its row stride is wider) stay as
  // they were.
  Expected<testing::Launcher> k = testing::cpu_launcher(parse_kernel(kShift, "test.tile").value());
  ASSERT_TRUE(k.ok()) << k.status().to_string();
  for (int64_t m : {1, 7, 14, 16, 17, 31, 32, 37, 48}) {
    SCOPED_TRACE("row of " + std::to_string(m));
    const int64_t rows = 3, n = m + 1, pitch = m + 40;
    std::vector<float> x(rows * n), y(rows * pitch, -7.0f);
    for (size_t i = 0; i < x.size(); ++i)
      x[i] = float(i % 13) - 4.0f;
    ASSERT_TRUE((*k)({TensorArg{x.data(), ScalarType::kF32, {rows, n}, {}},
                      TensorArg{y.data(), ScalarType::kF32, {rows, m}, {pitch, 1}}})
                    .ok());
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t i = 0; i < pitch; ++i) {
        const float want = i < m ? 2 * x[r * n + i + 1] + x[r * n + i] : -7.0f;
        EXPECT_EQ(y[r * pitch + i], want) << "row " << r << " element " << i;
      }
  }
}

// Y[r, n] = X[r, n - 1] + 2 X[r, n + 1], read into a fragment first (no store limits the
// loop): the column bounds of both loads are tested once per row of the block, and a block
// inside the row reads without masks; a block at either edge keeps them, so reads past the
// row's ends give 0.
constexpr const char* kNeighbours = R"(
kernel neighbours(X: f32[R, N], Y: f32[R, N]) {
  grid (cdiv(N, 16), R) as (bx, r) {
    t = fragment<f32>[1, 16]
    parallel (i, j) in t {
      n = bx * 16 + j
      t[i, j] = X[r, n - 1] + 2.0 * X[r, n + 1]
    }
    parallel (i, j) in t {
      Y[r, bx * 16 + j] = t[i, j]
    }
  }
}
)";

TEST(CpuRenderer, LoadBoundsOfAWholeInnerLoopAreTestedOnce) {
  std::string src = rendered(kNeighbours);
  EXPECT_NE(src.find("if ((((((bx * 16) - 1) >= 0) & ((((bx * 16) - 1) + 15) < N)) & ((((bx * "
                     "16) + 1) + 15) < N)))"),
            std::string::npos)
      << src;
  EXPECT_NE(src.find("t[i * 16 + j] = (X[r * X_stride0 + (n - 1)] + (2.0f * X[r * X_stride0 + "
                     "(n + 1)]));"),
            std::string::npos)
      << src;
  Expected<testing::Launcher> k =
      testing::cpu_launcher(parse_kernel(kNeighbours, "test.tile").value());
  ASSERT_TRUE(k.ok()) << k.status().to_string();
  for (int64_t n : {1, 2, 15, 16, 17, 18, 40, 48}) {
    SCOPED_TRACE("row of " + std::to_string(n));
    const int64_t rows = 3;
    std::vector<float> x(rows * n), y(rows * n, -7.0f);
    for (size_t i = 0; i < x.size(); ++i)
      x[i] = float(i % 11) - 3.0f;
    ASSERT_TRUE((*k)({TensorArg{x.data(), ScalarType::kF32, {rows, n}, {}},
                      TensorArg{y.data(), ScalarType::kF32, {rows, n}, {}}})
                    .ok());
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t i = 0; i < n; ++i) {
        const float left = i > 0 ? x[r * n + i - 1] : 0.0f;
        const float right = i + 1 < n ? x[r * n + i + 1] : 0.0f;
        EXPECT_EQ(y[r * n + i], left + 2 * right) << "row " << r << " element " << i;
      }
  }
}

// A base that divides by a run-time value, or reads memory, stays inside the loop: tested
// before it, it could divide by a zero that the loop never meets, or read what the loop guards.
TEST(CpuRenderer, LoadBoundsThatCouldTrapStayInTheLoop) {
  std::string src = rendered(R"(
kernel divided(X: f32[R, N], ids: i64[R], Y: f32[R, 16], d: i64) {
  grid (R) as (r) {
    t = fragment<f32>[1, 16]
    parallel (i, j) in t {
      t[i, j] = select(d != 0, X[r, r / d + j], 0.0) + X[r, ids[r] + j]
    }
    parallel (i, j) in t {
      Y[r, j] = t[i, j]
    }
  }
}
)");
  EXPECT_EQ(src.find("+ 15) < N"), std::string::npos) << src;
}

// A kernel with a tile asks for its per-thread memory before its first block and returns the
// bytes it could not get, so the launcher reports them and no block writes through null
// (runtime/device_test.cpp runs a kernel that runs out).
TEST(CpuRenderer, TileMemoryIsCheckedBeforeTheFirstBlock) {
  std::string src = rendered(R"(
kernel twice(X: f32[N], Y: f32[N]) {
  grid (cdiv(N, 8)) as (b) {
    t = fragment<f32>[8]
    parallel (i) in t {
      t[i] = X[b * 8 + i]
    }
    parallel (i) in t {
      Y[b * 8 + i] = 2.0 * t[i]
    }
  }
}
)");
  EXPECT_NE(src.find("extern \"C\" int64_t tessel_"), std::string::npos) << src;
  const size_t get = src.find("scratch.get<float>(0, 8)");
  const size_t check = src.find(
      "if (const int64_t _tunallocated = scratch.take_unallocated()) return _tunallocated;");
  const size_t first_block = src.find("for (int64_t _tblock = begin;");
  ASSERT_NE(get, std::string::npos) << src;
  ASSERT_NE(check, std::string::npos) << src;
  EXPECT_LT(get, check) << src;
  EXPECT_LT(check, first_block) << src;
  EXPECT_NE(src.find("return 0;", first_block), std::string::npos) << src;
}

// T = A @ B block by block, each block's whole accumulator stored into T, which is padded to
// whole blocks: so the elements of an edge block's acc past the tensors' edges are stored too, and
// must be the zeros of clear(acc).
constexpr const char* kPaddedGemm = R"(
kernel padded_gemm<BM = 24, BN = 32, BK = 16>(A: f32[M, K], B: f32[K, N], T: f32[MP, NP]) {
  grid (cdiv(N, BN), cdiv(M, BM)) as (bx, by) {
    As = shared<f32>[BM, BK]
    Bs = shared<f32>[BK, BN]
    acc = fragment<f32>[BM, BN]
    clear(acc)
    for k in pipelined(cdiv(K, BK), stages=2) {
      copy(A[by * BM, k * BK], As)
      copy(B[k * BK, bx * BN], Bs)
      gemm(As, Bs, acc)
    }
    parallel (i, j) in acc {
      T[by * BM + i, bx * BN + j] = acc[i, j]
    }
  }
}
)";

// Every line of `src` that memsets `tile` (the rendered clear).
std::vector<std::string> memset_lines(const std::string& src, const std::string& tile) {
  std::vector<std::string> out;
  std::istringstream lines(src);
  for (std::string line; std::getline(lines, line);)
    if (line.find("std::memset(static_cast<void*>(" + tile + ")") != std::string::npos)
      out.push_back(line);
  return out;
}

// A deterministic value in [-1, 1] for element i of a test input.
float input_value(int64_t i, int salt) {
  return float((i * 7 + salt * 13) % 17) / 8.0f - 1.0f;
}

TEST(CpuRenderer, ClearBeforeAGemmLoopIsItsFirstStep) {
  std::string src = rendered(kPaddedGemm);
  // The memset runs only when the loop runs no step; the first step writes acc, and at an edge
  // block clears the rest of it.
  std::vector<std::string> clears = memset_lines(src, "acc");
  ASSERT_EQ(clears.size(), 1u) << src;
  EXPECT_NE(clears[0].find("if (!("), std::string::npos) << clears[0];
  EXPECT_NE(clears[0].find(" > 0)) std::memset"), std::string::npos) << clears[0];
  EXPECT_NE(src.find("tessel_cpu::gemm_packed<float>(As, Bs, acc, 32, _tAs_rows, _tBs_cols, "
                     "_tAs_cols, k != 0, _tepilogue0);"),
            std::string::npos)
      << src;
  // The store into T runs in the last step where the gemm covers T's limits; at an edge block
  // T's limits reach past it, and the loop after the K loop runs instead.
  EXPECT_NE(src.find("_tepilogue0_on = k + 1 == ("), std::string::npos) << src;
  EXPECT_NE(src.find("if (!_tepilogue0_on)"), std::string::npos) << src;
  // T's tile reaches past A's and B's edges, so the first step clears what the epilogue reads
  // there: a run-time test of T's limits against what the gemm wrote.
  EXPECT_NE(src.find("tessel_cpu::clear_outside(acc, 32, 24, 32, _tAs_rows, _tBs_cols);"),
            std::string::npos)
      << src;
  EXPECT_NE(src.find("if (k == 0 && ("), std::string::npos) << src;

  // Results against a plain loop, T padded to whole blocks and filled with NaN first: a whole
  // shape first (it leaves the threads' accumulators dirty), then edges in every dimension, K
  // shorter than a block, one K step, and K = 0 (T all zeros).
  Expected<testing::Launcher> k =
      testing::cpu_launcher(parse_kernel(kPaddedGemm, "test.tile").value());
  ASSERT_TRUE(k.ok()) << k.status().to_string();
  const int64_t shapes[][3] = {{48, 64, 48}, {50, 70, 37}, {5, 9, 3}, {30, 40, 16}, {29, 33, 0}};
  for (const auto& shape : shapes) {
    const int64_t m = shape[0], n = shape[1], kk = shape[2];
    SCOPED_TRACE(fmt::format("m={} n={} k={}", m, n, kk));
    const int64_t mp = (m + 23) / 24 * 24, np = (n + 31) / 32 * 32;
    std::vector<float> a(std::max<int64_t>(m * kk, 1)), b(std::max<int64_t>(kk * n, 1));
    for (size_t i = 0; i < a.size(); ++i)
      a[i] = input_value(int64_t(i), 1);
    for (size_t i = 0; i < b.size(); ++i)
      b[i] = input_value(int64_t(i), 2);
    std::vector<float> t(mp * np, std::numeric_limits<float>::quiet_NaN());
    ASSERT_TRUE((*k)({TensorArg{a.data(), ScalarType::kF32, {m, kk}, {}},
                      TensorArg{b.data(), ScalarType::kF32, {kk, n}, {}},
                      TensorArg{t.data(), ScalarType::kF32, {mp, np}, {}}})
                    .ok());
    for (int64_t i = 0; i < mp; ++i)
      for (int64_t j = 0; j < np; ++j) {
        double want = 0;
        if (i < m && j < n)
          for (int64_t p = 0; p < kk; ++p)
            want += double(a[i * kk + p]) * double(b[p * n + j]);
        ASSERT_NEAR(t[i * np + j], want, 1e-4) << "T[" << i << ", " << j << "]";
      }
  }
}

// gemm.tile's shape: the epilogue stops at C's edge, which is A's and B's, so an edge block's
// first step clears nothing (the test is rendered and is false at run time); results at ragged
// shapes after a whole shape left the threads' accumulators dirty.
TEST(CpuRenderer, EdgeBlockClearsOnlyWhatTheEpilogueReads) {
  constexpr const char* kGemm = R"(
kernel edge_gemm<BM = 24, BN = 32, BK = 16>(A: f32[M, K], B: f32[K, N], C: f32[M, N]) {
  grid (cdiv(N, BN), cdiv(M, BM)) as (bx, by) {
    As = shared<f32>[BM, BK]
    Bs = shared<f32>[BK, BN]
    acc = fragment<f32>[BM, BN]
    clear(acc)
    for k in pipelined(cdiv(K, BK), stages=2) {
      copy(A[by * BM, k * BK], As)
      copy(B[k * BK, bx * BN], Bs)
      gemm(As, Bs, acc)
    }
    parallel (i, j) in acc {
      C[by * BM + i, bx * BN + j] = 2.0 * acc[i, j]
    }
  }
}
)";
  std::string src = rendered(kGemm);
  const size_t clear =
      src.find("tessel_cpu::clear_outside(acc, 32, 24, 32, _tAs_rows, _tBs_cols);");
  ASSERT_NE(clear, std::string::npos) << src;
  const size_t line = src.rfind('\n', clear);
  EXPECT_NE(src.substr(line, clear - line).find("if (k == 0 && ("), std::string::npos) << src;

  Expected<testing::Launcher> k = testing::cpu_launcher(parse_kernel(kGemm, "test.tile").value());
  ASSERT_TRUE(k.ok()) << k.status().to_string();
  const int64_t shapes[][3] = {{48, 64, 48}, {50, 70, 37}, {5, 9, 3}, {30, 40, 16}, {29, 33, 0}};
  for (const auto& shape : shapes) {
    const int64_t m = shape[0], n = shape[1], kk = shape[2];
    SCOPED_TRACE(fmt::format("m={} n={} k={}", m, n, kk));
    std::vector<float> a(std::max<int64_t>(m * kk, 1)), b(std::max<int64_t>(kk * n, 1));
    for (size_t i = 0; i < a.size(); ++i)
      a[i] = input_value(int64_t(i), 5);
    for (size_t i = 0; i < b.size(); ++i)
      b[i] = input_value(int64_t(i), 6);
    std::vector<float> c(m * n, std::numeric_limits<float>::quiet_NaN());
    ASSERT_TRUE((*k)({TensorArg{a.data(), ScalarType::kF32, {m, kk}, {}},
                      TensorArg{b.data(), ScalarType::kF32, {kk, n}, {}},
                      TensorArg{c.data(), ScalarType::kF32, {m, n}, {}}})
                    .ok());
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double want = 0;
        for (int64_t p = 0; p < kk; ++p)
          want += double(a[i * kk + p]) * double(b[p * n + j]);
        ASSERT_NEAR(c[i * n + j], 2 * want, 2e-4) << "C[" << i << ", " << j << "]";
      }
  }
}

// The same loop, but it halves acc after each step: acc is read in the loop besides the gemm, so
// the clear before it stays, and no step writes acc without adding.
TEST(CpuRenderer, ClearStaysWhereTheLoopReadsAcc) {
  constexpr const char* kHalving = R"(
kernel halving_gemm<BM = 24, BN = 32, BK = 16>(A: f32[M, K], B: f32[K, N], C: f32[M, N]) {
  grid (cdiv(N, BN), cdiv(M, BM)) as (bx, by) {
    As = shared<f32>[BM, BK]
    Bs = shared<f32>[BK, BN]
    acc = fragment<f32>[BM, BN]
    clear(acc)
    for k in range(cdiv(K, BK)) {
      copy(A[by * BM, k * BK], As)
      copy(B[k * BK, bx * BN], Bs)
      gemm(As, Bs, acc)
      parallel (i, j) in acc {
        acc[i, j] = 0.5 * acc[i, j]
      }
    }
    parallel (i, j) in acc {
      C[by * BM + i, bx * BN + j] = acc[i, j]
    }
  }
}
)";
  std::string src = rendered(kHalving);
  std::vector<std::string> clears = memset_lines(src, "acc");
  ASSERT_EQ(clears.size(), 1u) << src;
  EXPECT_EQ(clears[0].find("if ("), std::string::npos) << clears[0];
  EXPECT_EQ(src.find("k != 0"), std::string::npos) << src;
  EXPECT_EQ(src.find("clear_outside"), std::string::npos) << src;

  Expected<testing::Launcher> k =
      testing::cpu_launcher(parse_kernel(kHalving, "test.tile").value());
  ASSERT_TRUE(k.ok()) << k.status().to_string();
  const int64_t m = 30, n = 40, kk = 37;  // three K steps, the last one short
  std::vector<float> a(m * kk), b(kk * n), c(m * n, -7.0f);
  for (size_t i = 0; i < a.size(); ++i)
    a[i] = input_value(int64_t(i), 3);
  for (size_t i = 0; i < b.size(); ++i)
    b[i] = input_value(int64_t(i), 4);
  ASSERT_TRUE((*k)({TensorArg{a.data(), ScalarType::kF32, {m, kk}, {}},
                    TensorArg{b.data(), ScalarType::kF32, {kk, n}, {}},
                    TensorArg{c.data(), ScalarType::kF32, {m, n}, {}}})
                  .ok());
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double want = 0;
      for (int64_t k0 = 0; k0 < kk; k0 += 16) {
        for (int64_t p = k0; p < std::min<int64_t>(k0 + 16, kk); ++p)
          want += double(a[i * kk + p]) * double(b[p * n + j]);
        want *= 0.5;
      }
      ASSERT_NEAR(c[i * n + j], want, 1e-4) << "C[" << i << ", " << j << "]";
    }
}

// The loop over acc after the K loop runs per micro-tile inside the gemm of the last step, where
// it reads acc only at its own (i, j): here it also reads bias and C (beta = 1), and C is a
// transposed view in the second launch (the any-strides version of the lambda). A loop that
// reads acc at another element (a row's first) stays after the K loop. Results against a plain
// loop at shapes with edge micro-tiles in both dimensions, several K steps and none (K = 0).
TEST(CpuRenderer, EpilogueRunsPerMicroTileInTheLastKStep) {
  // One gemm kernel, `name`, whose loop over acc after the K loop is `epilogue`.
  auto gemm_then = [](const char* name, const char* epilogue) {
    return fmt::format(R"(
kernel {}<BM = 24, BN = 40, BK = 16>(A: f32[M, K], B: f32[K, N], C: f32[M, N], bias: f32[N]) {{
  grid (cdiv(N, BN), cdiv(M, BM)) as (bx, by) {{
    As = shared<f32>[BM, BK]
    Bs = shared<f32>[BK, BN]
    acc = fragment<f32>[BM, BN]
    clear(acc)
    for k in pipelined(cdiv(K, BK), stages=2) {{
      copy(A[by * BM, k * BK], As)
      copy(B[k * BK, bx * BN], Bs)
      gemm(As, Bs, acc)
    }}
    parallel (i, j) in acc {{
{}
    }}
  }}
}}
)",
                       name, epilogue);
  };
  const std::string fused_source = gemm_then("fused_gemm",
                                             "      c = bx * BN + j\n"
                                             "      C[by * BM + i, c] = relu(2.0 * acc[i, j] + "
                                             "C[by * BM + i, c] + bias[c])");
  const std::string row_first_source =
      gemm_then("row_first_gemm",
                "      C[by * BM + i, bx * BN + j] = acc[i, j] - acc[i, 0] + bias[bx * BN + j]");
  const char* kFused = fused_source.c_str();
  const char* kRowFirst = row_first_source.c_str();
  std::string fused = rendered(kFused);
  EXPECT_NE(fused.find("auto _tepilogue0 = [&](int _ti0, int _tj0, int _trows, int _tcols)"),
            std::string::npos)
      << fused;
  EXPECT_NE(fused.find("_tAs_cols, k != 0, _tepilogue0);"), std::string::npos) << fused;
  EXPECT_NE(fused.find("constexpr int64_t _tnr = tessel_cpu::MicroTile<float>::kNR;"),
            std::string::npos)
      << fused;
  std::string row_first = rendered(kRowFirst);
  EXPECT_EQ(row_first.find("_tepilogue"), std::string::npos) << row_first;

  for (const char* source : {kFused, kRowFirst}) {
    const bool first_of_row = source == kRowFirst;
    Expected<testing::Launcher> k =
        testing::cpu_launcher(parse_kernel(source, "test.tile").value());
    ASSERT_TRUE(k.ok()) << k.status().to_string();
    const int64_t shapes[][3] = {{48, 80, 48}, {50, 75, 37}, {5, 9, 3}, {31, 17, 16}, {29, 33, 0}};
    for (const auto& shape : shapes)
      for (bool transposed_c : {false, true}) {
        const int64_t m = shape[0], n = shape[1], kk = shape[2];
        SCOPED_TRACE(fmt::format("{} m={} n={} k={} transposed C {}",
                                 first_of_row ? "row first" : "fused", m, n, kk, transposed_c));
        std::vector<float> a(std::max<int64_t>(m * kk, 1)), b(std::max<int64_t>(kk * n, 1));
        std::vector<float> c(m * n), bias(n);
        for (size_t i = 0; i < a.size(); ++i)
          a[i] = input_value(int64_t(i), 7);
        for (size_t i = 0; i < b.size(); ++i)
          b[i] = input_value(int64_t(i), 8);
        for (size_t i = 0; i < c.size(); ++i)
          c[i] = input_value(int64_t(i), 9);
        for (size_t i = 0; i < bias.size(); ++i)
          bias[i] = input_value(int64_t(i), 10);
        const std::vector<float> c0 = c;  // C[i, j] at c[i * n + j], or at c[j * m + i] transposed
        const std::vector<int64_t> c_strides =
            transposed_c ? std::vector<int64_t>{1, m} : std::vector<int64_t>{n, 1};
        ASSERT_TRUE((*k)({TensorArg{a.data(), ScalarType::kF32, {m, kk}, {}},
                          TensorArg{b.data(), ScalarType::kF32, {kk, n}, {}},
                          TensorArg{c.data(), ScalarType::kF32, {m, n}, c_strides},
                          TensorArg{bias.data(), ScalarType::kF32, {n}, {}}})
                        .ok());
        auto product = [&](int64_t i, int64_t j) {
          double s = 0;
          for (int64_t p = 0; p < kk; ++p)
            s += double(a[i * kk + p]) * double(b[p * n + j]);
          return s;
        };
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < n; ++j) {
            const int64_t at = transposed_c ? j * m + i : i * n + j;
            // The row's first element of this block's acc.
            const double want = first_of_row ? product(i, j) - product(i, j / 40 * 40) + bias[j]
                                             : std::max(0.0, 2 * product(i, j) + c0[at] + bias[j]);
            ASSERT_NEAR(c[at], want, 2e-4) << "C[" << i << ", " << j << "]";
          }
      }
  }
}

// Reductions over a scratch tile, both axes, sum and max, starting from values other than the
// identity: along a row (k walks the tile's last index) the loop keeps 16 partial results per
// row, then folds in the 40 - 32 left over and the old value; down a column the serial loop goes
// outside and the vector loop runs over the columns. An 8-wide row (fewer than 16 lanes) keeps
// the plain loop.
constexpr const char* kReductions = R"(
kernel reductions(X: f32[R, N], S: f32[R], MX: f32[R], CS: f32[N], CM: f32[N], NS: f32[R]) {
  grid (1) as (b) {
    x = fragment<f32>[3, 40]
    n = fragment<f32>[3, 8]
    s = fragment<f32>[3]
    m = fragment<f32>[3]
    ns = fragment<f32>[3]
    cs = fragment<f32>[40]
    cm = fragment<f32>[40]
    copy(X[0, 0], x)
    copy(X[0, 0], n)
    fill(s, 1.5)
    fill(m, -inf)
    fill(ns, 0.25)
    fill(cs, 0.5)
    fill(cm, -inf)
    reduce(x, s, axis=1, op=sum)
    reduce(x, m, axis=1, op=max)
    reduce(n, ns, axis=1, op=sum)
    reduce(x, cs, axis=0, op=sum)
    reduce(x, cm, axis=0, op=max)
    parallel (i) in s {
      S[i] = s[i]
      MX[i] = m[i]
      NS[i] = ns[i]
    }
    parallel (j) in cs {
      CS[j] = cs[j]
      CM[j] = cm[j]
    }
  }
}
)";

TEST(CpuRenderer, ReductionsVectoriseAlongRowsAndDownColumns) {
  std::string src = rendered(kReductions);
  EXPECT_NE(src.find("float _rparts[16];"), std::string::npos) << src;
  EXPECT_NE(src.find("for (int64_t _rstep = 0; _rstep < 32; _rstep += 16)"), std::string::npos)
      << src;
  Expected<testing::Launcher> k =
      testing::cpu_launcher(parse_kernel(kReductions, "test.tile").value());
  ASSERT_TRUE(k.ok()) << k.status().to_string();
  const int64_t rows = 3, cols = 40;
  std::vector<float> x(rows * cols);
  for (size_t i = 0; i < x.size(); ++i)
    x[i] = float((i * 37) % 23) * 0.125f - 1.0f;
  x[1 * cols + 39] = 9.0f;  // row 1's maximum in the part past the whole 16-lane steps
  std::vector<float> s(rows), mx(rows), ns(rows), cs(cols), cm(cols);
  ASSERT_TRUE((*k)({TensorArg{x.data(), ScalarType::kF32, {rows, cols}, {}},
                    TensorArg{s.data(), ScalarType::kF32, {rows}, {}},
                    TensorArg{mx.data(), ScalarType::kF32, {rows}, {}},
                    TensorArg{cs.data(), ScalarType::kF32, {cols}, {}},
                    TensorArg{cm.data(), ScalarType::kF32, {cols}, {}},
                    TensorArg{ns.data(), ScalarType::kF32, {rows}, {}}})
                  .ok());
  for (int64_t r = 0; r < rows; ++r) {
    double sum = 1.5, narrow = 0.25;
    float top = -std::numeric_limits<float>::infinity();
    for (int64_t c = 0; c < cols; ++c) {
      sum += x[r * cols + c];
      top = std::max(top, x[r * cols + c]);
      if (c < 8) narrow += x[r * cols + c];
    }
    EXPECT_NEAR(s[r], sum, 1e-5) << "row " << r;
    EXPECT_EQ(mx[r], top) << "row " << r;
    EXPECT_NEAR(ns[r], narrow, 1e-6) << "row " << r;
  }
  EXPECT_EQ(mx[1], 9.0f);
  for (int64_t c = 0; c < cols; ++c) {
    // Down a column the order is the serial loop's: exactly the plain sum in float.
    float sum = 0.5f, top = -std::numeric_limits<float>::infinity();
    for (int64_t r = 0; r < rows; ++r) {
      sum += x[r * cols + c];
      top = std::max(top, x[r * cols + c]);
    }
    EXPECT_EQ(cs[c], sum) << "column " << c;
    EXPECT_EQ(cm[c], top) << "column " << c;
  }
}

}  // namespace
}  // namespace tessel::tile
