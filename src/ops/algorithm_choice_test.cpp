// Algorithm choices (ops/algorithm_choice.h): every algorithm of every conv2d point gives the
// result of a plain-C++ convolution in double (forward, input and weight gradient), a forced
// algorithm is the one that runs, a database choice is taken for its shape and the nearest one
// and ignored where it does not apply, and recording names each point's rule.
#include "ops/algorithm_choice.h"

#include <gtest/gtest.h>

#include <functional>
#include <random>
#include <set>

#include "ops/conv_algorithms.h"
#include "ops/op.h"
#include "ops/ops.h"
#include "ops/testing/expect_close.h"
#include "ops/testing/temp_tune_db.h"
#include "ops/tuned_launch.h"
#include "tune/choices.h"

namespace tessel::ops {
namespace {

// N C H W O KH KW SH SW PH PW DH DW G.
struct Case {
  std::vector<int64_t> sizes;
  const char* what;
  bool f32_only = false;  // a path that takes f32 operands only, over 196 positions or more
};

const std::vector<Case>& cases() {
  static const std::vector<Case> c = {
      {{2, 16, 9, 11, 24, 3, 3, 1, 1, 1, 1, 1, 1, 1}, "3x3 same"},
      {{2, 16, 10, 9, 16, 3, 3, 2, 2, 1, 1, 1, 1, 1}, "3x3 stride 2"},
      {{1, 32, 7, 8, 16, 1, 1, 2, 2, 0, 0, 1, 1, 1}, "1x1 stride 2"},
      {{3, 20, 5, 7, 18, 1, 1, 1, 1, 0, 0, 1, 1, 1}, "1x1 folded, 35 positions"},
      {{2, 17, 9, 5, 16, 1, 1, 2, 2, 0, 0, 1, 1, 1}, "1x1 stride 2 folded, 15 positions"},
      // 1x1 over more than 192 gemm rows (conv_pointwise in f32): forward, input gradient, the
      // forward over a stride-2 layer's subsampled input (196 positions and more: f32 only, as
      // the bf16 weight gradient 196 deep misses 2e-2 by a little, on a path not changed
      // here), and over images folded (20 and fewer positions).
      {{1, 17, 14, 15, 200, 1, 1, 1, 1, 0, 0, 1, 1, 1}, "1x1, 200 output channels", true},
      {{1, 200, 14, 14, 17, 1, 1, 1, 1, 0, 0, 1, 1, 1}, "1x1, 200 input channels", true},
      {{1, 16, 27, 28, 200, 1, 1, 2, 2, 0, 0, 1, 1, 1}, "1x1 stride 2, 200 output channels", true},
      {{2, 200, 3, 5, 201, 1, 1, 1, 1, 0, 0, 1, 1, 1}, "1x1 folded, 200 channels in and out"},
      {{3, 17, 7, 9, 200, 1, 1, 2, 2, 0, 0, 1, 1, 1}, "1x1 stride 2 folded, 200 output channels"},
      {{2, 3, 12, 13, 16, 7, 7, 2, 2, 3, 3, 1, 1, 1}, "RGB stem 7x7"},
      {{1, 32, 8, 8, 32, 3, 3, 1, 1, 2, 2, 2, 2, 2}, "groups 2, dilation 2"},
      {{2, 8, 6, 7, 8, 3, 2, 1, 2, 1, 0, 1, 1, 1}, "shallow, ragged"},
      // Stems (unfolded forward and weight gradient, columns for the input gradient) and
      // stride-2 input gradients: batch 1, odd and even sizes, padding 0 and 1, 1 to 17 channels.
      {{1, 3, 11, 10, 16, 7, 7, 2, 2, 3, 3, 1, 1, 1}, "RGB stem 7x7, batch 1"},
      {{2, 1, 9, 12, 8, 5, 5, 2, 2, 0, 0, 1, 1, 1}, "one channel 5x5 stride 2"},
      {{2, 3, 10, 9, 12, 3, 3, 2, 2, 0, 0, 1, 1, 1}, "RGB 3x3 stride 2 unpadded"},
      {{1, 17, 9, 10, 20, 3, 3, 2, 2, 1, 1, 1, 1, 1}, "17 channels 3x3 stride 2"},
      {{2, 24, 11, 12, 32, 3, 3, 2, 2, 1, 1, 1, 1, 1}, "3x3 stride 2, odd height"},
      {{1, 20, 8, 9, 18, 3, 3, 2, 2, 0, 0, 1, 1, 1}, "3x3 stride 2 unpadded, odd width"},
      // Column stride 2 over rows of 16 and more: both column phases per block
      // (conv_input_grad_pairs), whole pieces and, odd or split between blocks, masked ones.
      {{1, 16, 7, 18, 16, 3, 3, 2, 2, 1, 1, 1, 1, 1}, "pairs, 8-wide pieces"},
      {{2, 17, 12, 32, 16, 3, 3, 2, 2, 0, 0, 1, 1, 1}, "pairs, 16-wide pieces, rows split"},
      {{2, 16, 5, 33, 24, 3, 3, 2, 2, 1, 1, 1, 1, 1}, "pairs, odd width"},
      {{1, 16, 8, 20, 16, 5, 5, 2, 2, 2, 2, 2, 2, 1}, "pairs, 5x5 dilation 2"},
      {{1, 32, 6, 18, 32, 3, 3, 1, 2, 1, 1, 1, 1, 2}, "pairs, row stride 1, groups 2"},
      // Stems over row-unfolded input (ops/conv_stem.h, `unfolded` without dilation): the whole
      // window in one gemm per output row; strides 1 and 2 (and unequal), padding 0 to 3, odd
      // and even sizes, windows 3 to 7 (and 2 x 3), 1 to 17 channels, batch 1. A row dilation
      // or a padded row wider than 256 keeps the kh x 1 unfolded form.
      {{2, 3, 8, 9, 16, 5, 5, 1, 1, 2, 2, 1, 1, 1}, "stem rows 5x5 stride 1"},
      {{1, 3, 10, 7, 8, 7, 7, 1, 2, 3, 1, 1, 1, 1}, "stem rows 7x7 stride 1 x 2"},
      {{1, 1, 6, 9, 8, 2, 3, 2, 1, 0, 0, 1, 1, 1}, "stem rows 2x3, one channel"},
      {{2, 17, 7, 8, 70, 3, 3, 2, 2, 1, 1, 1, 1, 1}, "stem rows 17 channels, 70 outputs"},
      {{1, 3, 9, 10, 8, 3, 3, 1, 1, 2, 1, 2, 1, 1}, "stem row dilation 2"},
      {{1, 3, 2, 260, 8, 3, 3, 1, 2, 1, 1, 1, 1, 1}, "stem rows wider than 256"},
      // Strided relayout through rows (conv_unfold): 28 columns and more.
      {{1, 16, 5, 29, 16, 3, 3, 2, 2, 1, 1, 1, 1, 1}, "strided rows, 29 wide"},
      {{2, 16, 4, 30, 16, 3, 3, 2, 3, 0, 1, 1, 1, 1}, "strided rows, stride 2 x 3"},
  };
  return c;
}

std::vector<double> values(const Tensor& t) {
  Expected<Tensor> f = cast(t, DType::kF32);
  std::vector<float> v = *f->to_vector<float>();
  return {v.begin(), v.end()};
}

Tensor seeded(const Shape& shape, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1, 1);
  int64_t count = 1;
  for (int64_t d : shape)
    count *= d;
  std::vector<float> v(static_cast<size_t>(count));
  for (float& x : v)
    x = u(rng);
  return *Tensor::from_vector(v, shape);
}

// conv2d in double: y, and the gradients of sum(y * g) with respect to x and w.
struct Reference {
  std::vector<double> y, dx, dw;
};
Reference reference(const std::vector<int64_t>& s, const std::vector<double>& x,
                    const std::vector<double>& w, const std::vector<double>& b,
                    const std::vector<double>& g, int64_t oh, int64_t ow) {
  const int64_t n = s[0], c = s[1], h = s[2], wd = s[3], o = s[4], kh = s[5], kw = s[6], sh = s[7],
                sw = s[8], ph = s[9], pw = s[10], dh = s[11], dw = s[12], gr = s[13];
  const int64_t cg = c / gr, og = o / gr;
  Reference r;
  r.y.assign(static_cast<size_t>(n * o * oh * ow), 0.0);
  r.dx.assign(x.size(), 0.0);
  r.dw.assign(w.size(), 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t oc = 0; oc < o; ++oc)
      for (int64_t y = 0; y < oh; ++y)
        for (int64_t xx = 0; xx < ow; ++xx) {
          const size_t yi = static_cast<size_t>(((i * o + oc) * oh + y) * ow + xx);
          double acc = b[static_cast<size_t>(oc)];
          const int64_t group = oc / og;
          for (int64_t ci = 0; ci < cg; ++ci)
            for (int64_t a = 0; a < kh; ++a)
              for (int64_t e = 0; e < kw; ++e) {
                const int64_t iy = y * sh - ph + a * dh, ix = xx * sw - pw + e * dw;
                if (iy < 0 || iy >= h || ix < 0 || ix >= wd) continue;
                const size_t xi =
                    static_cast<size_t>(((i * c + group * cg + ci) * h + iy) * wd + ix);
                const size_t wi = static_cast<size_t>(((oc * cg + ci) * kh + a) * kw + e);
                acc += x[xi] * w[wi];
                r.dx[xi] += g[yi] * w[wi];
                r.dw[wi] += g[yi] * x[xi];
              }
          r.y[yi] = acc;
        }
  return r;
}

using testing::expect_close;

TEST(AlgorithmChoice, EveryAlgorithmOfEveryPointMatchesThePlainReference) {
  Expected<const OpDef*> op = find_op("conv2d");
  ASSERT_TRUE(op.ok());
  for (const Case& c : cases()) {
    const std::vector<int64_t>& s = c.sizes;
    const Tensor x = seeded({s[0], s[1], s[2], s[3]}, 1);
    const Tensor w = seeded({s[4], s[1] / s[13], s[5], s[6]}, 2);
    const Tensor b = seeded({s[4]}, 3);
    const Attrs attrs = conv_attrs({s[7], s[8]}, {s[9], s[10]}, {s[11], s[12]}, s[13]);
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      if (c.f32_only && dtype != DType::kF32) continue;
      const Tensor xc = *cast(x, dtype), wc = *cast(w, dtype);
      Expected<TensorMeta> out =
          infer(**op, {{xc.shape(), dtype}, {wc.shape(), dtype}, {b.shape(), DType::kF32}}, attrs);
      ASSERT_TRUE(out.ok()) << out.status().message();
      const Tensor g = seeded(out->shape, 4);
      // The reference takes the operands as the algorithms see them (rounded to bf16).
      const Reference want =
          reference(s, values(xc), values(wc), values(b), values(g), out->shape[2], out->shape[3]);
      const double tol = dtype == DType::kF32 ? 1e-4 : 2e-2;
      const std::vector<TensorMeta> metas{
          {xc.shape(), dtype}, {wc.shape(), dtype}, {b.shape(), DType::kF32}};
      for (const AlgorithmPoint* point : conv_algorithm_points()) {
        for (const std::string& algorithm : point->algorithms) {
          if (!point->applies(algorithm, cpu_device(), s)) continue;
          const std::string what =
              std::string(c.what) + " " + dtype_name(dtype) + " " + point->name + " " + algorithm;
          ForceAlgorithm force(point->name, algorithm);
          if (point == &conv_forward_point()) {
            Expected<Tensor> y = (*op)->forward({xc, wc, b}, attrs, *out);
            ASSERT_TRUE(y.ok()) << what << ": " << y.status().message();
            expect_close(values(*y), want.y, tol, what);
            continue;
          }
          const bool input_grad = point == &conv_input_grad_point();
          BackwardArgs args{
              {xc, wc, b}, Tensor(), metas, attrs, g, {input_grad, !input_grad, false}, {}};
          Expected<std::vector<Tensor>> grads = (*op)->backward(args);
          ASSERT_TRUE(grads.ok()) << what << ": " << grads.status().message();
          expect_close(values((*grads)[input_grad ? 0 : 1]), input_grad ? want.dx : want.dw, tol,
                       what);
        }
      }
    }
  }
}

