// The kernels in kernels/*.tile other than gemm, on every backend present, against plain C++
// references in double: element-wise unary and binary (with broadcasting through stride-0 views),
// casts, row softmax, layer norm, row sum/max, batched gemm. Shapes include 1, primes and
// non-multiples of every tile size. Tolerances: 2e-6 absolute + 1e-5 relative for f32 results
// (a few ulp of the targets' math libraries, accumulation over a few thousand terms); for bf16 and
// f16 results (inputs rounded by the test, math in f32, one rounding at the store) one unit in the
// last place, 2^-8 and 2^-10 relative; casts must match the test's own rounding exactly.
#include <gtest/gtest.h>

#include <cmath>

#include "tile/parse/parser.h"
#include "tile/run/test_backends.h"
#include "tile/run/test_util.h"

namespace tessel::tile {
namespace {

using testing::expect_close;
using testing::Launcher;
using testing::Params;
using testing::random_floats;

const Kernel& kernel(const std::string& file, const std::string& name) {
  static std::map<std::string, Kernel> cache;
  if (!cache.count(name)) {
    auto all = parse_tile_file(testing::kernels_dir() + "/" + file);
    EXPECT_TRUE(all.ok()) << all.status().to_string();
    if (all.ok())
      for (const Kernel& x : *all) cache.emplace(x.name, x);
  }
  return cache.at(name);
}

template <typename Fn>
void on_every_backend(const std::string& file, const std::string& name, const Params& params, Fn fn) {
  for (const testing::Backend& b : testing::test_backends()) {
    SCOPED_TRACE("backend " + b.name);
    auto launch = b.compile(kernel(file, name), params);
    ASSERT_TRUE(launch.ok()) << launch.status().to_string();
    fn(*launch);
  }
}

TensorArg tensor(std::vector<float>& v, std::vector<int64_t> shape, std::vector<int64_t> strides = {}) {
  return TensorArg{v.data(), ScalarType::kF32, std::move(shape), std::move(strides)};
}

const std::vector<std::array<int64_t, 3>> kShapes3 = {{1, 1, 1}, {1, 3, 5}, {2, 17, 300}, {3, 4, 257}};

double unary_ref(int op, double x) {
  switch (op) {
    case 1: return x > 0 ? x : 0;
    case 2: return 0.5 * x * (1 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
    case 3: return 1 / (1 + std::exp(-x));
    case 4: return std::tanh(x);
    case 5: return std::exp(x);
    case 6: return std::log(x);
    case 7: return std::sqrt(x);
    case 8: return 1 / std::sqrt(x);
    case 9: return std::fabs(x);
    case 10: return -x;
    case 11: return std::erf(x);
    default: return x;
  }
}

TEST(ElementwiseKernel, UnaryOps) {
  for (int op = 0; op <= 11; ++op) {
    bool positive = op == 6 || op == 7 || op == 8;
    on_every_backend("elementwise.tile", "unary", {{"OP", std::to_string(op)}}, [&](const Launcher& launch) {
      for (auto [d0, d1, d2] : kShapes3) {
        int64_t n = d0 * d1 * d2;
        std::vector<float> x = random_floats(n, 7, positive ? 0.1f : -3.0f, 3.0f), y(n, -7.0f);
        const double scale = 0.75;
        ASSERT_TRUE(launch({tensor(x, {d0, d1, d2}), tensor(y, {d0, d1, d2}), scale}).ok());
        std::vector<double> want(n);
        for (int64_t i = 0; i < n; ++i) want[i] = unary_ref(op, scale * x[i]);
        expect_close(y, want, 2e-6, 1e-5, fmt::format("unary op {} [{}, {}, {}]", op, d0, d1, d2));
      }
    });
  }
}

TEST(ElementwiseKernel, BinaryOpsBroadcastThroughZeroStrides) {
  for (int op = 0; op <= 6; ++op) {
    on_every_backend("elementwise.tile", "binary", {{"OP", std::to_string(op)}}, [&](const Launcher& launch) {
      for (auto [d0, d1, d2] : kShapes3) {
        int64_t n = d0 * d1 * d2;
        std::vector<float> x = random_floats(n, 11, op == 6 ? 0.1f : -2.0f, 2.0f);
        // y is a row of d2 values broadcast over d0 and d1 (a bias), stored once.
        std::vector<float> y = random_floats(d2, 12, 0.5f, 2.0f), z(n, -7.0f);
        ASSERT_TRUE(launch({tensor(x, {d0, d1, d2}), tensor(y, {d0, d1, d2}, {0, 0, 1}), tensor(z, {d0, d1, d2})}).ok());
        std::vector<double> want(n);
        for (int64_t i = 0; i < n; ++i) {
          double a = x[i], b = y[i % d2];
          want[i] = op == 1 ? a - b : op == 2 ? a * b : op == 3 ? a / b : op == 4 ? std::max(a, b)
                  : op == 5 ? std::min(a, b) : op == 6 ? std::pow(a, b) : a + b;
        }
        expect_close(z, want, 2e-6, 1e-5, fmt::format("binary op {} [{}, {}, {}]", op, d0, d1, d2));
      }
    });
  }
}

TEST(ElementwiseKernel, CastsRoundToNearestEven) {
  for (const char* to : {"bf16", "f16"}) {
    on_every_backend("elementwise.tile", "cast", {{"U", to}}, [&](const Launcher& launch) {
      int64_t n = 3 * 5 * 257;
      std::vector<float> x = random_floats(n, 21, -70000.0f, 70000.0f);
      for (int64_t i = 0; i < 100; ++i) x[i] = std::ldexp(x[i + 200], -30);  // f16 subnormals and zeros
      std::vector<uint16_t> y(n, 0xffff);
      TensorArg out{y.data(), std::string(to) == "bf16" ? ScalarType::kBF16 : ScalarType::kF16, {3, 5, 257}, {}};
      ASSERT_TRUE(launch({tensor(x, {3, 5, 257}), out}).ok());
      int misses = 0;
      for (int64_t i = 0; i < n; ++i) {
        bool bf = std::string(to) == "bf16";
        bool overflow = !bf && std::fabs(x[i]) >= 65520.0f;
        uint16_t want = bf ? testing::to_bf16_bits(x[i]) : overflow ? uint16_t(x[i] < 0 ? 0xfc00 : 0x7c00)
                                                                    : testing::to_f16_bits(x[i]);
        if (y[i] != want && ++misses <= 5) ADD_FAILURE() << to << " of " << x[i] << ": got " << y[i] << " want " << want;
      }
      EXPECT_EQ(misses, 0);
    });
  }
}

// An integer dtype parameter specialised to i8, u8 and i16: C computes their sums in int, and the
// renderers narrow them back, so a sum wraps around before the comparison sees it (as PyTorch's).
template <typename Int>
void check_narrow_sum(const char* type, ScalarType scalar, std::vector<Int> x, std::vector<Int> want_sum) {
  static const std::string source =
      "kernel narrow<T: dtype = i32>(X: T[N], Y: T[N], C: bool[N]) {\n"
      "  grid (cdiv(N, 64)) as (b) {\n"
      "    parallel (i) in [64] {\n"
      "      s = X[b * 64 + i] + X[b * 64 + i]\n"
      "      Y[b * 64 + i] = s\n"
      "      C[b * 64 + i] = s < 0\n"
      "    }\n"
      "  }\n"
      "}\n";
  auto parsed = parse_tile(source, "narrow.tile");
  ASSERT_TRUE(parsed.ok()) << parsed.status().to_string();
  for (const testing::Backend& b : testing::test_backends()) {
    SCOPED_TRACE("backend " + b.name + ", T = " + type);
    auto launch = b.compile((*parsed)[0], {{"T", type}});
    ASSERT_TRUE(launch.ok()) << launch.status().to_string();
    const int64_t n = static_cast<int64_t>(x.size());
    std::vector<Int> y(n, 0);
    std::vector<uint8_t> c(n, 7);
    ASSERT_TRUE((*launch)({TensorArg{x.data(), scalar, {n}, {}}, TensorArg{y.data(), scalar, {n}, {}},
                           TensorArg{c.data(), ScalarType::kBool, {n}, {}}}).ok());
    EXPECT_EQ(y, want_sum);
    for (int64_t i = 0; i < n; ++i) EXPECT_EQ(c[i], want_sum[i] < 0 ? 1 : 0) << "element " << i;
  }
}

TEST(IntegerKernel, NarrowIntegerArithmeticWrapsAround) {
  check_narrow_sum<int8_t>("i8", ScalarType::kI8, {100, -100, 64, 1, -64}, {-56, 56, -128, 2, -128});
  check_narrow_sum<uint8_t>("u8", ScalarType::kU8, {200, 128, 1, 0}, {144, 0, 2, 0});
  check_narrow_sum<int16_t>("i16", ScalarType::kI16, {20000, -20000, 16384, 1}, {-25536, 25536, -32768, 2});
}

const std::vector<std::pair<int64_t, int64_t>> kRows = {{1, 1}, {3, 5}, {17, 256}, {5, 600}, {64, 257}};

TEST(SoftmaxKernel, RowsSumToOneAndMatchReference) {
  on_every_backend("softmax.tile", "softmax", {}, [&](const Launcher& launch) {
    for (auto [m, n] : kRows) {
      std::vector<float> x = random_floats(m * n, 31, -8.0f, 8.0f), y(m * n, -1.0f);
      ASSERT_TRUE(launch({tensor(x, {m, n}), tensor(y, {m, n})}).ok());
      std::vector<double> want(m * n);
      for (int64_t r = 0; r < m; ++r) {
        double mx = -INFINITY, sum = 0;
        for (int64_t c = 0; c < n; ++c) mx = std::max(mx, double(x[r * n + c]));
        for (int64_t c = 0; c < n; ++c) sum += std::exp(x[r * n + c] - mx);
        for (int64_t c = 0; c < n; ++c) want[r * n + c] = std::exp(x[r * n + c] - mx) / sum;
      }
      expect_close(y, want, 2e-6, 1e-5, fmt::format("softmax [{}, {}]", m, n));
    }
  });
}

TEST(LayerNormKernel, MatchesReference) {
  on_every_backend("layernorm.tile", "layernorm", {}, [&](const Launcher& launch) {
    for (auto [m, n] : kRows) {
      std::vector<float> x = random_floats(m * n, 41, -2.0f, 6.0f), y(m * n, -1.0f);
      std::vector<float> gamma = random_floats(n, 42, 0.5f, 1.5f), beta = random_floats(n, 43);
      const double eps = 1e-5;
      ASSERT_TRUE(launch({tensor(x, {m, n}), tensor(gamma, {n}), tensor(beta, {n}), tensor(y, {m, n}), eps}).ok());
      std::vector<double> want(m * n);
      for (int64_t r = 0; r < m; ++r) {
        double mean = 0, var = 0;
        for (int64_t c = 0; c < n; ++c) mean += x[r * n + c];
        mean /= n;
        for (int64_t c = 0; c < n; ++c) var += (x[r * n + c] - mean) * (x[r * n + c] - mean);
        var /= n;
        for (int64_t c = 0; c < n; ++c)
          want[r * n + c] = (x[r * n + c] - mean) / std::sqrt(var + eps) * gamma[c] + beta[c];
      }
      expect_close(y, want, 2e-5, 1e-5, fmt::format("layernorm [{}, {}]", m, n));
    }
  });
}

TEST(ReduceKernel, RowSumAndMax) {
  for (int op : {0, 1}) {
    on_every_backend("reduce.tile", "reduce_rows", {{"OP", std::to_string(op)}}, [&](const Launcher& launch) {
      for (auto [m, n] : kRows) {
        std::vector<float> x = random_floats(m * n, 51, -4.0f, 3.0f), y(m, 99.0f);
        ASSERT_TRUE(launch({tensor(x, {m, n}), tensor(y, {m})}).ok());
        std::vector<double> want(m);
        for (int64_t r = 0; r < m; ++r) {
          double acc = op == 0 ? 0.0 : -INFINITY;
          for (int64_t c = 0; c < n; ++c) acc = op == 0 ? acc + x[r * n + c] : std::max(acc, double(x[r * n + c]));
          want[r] = acc;
        }
        expect_close(y, want, 1e-5, 1e-5, fmt::format("reduce op {} [{}, {}]", op, m, n));
      }
    });
  }
}

// 16-bit tensors: round `v` in place to `type` and return the bit patterns.
std::vector<uint16_t> round_to(ScalarType type, std::vector<float>& v) {
  std::vector<uint16_t> bits(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    bits[i] = type == ScalarType::kBF16 ? testing::to_bf16_bits(v[i]) : testing::to_f16_bits(v[i]);
    v[i] = type == ScalarType::kBF16 ? testing::from_bf16_bits(bits[i]) : testing::from_f16_bits(bits[i]);
  }
  return bits;
}

std::vector<float> from_bits(ScalarType type, const std::vector<uint16_t>& bits) {
  std::vector<float> v(bits.size());
  for (size_t i = 0; i < bits.size(); ++i)
    v[i] = type == ScalarType::kBF16 ? testing::from_bf16_bits(bits[i]) : testing::from_f16_bits(bits[i]);
  return v;
}

TEST(SixteenBitKernels, SoftmaxAndLayerNormInBf16AndF16) {
  for (ScalarType type : {ScalarType::kBF16, ScalarType::kF16}) {
    const char* name = scalar_type_name(type);
    double ulp = type == ScalarType::kBF16 ? 1.0 / 256 : 1.0 / 1024;
    on_every_backend("softmax.tile", "softmax", {{"T", name}}, [&](const Launcher& launch) {
      int64_t m = 5, n = 300;
      std::vector<float> x = random_floats(m * n, 71, -4.0f, 4.0f);
      std::vector<uint16_t> xb = round_to(type, x), yb(m * n);
      ASSERT_TRUE(launch({TensorArg{xb.data(), type, {m, n}, {}}, TensorArg{yb.data(), type, {m, n}, {}}}).ok());
      std::vector<double> want(m * n);
      for (int64_t r = 0; r < m; ++r) {
        double mx = -INFINITY, sum = 0;
        for (int64_t c = 0; c < n; ++c) mx = std::max(mx, double(x[r * n + c]));
        for (int64_t c = 0; c < n; ++c) sum += std::exp(x[r * n + c] - mx);
        for (int64_t c = 0; c < n; ++c) want[r * n + c] = std::exp(x[r * n + c] - mx) / sum;
      }
      expect_close(from_bits(type, yb), want, 1e-7, ulp, fmt::format("softmax {}", name));
    });
    on_every_backend("layernorm.tile", "layernorm", {{"T", name}}, [&](const Launcher& launch) {
      int64_t m = 3, n = 257;
      std::vector<float> x = random_floats(m * n, 72, -2.0f, 2.0f), g = random_floats(n, 73, 0.5f, 1.5f);
      std::vector<float> b = random_floats(n, 74);
      std::vector<uint16_t> xb = round_to(type, x), gb = round_to(type, g), bb = round_to(type, b), yb(m * n);
      ASSERT_TRUE(launch({TensorArg{xb.data(), type, {m, n}, {}}, TensorArg{gb.data(), type, {n}, {}},
                          TensorArg{bb.data(), type, {n}, {}}, TensorArg{yb.data(), type, {m, n}, {}}, 1e-5})
                      .ok());
      std::vector<double> want(m * n);
      for (int64_t r = 0; r < m; ++r) {
        double mean = 0, var = 0;
        for (int64_t c = 0; c < n; ++c) mean += x[r * n + c];
        mean /= n;
        for (int64_t c = 0; c < n; ++c) var += (x[r * n + c] - mean) * (x[r * n + c] - mean);
        var /= n;
        for (int64_t c = 0; c < n; ++c) want[r * n + c] = (x[r * n + c] - mean) / std::sqrt(var + 1e-5) * g[c] + b[c];
      }
      // Values near zero: the rounding of the sum before the scale can cost an ulp of the larger
      // terms, so the absolute part is an ulp of the typical magnitude (~2).
      expect_close(from_bits(type, yb), want, 2 * ulp, ulp, fmt::format("layernorm {}", name));
    });
  }
}

TEST(BatchedGemmKernel, BatchesAndBroadcastOperand) {
  Params small = {{"BM", "16"}, {"BN", "24"}, {"BK", "8"}};
  on_every_backend("batched_gemm.tile", "batched_gemm", small, [&](const Launcher& launch) {
    for (auto [z, m, n, k] : std::vector<std::array<int64_t, 4>>{{1, 1, 1, 1}, {3, 17, 29, 31}, {2, 40, 5, 64}}) {
      std::vector<float> a = random_floats(z * m * k, 61), b = random_floats(k * n, 62), c(z * m * n, 0.0f);
      // B is one matrix broadcast over the batch: stride 0 on its batch dimension.
      ASSERT_TRUE(launch({tensor(a, {z, m, k}), tensor(b, {z, k, n}, {0, n, 1}), tensor(c, {z, m, n}), 2.0, 0.0}).ok());
      std::vector<double> want(z * m * n);
      for (int64_t q = 0; q < z; ++q)
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < n; ++j) {
            double s = 0;
            for (int64_t p = 0; p < k; ++p) s += double(a[(q * m + i) * k + p]) * b[p * n + j];
            want[(q * m + i) * n + j] = 2.0 * s;
          }
      expect_close(c, want, 1e-4, 1e-5, fmt::format("batched_gemm z={} m={} n={} k={}", z, m, n, k));
    }
  });
}

}  // namespace
}  // namespace tessel::tile
