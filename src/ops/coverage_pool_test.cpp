// Pooling's options (ops/pool_ops.cpp) against PyTorch on every device the op library launches
// on: src/ops/testdata/pool_cases.txt (tools/pytorch/coverage_fixtures.py) holds ceil_mode,
// dilation, padding, count_include_pad, divisor_override, ONNX's asymmetric pads (also beyond half
// the window), NaN and -inf inputs, 1-d and 3-d windows, each with PyTorch's output, indices and
// input gradient. Random shapes against the C++ reference and finite differences are in
// ops_test.cpp; here also the errors PyTorch raises and the typed functions of ops.h.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <cmath>

#include "ops/op.h"
#include "ops/ops.h"
#include "ops/testing/edge_check.h"
#include "ops/testing/fixture.h"

namespace tessel::ops {
namespace {

using namespace testing;  // NOLINT: the helpers of ops/testing/

TEST(OpPoolEdgeCases, MatchPyTorchOnEveryDevice) {
  const std::vector<FixtureCase> cases = read_fixture("pool");
  EXPECT_GE(cases.size(), 19u);
  for (const FixtureCase& c : cases) {
    for_each_device(c.op, {DType::kF32}, [&](Device* d) {
      SCOPED_TRACE(c.label);
      const RefTensor& xr = c.tensor("x");
      Tensor x = floats(d, c.floats("x"), xr.shape);
      Expected<Tensor> y = run(c.op, {x}, c.attrs);
      ASSERT_TRUE(y.ok()) << y.status().to_string();
      EXPECT_EQ(y->shape(), c.tensor("y").shape);
      expect_matches(host(y), c.tensor("y").values, 1e-6, 1e-5, "output");
      if (c.has("indices")) {
        Expected<Tensor> idx = run(c.op + "_indices", {x}, c.attrs);
        ASSERT_TRUE(idx.ok()) << idx.status().to_string();
        std::vector<int64_t> got = idx->to_vector<int64_t>().value();
        const std::vector<double>& want = c.tensor("indices").values;
        ASSERT_EQ(got.size(), want.size());
        for (size_t i = 0; i < got.size(); ++i)
          EXPECT_EQ(got[i], static_cast<int64_t>(want[i])) << "index " << i;
      }
      const RefTensor& gy = c.tensor("gy");
      std::vector<Tensor> g = backward_of(c.op, {x}, floats(d, c.floats("gy"), gy.shape), c.attrs);
      expect_matches(host(g[0]), c.tensor("gx").values, 1e-6, 1e-5, "input gradient");
    });
  }
}

// The errors PyTorch raises (tools/pytorch/coverage_fixtures.py prints them), and option checks.
TEST(OpPoolEdgeCases, InvalidOptionsAreErrors) {
  for_each_device("max_pool2d", {DType::kF32}, [&](Device* d) {
    Tensor x = floats(d, iota(16), {1, 1, 4, 4});
    PoolOptions pad2;
    pad2.stride = {1};
    pad2.padding = {2};
    expect_error(max_pool(x, {3, 3}, pad2), Code::kInvalidArgument,
                 {"max_pool2d: padding 2 is more than half the window 3"});
    PoolOptions zero;
    zero.divisor_override = 0;
    expect_error(avg_pool(x, {2, 2}, zero), Code::kInvalidArgument,
                 {"avg_pool2d: divisor_override must not be 0"});
    expect_error(max_pool(x, {5, 5}), Code::kInvalidArgument,
                 {"max_pool2d: output size is too small"});
    PoolOptions both;
    both.padding = {1};
    both.pads = {1, 1, 0, 0};
    expect_error(max_pool(x, {2, 2}, both), Code::kInvalidArgument, {"not both"});
    PoolOptions short_pads;
    short_pads.pads = {1, 1};
    expect_error(max_pool(x, {2, 2}, short_pads), Code::kInvalidArgument,
                 {"pads must be 4 integers"});
    PoolOptions dilated;
    dilated.dilation = {2};
    expect_error(avg_pool(x, {2, 2}, dilated), Code::kInvalidArgument,
                 {"avg_pool2d: unknown attribute 'dilation'"});
    expect_error(max_pool(x, {2, 2, 2}), Code::kInvalidArgument,
                 {"max_pool3d: needs an f32 input [N, C, 3 spatial]"});
  });
}

// A window of padding only (dilation 3, padding 1 over 2 x 2): PyTorch gives -inf (and an index
// outside the plane); here -inf and index -1, and no gradient from it.
TEST(OpPoolEdgeCases, WindowOfPaddingOnly) {
  for_each_device("max_pool2d", {DType::kF32}, [&](Device* d) {
    Tensor x = floats(d, {1, 2, 3, 4}, {1, 1, 2, 2});
    PoolOptions o;
    o.stride = {1};
    o.padding = {1};
    o.dilation = {3};
    Expected<std::pair<Tensor, Tensor>> r = max_pool_with_indices(x, {2, 2}, o);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_EQ(host(r->first), std::vector<float>{-INFINITY});
    EXPECT_EQ(r->second.to_vector<int64_t>().value(), std::vector<int64_t>{-1});
    std::vector<Tensor> g =
        backward_of("max_pool2d", {x}, floats(d, {1}, {1, 1, 1, 1}), pool_attrs({2, 2}, o));
    EXPECT_EQ(host(g[0]), (std::vector<float>{0, 0, 0, 0}));
  });
}

// A 2-d max pooling case: x [n, c, h, w], window kh x kw, stride, padding, ceil_mode.
struct MaxPoolCase {
  int64_t n, c, h, w, kh, kw, sh, sw, ph, pw;
  bool ceil = false;
};

// max_pool2d and its input gradient on every device against a plain scan with padding in
// PyTorch's order (the first inside element, then any larger one or any NaN; the gradient of
// each output added at its element). Values from {0, 1, 2} with NaN and -inf make ties in most
// windows.
void expect_max_pool_matches_scan(const MaxPoolCase& s, uint32_t seed) {
  PoolOptions o;
  o.stride = {s.sh, s.sw};
  o.padding = {s.ph, s.pw};
  o.ceil_mode = s.ceil;
  const Attrs attrs = pool_attrs({s.kh, s.kw}, o);
  const OpDef* op = *find_op("max_pool2d");
  const Shape out = op->infer({{{s.n, s.c, s.h, s.w}, DType::kF32}}, attrs)->shape;
  const int64_t oh = out[2], ow = out[3], planes = s.n * s.c;
  std::vector<float> x(planes * s.h * s.w), gy(planes * oh * ow);
  uint32_t state = seed;
  auto next = [&] {
    state = state * 1664525u + 1013904223u;
    return state >> 8;
  };
  for (float& v : x) {
    const uint32_t r = next() % 20;
    v = r == 0 ? NAN : (r == 1 ? -INFINITY : static_cast<float>(r % 3));
  }
  for (float& v : gy)
    v = static_cast<float>(next() % 1000) / 100.0f + 1.0f;
  std::vector<double> want_y(gy.size()), want_gx(x.size(), 0.0);
  for (int64_t p = 0; p < planes; ++p)
    for (int64_t i = 0; i < oh; ++i)
      for (int64_t j = 0; j < ow; ++j) {
        float best = -INFINITY;
        int64_t at = -1;
        for (int64_t a = 0; a < s.kh; ++a)
          for (int64_t b = 0; b < s.kw; ++b) {
            const int64_t r = i * s.sh - s.ph + a, col = j * s.sw - s.pw + b;
            if (r < 0 || r >= s.h || col < 0 || col >= s.w) continue;
            const int64_t k = (p * s.h + r) * s.w + col;
            if (at < 0 || x[k] > best || std::isnan(x[k])) {
              best = x[k];
              at = k;
            }
          }
        const int64_t k = (p * oh + i) * ow + j;
        want_y[k] = best;
        want_gx[at] += gy[k];
      }
  for_each_device("max_pool2d", {DType::kF32}, [&](Device* d) {
    SCOPED_TRACE(fmt::format("{} x {} x {} x {}, window {} x {}, stride {} x {}, padding {} x {}{}",
                             s.n, s.c, s.h, s.w, s.kh, s.kw, s.sh, s.sw, s.ph, s.pw,
                             s.ceil ? ", ceil_mode" : ""));
    Tensor xt = floats(d, x, {s.n, s.c, s.h, s.w});
    std::vector<float> y = host(run("max_pool2d", {xt}, attrs));
    ASSERT_EQ(y.size(), want_y.size());
    for (size_t i = 0; i < y.size(); ++i)
      EXPECT_TRUE(y[i] == want_y[i] || (std::isnan(y[i]) && std::isnan(want_y[i])))
          << "output " << i << ": " << y[i] << ", want " << want_y[i];
    std::vector<Tensor> g =
        backward_of("max_pool2d", {xt}, floats(d, gy, {s.n, s.c, oh, ow}), attrs);
    const std::vector<float> gx = host(g[0]);
    ASSERT_EQ(gx.size(), want_gx.size());
    for (size_t i = 0; i < gx.size(); ++i)
      EXPECT_NEAR(gx[i], want_gx[i], 1e-4) << "input gradient " << i;
  });
}

// Windows that tile the rows of every plane (the CPU's max_pool_rows and its gradient, which
// find a window's element column by column). The shapes give blocks as wide as rows of 3, 5, 14
// and 20 windows, 32-wide blocks with a short last one (36 windows), a last block of rows cut
// short, columns left over (KW = 3 over 10 columns, KW = 4 over 17) and windows of 1, 3 and 4
// columns.
TEST(OpPoolEdgeCases, TilingWindowsPickPyTorchsElement) {
  for (const MaxPoolCase& s :
       {MaxPoolCase{2, 3, 6, 10, 2, 2, 2, 2, 0, 0}, MaxPoolCase{1, 5, 4, 28, 2, 2, 2, 2, 0, 0},
        MaxPoolCase{1, 3, 2, 40, 2, 2, 2, 2, 0, 0}, MaxPoolCase{2, 2, 6, 10, 3, 3, 3, 3, 0, 0},
        MaxPoolCase{1, 2, 4, 10, 2, 3, 2, 3, 0, 0}, MaxPoolCase{1, 2, 4, 72, 2, 2, 2, 2, 0, 0},
        MaxPoolCase{1, 3, 4, 17, 2, 4, 2, 4, 0, 0}, MaxPoolCase{2, 1, 6, 9, 3, 1, 3, 1, 0, 0}})
    expect_max_pool_matches_scan(s, 7);
}

// Overlapping and padded windows whose output rows fit one block (the CPU's max_pool_window_rows
// and its gradient, which copy the window's rows and gather the gradient per input row), where
// overlapping windows choose the same element (its gradients add). Shapes: ResNet's 3 x 3 /
// stride 2 / padding 1 at odd and even sizes, strides 1 and 3, windows of 1 to 4 columns and 1
// to 5 rows, padding on one axis only, columns and rows no window reads (7 columns, window 2,
// stride 3), rows as wide as 128 outputs, and ceil_mode's last partial window.
TEST(OpPoolEdgeCases, OverlappingWindowsPickPyTorchsElement) {
  for (const MaxPoolCase& s :
       {MaxPoolCase{2, 3, 9, 9, 3, 3, 2, 2, 1, 1}, MaxPoolCase{1, 2, 12, 14, 3, 3, 2, 2, 1, 1},
        MaxPoolCase{1, 3, 7, 8, 3, 3, 1, 1, 1, 1}, MaxPoolCase{1, 2, 11, 10, 5, 4, 3, 3, 2, 2},
        MaxPoolCase{2, 1, 6, 7, 2, 2, 3, 3, 0, 0}, MaxPoolCase{1, 2, 5, 9, 1, 3, 1, 2, 0, 1},
        MaxPoolCase{1, 2, 8, 6, 4, 1, 2, 1, 2, 0}, MaxPoolCase{1, 1, 4, 256, 3, 3, 2, 2, 1, 1},
        MaxPoolCase{1, 2, 8, 8, 3, 3, 2, 2, 0, 0, true}})
    expect_max_pool_matches_scan(s, 11);
}

// The 2-d functions of the first version still take windows of one integer.
TEST(OpPoolEdgeCases, TwoDimensionalFormsKeepTheirNames) {
  for_each_device("avg_pool2d", {DType::kF32}, [&](Device* d) {
    Tensor x = floats(d, iota(16), {1, 1, 4, 4});
    EXPECT_EQ(host(avg_pool2d(x, {2})), (std::vector<float>{2.5f, 4.5f, 10.5f, 12.5f}));
    EXPECT_EQ(host(max_pool2d(x, {2}, {2}, {1})),
              (std::vector<float>{0, 2, 3, 8, 10, 11, 12, 14, 15}));
  });
}

}  // namespace
}  // namespace tessel::ops