// Which tunable conv kernels (conv_implicit, conv_gemm) a call launched.
std::set<std::string> launched_kernels(const std::function<void()>& call) {
  record_tunable_launches(true);
  call();
  record_tunable_launches(false);
  std::set<std::string> out;
  for (const TunableLaunch& l : recorded_tunable_launches())
    out.insert(l.key.kernel);
  return out;
}

TEST(AlgorithmChoice, AForcedAlgorithmIsTheOneThatRuns) {
  const Tensor x = seeded({2, 32, 9, 9}, 1), w = seeded({32, 32, 3, 3}, 2), b = seeded({32}, 3);
  auto forward = [&] { ASSERT_TRUE(conv2d(x, w, b, {1, 1}, {1, 1}, {1, 1}, 1).ok()); };
  // Rule: the implicit gemm (32 channels deep, on the CPU).
  EXPECT_EQ(launched_kernels(forward), (std::set<std::string>{"conv_implicit"}));
  {
    ForceAlgorithm force("conv2d.forward", "im2col");
    EXPECT_EQ(launched_kernels(forward), (std::set<std::string>{"conv_gemm"}));
  }
  EXPECT_EQ(launched_kernels(forward), (std::set<std::string>{"conv_implicit"}));
  // A forced algorithm that does not apply (unfolded needs one group) leaves the rule.
  const Tensor w2 = seeded({32, 16, 3, 3}, 5);
  ForceAlgorithm force("conv2d.forward", "unfolded");
  EXPECT_EQ(launched_kernels([&] {
              ASSERT_TRUE(conv2d(x, w2, b, {1, 1}, {1, 1}, {1, 1}, 2).ok());
            }),
            (std::set<std::string>{"conv_implicit"}));
}

