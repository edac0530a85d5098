// Winograd F(4x4, 3x3) convolution (ops/conv_winograd.h) on every device, with the algorithm
// forced at conv2d's forward and input-gradient points: the forward against conv2d's plain-C++
// reference in double, the input gradient against central differences of that reference (of
// sum(y * g), exact for a linear function up to rounding). Shapes cover padding 0, 1 and 2, odd
// sizes (partial tiles at the right and bottom edges), planes smaller than one tile, batch 1,
// channels that are not multiples of 8, and a layer without a bias.
#include "ops/conv_winograd.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "ops/algorithm_choice.h"
#include "ops/conv_algorithms.h"
#include "ops/op.h"
#include "ops/ops.h"
#include "ops/testing/every_device.h"
#include "ops/testing/expect_close.h"
#include "ops/tuned_launch.h"

namespace tessel::ops {
namespace {

using testing::for_each_device;

struct Case {
  int64_t n, c, h, w, o, pad;
  const char* what;
};

const std::vector<Case>& cases() {
  static const std::vector<Case> c = {
      {2, 5, 9, 11, 6, 1, "odd sizes, padding 1"},
      {1, 3, 7, 6, 4, 0, "batch 1, padding 0"},
      {2, 4, 3, 2, 3, 1, "a plane smaller than a tile"},
      {1, 6, 5, 5, 7, 2, "padding 2"},
      {3, 17, 8, 12, 9, 1, "17 channels, whole tiles"},
      {1, 4, 3, 9, 5, 0, "one output row"},
      // Padding past the window: the input gradient runs at padding 2 - 3 = -1 (a crop).
      {1, 3, 6, 7, 2, 3, "padding 3"},
  };
  return c;
}

std::vector<double> seeded(int64_t count, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<double> v(static_cast<size_t>(count));
  for (double& x : v)
    x = static_cast<float>(u(rng));  // values f32 holds exactly
  return v;
}

Tensor on(Device* d, const std::vector<double>& v, const Shape& shape) {
  std::vector<float> f(v.begin(), v.end());
  return *Tensor::from_vector(f, shape)->to(d);
}

std::vector<double> host(const Tensor& t) {
  std::vector<float> v = *t.to(cpu_device())->to_vector<float>();
  return {v.begin(), v.end()};
}

using testing::expect_close;

// |got - want| / (1 + |want|): F(4x4, 3x3) rounds its transforms (coefficients up to 8) in f32;
// over 17 channels of unscaled values in [-1, 1) (outputs up to ~5) it measured up to 3.2e-5, the
// direct algorithms ~1e-6. conv2d's other algorithms are held to the same 1e-4
// (algorithm_choice_test.cpp).
constexpr double kTol = 1e-4;

TEST(ConvWinograd, ForwardAndInputGradientMatchTheReferenceOnEveryDevice) {
  const OpDef* op = *find_op("conv2d");
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.what);
    const Shape xs{c.n, c.c, c.h, c.w}, ws{c.o, c.c, 3, 3};
    const std::vector<double> x = seeded(c.n * c.c * c.h * c.w, 1), w = seeded(c.o * c.c * 9, 2),
                              b = seeded(c.o, 3);
    const Attrs attrs = conv_attrs({1, 1}, {c.pad, c.pad}, {1, 1}, 1);
    auto reference = [&](const std::vector<double>& xv) {
      return op->reference({{xs, xv}, {ws, w}, {{c.o}, b}}, attrs);
    };
    const RefTensor want = reference(x);
    const std::vector<double> g = seeded(static_cast<int64_t>(want.values.size()), 4);
    // dX by central differences of sum(y * g): y is linear in x, so a step of 1 is exact.
    std::vector<double> dx(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      std::vector<double> xp = x, xm = x;
      xp[i] += 1;
      xm[i] -= 1;
      const RefTensor yp = reference(xp), ym = reference(xm);
      double s = 0;
      for (size_t k = 0; k < g.size(); ++k)
        s += (yp.values[k] - ym.values[k]) * g[k];
      dx[i] = s / 2;
    }
    for_each_device("conv2d", {DType::kF32, DType::kF32, DType::kF32}, [&](Device* d) {
      const Tensor xt = on(d, x, xs), wt = on(d, w, ws), bt = on(d, b, {c.o});
      const Tensor gt = on(d, g, want.shape);
      {
        ForceAlgorithm force("conv2d.forward", "winograd");
        Expected<Tensor> y = op->forward({xt, wt, bt}, attrs, {want.shape, DType::kF32});
        ASSERT_TRUE(y.ok()) << y.status().to_string();
        expect_close(host(*y), want.values, kTol, "forward");
      }
      {  // no bias: winograd_forward itself, against the reference with a zero bias
        Expected<Tensor> y = winograd_forward(xt, wt, bt, false, c.pad, c.pad, want.shape);
        ASSERT_TRUE(y.ok()) << y.status().to_string();
        const RefTensor unbiased =
            op->reference({{xs, x}, {ws, w}, {{c.o}, std::vector<double>(c.o)}}, attrs);
        expect_close(host(*y), unbiased.values, kTol, "forward without a bias");
        // One image a group and 8 output channels a block (a workspace of one byte): the
        // images run one after another through slices of x and y and the same transformed-input
        // buffer, the channels through slices of the weights, y and the bias (9 and 17 channels
        // leave a last block of one).
        Expected<Tensor> grouped =
            winograd_forward(xt, wt, bt, true, c.pad, c.pad, want.shape, int64_t{1});
        ASSERT_TRUE(grouped.ok()) << grouped.status().to_string();
        expect_close(host(*grouped), want.values, kTol, "forward, one image a group");
        Expected<Tensor> dx_grouped = winograd_input_grad(gt, wt, c.pad, c.pad, xs, int64_t{1});
        ASSERT_TRUE(dx_grouped.ok()) << dx_grouped.status().to_string();
        expect_close(host(*dx_grouped), dx, kTol, "input gradient, one image a group");
      }
      ForceAlgorithm force("conv2d.input_grad", "winograd");
      const std::vector<TensorMeta> metas{
          {xs, DType::kF32}, {ws, DType::kF32}, {{c.o}, DType::kF32}};
      BackwardArgs args{{xt, wt, bt}, Tensor(), metas, attrs, gt, {true, false, false}, {}};
      Expected<std::vector<Tensor>> grads = op->backward(args);
      ASSERT_TRUE(grads.ok()) << grads.status().to_string();
      expect_close(host((*grads)[0]), dx, kTol, "input gradient");
    });
  }
}

