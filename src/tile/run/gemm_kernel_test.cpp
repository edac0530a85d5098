// kernels/gemm.tile against a plain C++ gemm, on every backend present: shapes that include 1,
// primes and non-multiples of every tile size; transposed operands as strided views; alpha/beta
// (with beta = 0 ignoring NaNs in C, as BLAS does); bias and activations; bf16 and f16 inputs; C
// contiguous or a transposed view.
// Tolerances: f32 accumulation over K terms of magnitude <= 1 stays within 1e-4 absolute + 1e-5
// relative; 16-bit inputs are rounded by the test first, so the kernel's products are exact and the
// same holds.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "tile/parse/parser.h"
#include "tile/run/test_backends.h"
#include "tile/run/test_util.h"

namespace tessel::tile {
namespace {

using testing::expect_close;
using testing::random_floats;

struct GemmCase {
  int64_t m, n, k;
  bool trans_a = false, trans_b = false;
  double alpha = 1.0, beta = 0.0;
  bool trans_c = false;  // C stored [n, m] and passed as a strided view of [m, n]
};

const Kernel& gemm_source() {
  static const Kernel k = parse_tile_file(testing::kernels_dir() + "/gemm.tile").value()[0];
  return k;
}

// C = act(alpha * A @ B + beta * C + bias): the reference, in double.
std::vector<double> reference(const GemmCase& c, const std::vector<float>& a,
                              const std::vector<float>& b, const std::vector<float>& c0,
                              const std::vector<float>* bias, int act) {
  std::vector<double> out(c.m * c.n);
  for (int64_t i = 0; i < c.m; ++i)
    for (int64_t j = 0; j < c.n; ++j) {
      double s = 0;
      for (int64_t p = 0; p < c.k; ++p)
        s += double(a[i * c.k + p]) * double(b[p * c.n + j]);
      double v = c.alpha * s + (c.beta == 0 ? 0.0 : c.beta * c0[i * c.n + j]);
      if (bias) v += (*bias)[j];
      if (act == 1) v = v > 0 ? v : 0;
      if (act == 2) v = 0.5 * v * (1 + std::tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
      out[i * c.n + j] = v;
    }
  return out;
}

// Runs one case with logical A [m, k] and B [k, n] given row-major in `a` and `b`.
void run_case(const testing::Launcher& launch, const GemmCase& c, ScalarType in_type, int act = 0,
              bool with_bias = false) {
  std::string what = fmt::format(
      "gemm m={} n={} k={} ta={} tb={} tc={} alpha={} beta={} in={} act={} bias={}", c.m, c.n, c.k,
      c.trans_a, c.trans_b, c.trans_c, c.alpha, c.beta, scalar_type_name(in_type), act, with_bias);
  std::vector<float> a = random_floats(c.m * c.k, 1), b = random_floats(c.k * c.n, 2);
  std::vector<float> c0 = random_floats(c.m * c.n, 3), bias = random_floats(c.n, 4);
  // 16-bit inputs: the kernel sees the rounded values, and so does the reference.
  std::vector<uint16_t> a16(a.size()), b16(b.size());
  auto round_all = [&](std::vector<float>& v, std::vector<uint16_t>& bits) {
    for (size_t i = 0; i < v.size(); ++i) {
      bits[i] =
          in_type == ScalarType::kBF16 ? testing::to_bf16_bits(v[i]) : testing::to_f16_bits(v[i]);
      v[i] = in_type == ScalarType::kBF16 ? testing::from_bf16_bits(bits[i])
                                          : testing::from_f16_bits(bits[i]);
    }
  };
  if (in_type != ScalarType::kF32) {
    round_all(a, a16);
    round_all(b, b16);
  }
  // Transposed operands are stored transposed and passed as strided views of the logical shape.
  auto layout = [&](const std::vector<float>& v, const std::vector<uint16_t>& v16, int64_t rows,
                    int64_t cols, bool trans, std::vector<float>* f,
                    std::vector<uint16_t>* h) -> TensorArg {
    *f = v;
    *h = v16;
    if (trans)
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < cols; ++j) {
          (*f)[j * rows + i] = v[i * cols + j];
          if (!v16.empty()) (*h)[j * rows + i] = v16[i * cols + j];
        }
    void* data =
        in_type == ScalarType::kF32 ? static_cast<void*>(f->data()) : static_cast<void*>(h->data());
    std::vector<int64_t> strides =
        trans ? std::vector<int64_t>{1, rows} : std::vector<int64_t>{cols, 1};
    return TensorArg{data, in_type, {rows, cols}, strides};
  };
  std::vector<float> af, bf;
  std::vector<uint16_t> ah, bh;
  TensorArg ta = layout(a, in_type == ScalarType::kF32 ? std::vector<uint16_t>{} : a16, c.m, c.k,
                        c.trans_a, &af, &ah);
  TensorArg tb = layout(b, in_type == ScalarType::kF32 ? std::vector<uint16_t>{} : b16, c.k, c.n,
                        c.trans_b, &bf, &bh);
  std::vector<float> out = c0;
  if (c.beta == 0) std::fill(out.begin(), out.end(), std::numeric_limits<float>::quiet_NaN());
  std::vector<float> stored = out;  // C as the kernel sees it: transposed where trans_c
  if (c.trans_c)
    for (int64_t i = 0; i < c.m; ++i)
      for (int64_t j = 0; j < c.n; ++j)
        stored[j * c.m + i] = out[i * c.n + j];
  std::vector<int64_t> c_strides =
      c.trans_c ? std::vector<int64_t>{1, c.m} : std::vector<int64_t>{c.n, 1};
  Status s = launch({ta, tb, TensorArg{stored.data(), ScalarType::kF32, {c.m, c.n}, c_strides},
                     TensorArg{with_bias ? bias.data() : nullptr, ScalarType::kF32, {c.n}, {}},
                     c.alpha, c.beta});
  ASSERT_TRUE(s.ok()) << s.to_string();
  for (int64_t i = 0; i < c.m; ++i)
    for (int64_t j = 0; j < c.n; ++j)
      out[i * c.n + j] = c.trans_c ? stored[j * c.m + i] : stored[i * c.n + j];
  expect_close(out, reference(c, a, b, c0, with_bias ? &bias : nullptr, act), 1e-4, 1e-5, what);
}

const GemmCase kShapes[] = {{1, 1, 1},   {7, 13, 5},   {97, 31, 257}, {64, 64, 64},
                            {130, 1, 3}, {1, 200, 17}, {33, 65, 300}};

// Small tiles: many blocks, ragged edges in every dimension, K split in many steps.
const testing::Params kSmallTiles = {{"BM", "16"}, {"BN", "24"}, {"BK", "8"}};

// The kernel compiled on every backend (GPU backends take the kernel's `on gpu` tiles).
template <typename Fn>
void for_each_backend(const testing::Params& params, Fn fn) {
  for (const testing::Backend& b : testing::test_backends()) {
    SCOPED_TRACE("backend " + b.name);
    auto launch = b.compile(gemm_source(), params);
    ASSERT_TRUE(launch.ok()) << launch.status().to_string();
    fn(*launch);
  }
}

TEST(GemmKernel, F32DefaultTilesMatchesReference) {
  for_each_backend({}, [](const testing::Launcher& launch) {
    for (GemmCase c : kShapes)
      run_case(launch, c, ScalarType::kF32);
  });
}

TEST(GemmKernel, F32SmallTilesTransposesAlphaBeta) {
  for_each_backend(kSmallTiles, [](const testing::Launcher& launch) {
    for (GemmCase c : kShapes) {
      run_case(launch, c, ScalarType::kF32);
      GemmCase t = c;
      t.trans_a = true;
      t.alpha = 1.5;
      t.beta = 0.5;
      run_case(launch, t, ScalarType::kF32);
      t.trans_a = false;
      t.trans_b = true;
      run_case(launch, t, ScalarType::kF32);
      t.trans_a = true;
      t.beta = 0;
      run_case(launch, t, ScalarType::kF32);
    }
  });
}

// Pipelined K loops with 2 and 3 stages (on GPUs, stage copies of the shared tiles rotate).
TEST(GemmKernel, PipelineStages) {
  for (const char* stages : {"1", "2", "3"}) {
    testing::Params params = kSmallTiles;
    params["STAGES"] = stages;
    for_each_backend(params, [](const testing::Launcher& launch) {
      for (GemmCase c :
           {GemmCase{33, 65, 300}, GemmCase{7, 13, 5}, GemmCase{20, 30, 16}, GemmCase{5, 5, 1}})
        run_case(launch, c, ScalarType::kF32);
    });
  }
}

TEST(GemmKernel, BiasAndActivations) {
  for (int act : {1, 2}) {
    testing::Params params = kSmallTiles;
    params["BIAS"] = "1";
    params["ACT"] = std::to_string(act);
    for_each_backend(params, [act](const testing::Launcher& launch) {
      for (GemmCase c :
           {GemmCase{17, 29, 11}, GemmCase{1, 1, 1}, GemmCase{40, 50, 60, false, false, 2.0, 1.0}})
        run_case(launch, c, ScalarType::kF32, act, true);
    });
  }
}

TEST(GemmKernel, SixteenBitInputsAccumulateInF32) {
  for (const char* t : {"bf16", "f16"}) {
    testing::Params params = kSmallTiles;
    params["T"] = t;
    ScalarType st = std::string(t) == "bf16" ? ScalarType::kBF16 : ScalarType::kF16;
    for_each_backend(params, [st](const testing::Launcher& launch) {
      for (GemmCase c : kShapes)
        run_case(launch, c, st);
      run_case(launch, GemmCase{23, 19, 41, true, true, 1.0, 0.0}, st);
    });
  }
}

// Rows of A exactly 4 KiB apart (K = 1024 f32, 2048 bf16) are packed instead of read in place
// (their broadcasts would share one L1 set: tile_gemm.h, can_read_a_in_place); the neighbours
// K = 1040 and 2050 are read in place. Both paths, default tiles (one K step of several and a
// ragged last one), beta and a transposed B, which does not change A's path.
TEST(GemmKernel, RowsOfAFourKiBApartAndTheirNeighbours) {
  for (const char* t : {"f32", "bf16"}) {
    const ScalarType st = std::string(t) == "bf16" ? ScalarType::kBF16 : ScalarType::kF32;
    const int64_t aliasing_k = st == ScalarType::kBF16 ? 2048 : 1024;
    for_each_backend({{"T", t}}, [&](const testing::Launcher& launch) {
      for (int64_t k : {aliasing_k, aliasing_k + 16, aliasing_k + 2}) {
        run_case(launch, GemmCase{29, 40, k}, st);
        run_case(launch, GemmCase{13, 33, k, false, true, 0.5, 2.0}, st);
      }
    });
  }
}

// Row-major f32 B: the CPU reads a tile a block packs for itself in place (tile_gemm.h,
// gemm_direct_b; gemm.tile's B tiles are shared by blocks and stay packed: the conv tests cover
// the in-place path in generated code), with its last, narrower panel packed. Every width N = 1..49
// (no whole panel, whole panels with and without a packed tail) at M = 13 and 17 (edge
// micro-tiles), K across several steps of the small tiles, with beta = 1 and A transposed
// (packed) or not (read in place too); and B's rows 4 KiB apart (N = 1024: packed) beside
// N = 1040, where it is read in place again. Default and small tiles.
TEST(GemmKernel, RowMajorBReadInPlaceEveryWidth) {
  for (const testing::Params& params : {kSmallTiles, testing::Params{}})
    for_each_backend(params, [](const testing::Launcher& launch) {
      for (int64_t n = 1; n <= 49; ++n) {
        run_case(launch, GemmCase{n % 2 ? 13 : 17, n, 37}, ScalarType::kF32);
        run_case(launch, GemmCase{n % 2 ? 17 : 13, n, 37, true, false, 1.0, 1.0}, ScalarType::kF32);
      }
      for (int64_t n : {1024, 1040})
        run_case(launch, GemmCase{29, n, 300, false, false, 0.5, 1.0}, ScalarType::kF32);
    });
}

// On the CPU the epilogue (alpha, beta, bias, activation) runs per micro-tile inside the last K
// step (cpu_renderer: fused epilogues), on edge micro-tiles of every height and width: M and N
// 1..17 (6 x 16 micro-tiles and their 8-wide narrow form), K in one step and in several with a
// ragged last one, beta = 1, C contiguous and C a transposed view (the any-strides version),
// default and small tiles; and bias with each activation at shapes of several blocks.
TEST(GemmKernel, EpilogueOfEveryMicroTileEdge) {
  for (const testing::Params& params : {testing::Params{}, kSmallTiles}) {
    Expected<testing::Launcher> cpu = testing::cpu_launcher(gemm_source(), params);
    ASSERT_TRUE(cpu.ok()) << cpu.status().to_string();
    {
      const testing::Launcher& launch = *cpu;
      for (int64_t m = 1; m <= 17; ++m)
        for (int64_t n = 1; n <= 17; ++n) {
          const int64_t k = (m + n) % 3 == 0 ? 300 : 5;
          run_case(launch, GemmCase{m, n, k, false, false, 0.5, 1.0, (m + n) % 2 == 1},
                   ScalarType::kF32);
        }
      run_case(launch, GemmCase{200, 270, 300, true, false, 1.0, 1.0, true}, ScalarType::kF32);
      run_case(launch, GemmCase{200, 270, 300, false, true, 2.0, 0.0}, ScalarType::kF32);
    }
  }
  for (int act : {0, 1, 2}) {
    testing::Params params = {{"BIAS", "1"}, {"ACT", std::to_string(act)}};
    for_each_backend(params, [act](const testing::Launcher& launch) {
      for (GemmCase c : {GemmCase{197, 263, 259, false, false, 1.0, 1.0},
                         GemmCase{13, 17, 7, false, false, 0.5, 0.0, true}})
        run_case(launch, c, ScalarType::kF32, act, true);
    });
  }
}

// With K = 0 the K loop runs no step, and the epilogue must still run over every row of every
// block: C = relu(beta * C + bias) (rows and columns not multiples of any tile, several blocks).
// CPU only: PoCL gives other values here (not investigated yet; the op library never launches a
// gemm with K = 0, it fills the result instead).
TEST(GemmKernel, EpilogueRunsWithoutAnyKStep) {
  testing::Params params = kSmallTiles;
  params["BIAS"] = "1";
  params["ACT"] = "1";
  Expected<testing::Launcher> cpu = testing::cpu_launcher(gemm_source(), params);
  ASSERT_TRUE(cpu.ok()) << cpu.status().to_string();
  {
    const testing::Launcher& launch = *cpu;
    const int64_t m = 37, n = 29;
    float unused = 0.0f;  // A [m, 0] and B [0, n] hold no element, but need an address
    std::vector<float> c0 = random_floats(m * n, 91), bias = random_floats(n, 92);
    for (double beta : {0.5, 0.0}) {
      std::vector<float> out = c0;
      ASSERT_TRUE(launch({TensorArg{&unused, ScalarType::kF32, {m, 0}, {}},
                          TensorArg{&unused, ScalarType::kF32, {0, n}, {}},
                          TensorArg{out.data(), ScalarType::kF32, {m, n}, {}},
                          TensorArg{bias.data(), ScalarType::kF32, {n}, {}}, 2.0, beta})
                      .ok());
      std::vector<double> want(m * n);
      for (int64_t i = 0; i < m * n; ++i)
        want[i] = std::max(0.0, beta * c0[i] + bias[i % n]);
      expect_close(out, want, 1e-6, 1e-6, fmt::format("gemm with K = 0, beta = {}", beta));
    }
  }
}

// Operands that are views into larger buffers: a block of rows and columns starting at an offset,
// with the buffer's row stride (as a sub-matrix of a bigger one is).
TEST(GemmKernel, ViewsAtAnOffsetIntoLargerBuffers) {
  for_each_backend(kSmallTiles, [](const testing::Launcher& launch) {
    const int64_t m = 19, n = 23, k = 29, ld = 40, row0 = 3, col0 = 5;
    std::vector<float> big_a = random_floats(50 * ld, 81), big_b = random_floats(50 * ld, 82);
    std::vector<float> big_c(50 * ld, 7.0f);
    int64_t offset = row0 * ld + col0;
    ASSERT_TRUE(launch({TensorArg{big_a.data(), ScalarType::kF32, {m, k}, {ld, 1}, offset},
                        TensorArg{big_b.data(), ScalarType::kF32, {k, n}, {ld, 1}, offset},
                        TensorArg{big_c.data(), ScalarType::kF32, {m, n}, {ld, 1}, offset},
                        TensorArg{nullptr, ScalarType::kF32, {n}, {}}, 1.0, 0.0})
                    .ok());
    std::vector<float> got;
    std::vector<double> want;
    for (int64_t r = 0; r < 50; ++r)
      for (int64_t c = 0; c < ld; ++c) {
        got.push_back(big_c[r * ld + c]);
        bool inside = r >= row0 && r < row0 + m && c >= col0 && c < col0 + n;
        if (!inside) {
          want.push_back(7.0);  // untouched outside the view
          continue;
        }
        double s = 0;
        for (int64_t p = 0; p < k; ++p)
          s += double(big_a[(row0 + r - row0) * ld + col0 + p]) * big_b[(row0 + p) * ld + c];
        want.push_back(s);
      }
    expect_close(got, want, 1e-4, 1e-5, "gemm on views at an offset");
  });
}

TEST(GemmKernel, LaunchErrorsNameTheArgument) {
  auto k = testing::cpu_launcher(gemm_source(), kSmallTiles);
  ASSERT_TRUE(k.ok()) << k.status().to_string();
  std::vector<float> a(6), b(6), c(4);
  TensorArg ta{a.data(), ScalarType::kF32, {2, 3}, {}}, tb{b.data(), ScalarType::kF32, {2, 3}, {}};
  TensorArg tc{c.data(), ScalarType::kF32, {2, 2}, {}}, tbias{nullptr, ScalarType::kF32, {2}, {}};
  EXPECT_EQ((*k)({ta, tb, tc, tbias, 1.0, 0.0}).message(),
            "kernel 'gemm': size K is 3 in 'A' but 2 in 'B'");
  EXPECT_EQ((*k)({ta, tb, tc, tbias, 1.0}).message(),
            "kernel 'gemm' takes 6 arguments (A, B, C, bias, alpha, beta), got 5");
  TensorArg wrong{b.data(), ScalarType::kBF16, {3, 2}, {}};
  EXPECT_EQ((*k)({ta, wrong, tc, tbias, 1.0, 0.0}).message(),
            "kernel 'gemm': argument 'B' must hold f32, got bf16");
}

}  // namespace
}  // namespace tessel::tile