class AlgorithmChoiceDb : public testing::TempTuneDbTest {
 protected:
  void choose(const std::vector<int64_t>& sizes, const std::string& algorithm) {
    auto db = tune::TuneDb::open(file_);
    ASSERT_TRUE(db.ok());
    tune::Trial t{algorithm_key(conv_forward_point(), cpu_device(), DType::kF32, sizes),
                  algorithm_params(algorithm), "ok", 1e-3,
                  std::string(tune::kChosenPrefix) + " test"};
    ASSERT_TRUE((*db)->record(t).ok());
    ASSERT_TRUE((*db)->choose(t).ok());
  }
};

TEST_F(AlgorithmChoiceDb, TheDatabaseChoiceIsTakenForItsShapeAndTheNearestAndOnlyWhereItApplies) {
  const std::vector<int64_t> tuned{2, 32, 9, 9, 32, 3, 3, 1, 1, 1, 1, 1, 1, 1};
  choose(tuned, "im2col");
  std::vector<int64_t> grouped = tuned;
  grouped[13] = 2;
  choose(grouped, "unfolded");  // does not apply to two groups
  tune::TuneChoices::global().use_database(file_);
  const std::string rule = "implicit";
  EXPECT_EQ(*choose_algorithm(conv_forward_point(), cpu_device(), DType::kF32, tuned, rule),
            "im2col");
  std::vector<int64_t> near = tuned;
  near[2] = near[3] = 11;  // the same window, a near image size: the nearest choice
  EXPECT_EQ(*choose_algorithm(conv_forward_point(), cpu_device(), DType::kF32, near, rule),
            "im2col");
  std::vector<int64_t> other_window = tuned;
  other_window[5] = other_window[6] = 1;  // another window: another key, nothing tuned
  other_window[9] = other_window[10] = 0;
  EXPECT_EQ(*choose_algorithm(conv_forward_point(), cpu_device(), DType::kF32, other_window, rule),
            rule);
  EXPECT_EQ(*choose_algorithm(conv_forward_point(), cpu_device(), DType::kBF16, tuned, rule),
            rule);  // another dtype
  EXPECT_EQ(*choose_algorithm(conv_forward_point(), cpu_device(), DType::kF32, grouped, rule),
            rule);
  // And the op takes it: conv2d on the tuned shape launches im2col's gemm.
  const Tensor x = seeded({2, 32, 9, 9}, 1), w = seeded({32, 32, 3, 3}, 2), b = seeded({32}, 3);
  EXPECT_EQ(launched_kernels([&] {
              ASSERT_TRUE(conv2d(x, w, b, {1, 1}, {1, 1}, {1, 1}, 1).ok());
            }),
            (std::set<std::string>{"conv_gemm"}));
}