// The error of F(4x4, 3x3) in f32 at a ResNet layer's depth (256 channels, 14 x 14), against the
// reference in double, relative to the output's largest magnitude (measured ~1e-6; a direct f32
// convolution's is ~1e-7).
TEST(ConvWinograd, ErrorAtResNetDepthIsSmall) {
  const OpDef* op = *find_op("conv2d");
  const int64_t n = 1, c = 256, h = 14, o = 32;
  const Shape xs{n, c, h, h}, ws{o, c, 3, 3};
  std::vector<double> x = seeded(n * c * h * h, 5), w = seeded(o * c * 9, 6), b(o);
  for (double& v : w)  // He-like scale, so outputs are of order 1
    v = static_cast<float>(v / std::sqrt(3.0 * c));
  const Attrs attrs = conv_attrs({1, 1}, {1, 1}, {1, 1}, 1);
  const RefTensor want = op->reference({{xs, x}, {ws, w}, {{o}, b}}, attrs);
  ForceAlgorithm force("conv2d.forward", "winograd");
  Expected<Tensor> y =
      op->forward({on(cpu_device(), x, xs), on(cpu_device(), w, ws), on(cpu_device(), b, {o})},
                  attrs, {want.shape, DType::kF32});
  ASSERT_TRUE(y.ok()) << y.status().to_string();
  const std::vector<double> got = host(*y);
  double worst = 0, scale = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    worst = std::max(worst, std::abs(got[i] - want.values[i]));
    scale = std::max(scale, std::abs(want.values[i]));
  }
  std::printf("winograd f32 at 256 channels: max abs error %.3g, relative to max |y| %.3g\n", worst,
              worst / scale);
  EXPECT_LE(worst / scale, 2e-5);
}

// Winograd applies to 3x3 / stride 1 / dilation 1 / one group only, and a forced choice is what
// runs (its kernels are the ones launched).
TEST(ConvWinograd, AppliesToUnitStride3x3LayersOnly) {
  // N C H W O KH KW SH SW PH PW DH DW G
  EXPECT_TRUE(conv_winograd_fits({2, 16, 9, 9, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1}));
  EXPECT_TRUE(conv_winograd_fits({2, 16, 9, 9, 16, 3, 3, 1, 1, 0, 0, 1, 1, 1}));
  EXPECT_FALSE(conv_winograd_fits({2, 16, 9, 9, 16, 3, 3, 2, 2, 1, 1, 1, 1, 1}));
  EXPECT_FALSE(conv_winograd_fits({2, 16, 9, 9, 16, 1, 1, 1, 1, 0, 0, 1, 1, 1}));
  EXPECT_FALSE(conv_winograd_fits({2, 16, 9, 9, 16, 3, 3, 1, 1, 2, 2, 2, 2, 1}));
  EXPECT_FALSE(conv_winograd_fits({2, 16, 9, 9, 16, 3, 3, 1, 1, 1, 1, 1, 1, 2}));
  const Tensor x = on(cpu_device(), seeded(2 * 16 * 9 * 9, 1), {2, 16, 9, 9});
  const Tensor w = on(cpu_device(), seeded(16 * 16 * 9, 2), {16, 16, 3, 3});
  const Tensor b = on(cpu_device(), seeded(16, 3), {16});
  ForceAlgorithm force("conv2d.forward", "winograd");
  record_tunable_launches(true);
  ASSERT_TRUE(conv2d(x, w, b, {1, 1}, {1, 1}, {1, 1}, 1).ok());
  record_tunable_launches(false);
  bool batched = false;
  for (const TunableLaunch& l : recorded_tunable_launches())
    batched = batched || l.key.kernel == "batched_gemm";
  EXPECT_TRUE(batched) << "the forced Winograd forward launches its batched gemm";
}

}  // namespace
}  // namespace tessel::ops