TEST(AlgorithmChoice, RecordingNamesEachPointAndItsRule) {
  const Tensor x = seeded({2, 3, 12, 12}, 1), w = seeded({16, 3, 7, 7}, 2), b = seeded({16}, 3);
  record_tunable_launches(true);
  ASSERT_TRUE(conv2d(x, w, b, {1, 1}, {3, 3}, {1, 1}, 1).ok());
  record_tunable_launches(false);
  std::vector<AlgorithmLaunch> seen = recorded_algorithm_launches();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].point, &conv_forward_point());
  EXPECT_EQ(seen[0].rule, "unfolded");  // an RGB stem: three channels, unfolded 21 deep
  EXPECT_EQ(seen[0].sizes, (std::vector<int64_t>{2, 3, 12, 12, 16, 7, 7, 1, 1, 3, 3, 1, 1, 1}));
}

TEST(AlgorithmChoice, AnUnknownPointIsAnErrorNamingTheKnownOnes) {
  Expected<const AlgorithmPoint*> p = find_algorithm_point("conv2d.sideways");
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("conv2d.forward"), std::string::npos) << p.status().message();
  EXPECT_EQ(*find_algorithm_point("conv2d.weight_grad"), &conv_weight_grad_point());
}

}  // namespace
}  // namespace tessel::ops
