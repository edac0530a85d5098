// The fused causal-attention kernels (ops/flash_attention.h) against the unfused ops on every
// device: causal_attention (a GPT's fused qkv layout) and scaled_dot_product_attention's fused
// case (is_causal, no mask) against scaled_dot_product_attention given the causal mask as an
// additive mask, which runs the unfused path (q k^T gemm, attention_softmax, P v; backward
// recomputes P and runs softmax_grad and four gemms). Forward and the gradients of q, k and v,
// at sequence lengths around the kernels' blocks (1, 37, 63, 64, 65, 130, 256) and head sizes
// 8 to 80 (80: past what the GPU kernels take, so OpenCL runs the op's fallback; not on a CPU),
// with peaked scores that make the online softmax rescale. Finite differences against the double
// reference are in ops_test.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "ops/flash_attention.h"
#include "ops/op.h"
#include "ops/ops.h"
#include "ops/testing/edge_check.h"

namespace tessel::ops {
namespace {

using namespace testing;  // NOLINT: the helpers of ops/testing/

struct Case {
  int64_t b, t, h, e;
  float spread;  // inputs uniform in [-spread, spread]
};

std::vector<float> uniform(int64_t n, float spread, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-spread, spread);
  std::vector<float> v(n);
  for (float& x : v)
    x = u(rng);
  return v;
}

// [T, T]: 0 where key c <= query r, -inf after.
Tensor causal_mask(Device* d, int64_t t) {
  std::vector<float> m(t * t);
  for (int64_t r = 0; r < t; ++r)
    for (int64_t c = 0; c < t; ++c)
      m[r * t + c] = c <= r ? 0.0f : -INFINITY;
  return floats(d, m, {t, t});
}

// Column block `part` of qkv [B, T, 3C] as a contiguous [B, H, T, E] tensor.
Tensor heads_part(const Tensor& qkv, const Case& c, int64_t part) {
  const int64_t width = c.h * c.e;
  Tensor block = qkv.slice(2, part * width, (part + 1) * width).value();
  Tensor split = contiguous(block).value().reshape({c.b, c.t, c.h, c.e}).value();
  return contiguous(split.permute({0, 2, 1, 3}).value()).value();
}

// The three input gradients (q, k, v) against the unfused backward's.
void expect_gradients_near(const std::vector<Tensor>& got_grads,
                           const std::vector<Tensor>& want_grads) {
  for (int i = 0; i < 3; ++i) {
    std::vector<float> got = host(got_grads[i]), want = host(want_grads[i]);
    ASSERT_EQ(got.size(), want.size());
    for (size_t j = 0; j < got.size(); ++j)
      ASSERT_NEAR(got[j], want[j], 1e-4 + 1e-3 * std::fabs(want[j]))
          << "gradient of input " << i << " at " << j;
  }
}

// Element (b, t, part, h, e) of [B, T, 3C] next to element (b, h, t, e) of part's [B, H, T, E].
void expect_parts_match(const std::vector<float>& fused,
                        const std::vector<std::vector<float>>& parts, const Case& c, double abs_tol,
                        double rel_tol, const std::string& what) {
  const int64_t width = c.h * c.e, row = static_cast<int64_t>(parts.size()) * width;
  int misses = 0;
  for (size_t part = 0; part < parts.size(); ++part)
    for (int64_t b = 0; b < c.b; ++b)
      for (int64_t h = 0; h < c.h; ++h)
        for (int64_t t = 0; t < c.t; ++t)
          for (int64_t e = 0; e < c.e; ++e) {
            const float want = parts[part][((b * c.h + h) * c.t + t) * c.e + e];
            const float got = fused[(b * c.t + t) * row + part * width + h * c.e + e];
            if (!(std::fabs(got - want) <= abs_tol + rel_tol * std::fabs(want)) && ++misses <= 4)
              ADD_FAILURE() << what << " part " << part << " [" << b << ", " << t << ", " << h
                            << ", " << e << "]: " << got << ", want " << want;
          }
  EXPECT_EQ(misses, 0) << what;
}

const std::vector<Case>& cases() {
  static const std::vector<Case> list{
      {2, 1, 2, 8, 1.0f},   {1, 37, 2, 80, 1.0f},  {1, 63, 2, 32, 1.0f}, {2, 64, 1, 32, 3.0f},
      {1, 65, 3, 16, 1.0f}, {1, 130, 2, 64, 2.0f}, {1, 256, 1, 64, 1.0f}};
  return list;
}

TEST(FlashAttention, CausalAttentionMatchesTheUnfusedOps) {
  const std::vector<DType> f32s{DType::kF32, DType::kF32};
  for_each_device("causal_attention", f32s, [&](Device* d) {
    uint32_t seed = 1;
    for (const Case& c : cases()) {
      // E = 80 is there for the op's fallback on OpenCL and CUDA; on a CPU it would only compile
      // one more tile width.
      if (c.e > 64 && d->kind() == DeviceKind::kCpu) continue;
      SCOPED_TRACE(fmt::format("B {} T {} H {} E {}", c.b, c.t, c.h, c.e));
      const int64_t width = c.h * c.e;
      Tensor qkv =
          floats(d, uniform(c.b * c.t * 3 * width, c.spread, seed++), {c.b, c.t, 3 * width});
      Tensor lse = Tensor::zeros({c.b, c.h, c.t}, DType::kF32, d).value();
      const Attrs attrs = Attrs().set("heads", c.h);
      std::vector<float> y = host(run("causal_attention", {qkv, lse}, attrs));

      // The unfused reference on the same device: q, k, v copied apart, the causal mask additive.
      std::vector<Tensor> in{heads_part(qkv, c, 0), heads_part(qkv, c, 1), heads_part(qkv, c, 2),
                             causal_mask(d, c.t)};
      const Attrs masked = Attrs().set("mask", 2);
      std::vector<float> y_ref = host(run("scaled_dot_product_attention", in, masked));
      expect_parts_match(y, {y_ref}, c, 2e-5, 1e-4, "output");

      std::vector<float> gy = uniform(c.b * c.t * width, 1.0f, seed++);
      std::vector<Tensor> g =
          backward_of("causal_attention", {qkv, lse}, floats(d, gy, {c.b, c.t, width}), attrs);
      Tensor gy_heads =
          contiguous(floats(d, gy, {c.b, c.t, c.h, c.e}).permute({0, 2, 1, 3}).value()).value();
      std::vector<Tensor> g_ref = backward_of("scaled_dot_product_attention", in, gy_heads, masked);
      expect_parts_match(host(g[0]), {host(g_ref[0]), host(g_ref[1]), host(g_ref[2])}, c, 1e-4,
                         1e-3, "qkv gradient");
    }
  });
}

TEST(FlashAttention, ScaledDotProductAttentionTakesTheFusedKernelsWhenCausal) {
  const std::vector<DType> f32s(4, DType::kF32);
  for_each_device("scaled_dot_product_attention", f32s, [&](Device* d) {
    uint32_t seed = 100;
    for (const Case& c : cases()) {
      if (c.e > 64 && d->kind() == DeviceKind::kCpu) continue;
      SCOPED_TRACE(fmt::format("B {} T {} H {} E {}", c.b, c.t, c.h, c.e));
      const Shape shape{c.b, c.h, c.t, c.e};
      const int64_t n = c.b * c.h * c.t * c.e;
      std::vector<Tensor> in;
      for (int i = 0; i < 3; ++i)
        in.push_back(floats(d, uniform(n, c.spread, seed++), shape));
      in.push_back(floats(d, {0}, {1}));
      const Attrs causal = Attrs().set("mask", 0).set("causal", 1).set("scale", 0.3);
      std::vector<Tensor> unfused = in;
      unfused[3] = causal_mask(d, c.t);
      const Attrs masked = Attrs().set("mask", 2).set("scale", 0.3);
      std::vector<float> y = host(run("scaled_dot_product_attention", in, causal));
      std::vector<float> y_ref = host(run("scaled_dot_product_attention", unfused, masked));
      ASSERT_EQ(y.size(), y_ref.size());
      for (size_t i = 0; i < y.size(); ++i)
        ASSERT_NEAR(y[i], y_ref[i], 2e-5 + 1e-4 * std::fabs(y_ref[i])) << "output " << i;
      Tensor gy = floats(d, uniform(n, 1.0f, seed++), shape);
      std::vector<Tensor> g = backward_of("scaled_dot_product_attention", in, gy, causal);
      std::vector<Tensor> g_ref = backward_of("scaled_dot_product_attention", unfused, gy, masked);
      expect_gradients_near(g, g_ref);
    }
  });
}

// Both backward kernel sets (the split grad_q / grad_kv pair and the per-head kernel the CPU
// takes when B H is large enough) on every device, each against the unfused backward, at
// sequence lengths off the blocks (odd, one past, a ragged last block) and with several
// (batch, head) blocks, so the per-head kernel's dQ accumulation over key blocks and the causal
// edge inside a diagonal block are both checked.
TEST(FlashAttention, BothBackwardKernelsMatchTheUnfusedOps) {
  const std::vector<DType> f32s{DType::kF32, DType::kF32};
  const std::vector<Case> list{{1, 1, 1, 16, 1.0f},  {2, 37, 3, 32, 1.0f},  {1, 65, 2, 16, 2.0f},
                               {3, 64, 2, 32, 3.0f}, {1, 130, 2, 64, 1.0f}, {2, 193, 1, 8, 1.0f},
                               {1, 256, 2, 64, 1.0f}};
  for_each_device("causal_attention", f32s, [&](Device* d) {
    uint32_t seed = 300;
    for (const Case& c : list) {
      SCOPED_TRACE(fmt::format("B {} T {} H {} E {}", c.b, c.t, c.h, c.e));
      const Shape shape{c.b, c.h, c.t, c.e};
      const int64_t n = c.b * c.h * c.t * c.e;
      auto view = [&](const Tensor& t) { return View{t, shape, t.strides()}; };
      std::vector<Tensor> in;
      for (int i = 0; i < 3; ++i)
        in.push_back(floats(d, uniform(n, c.spread, seed++), shape));
      Tensor o = Tensor::zeros(shape, DType::kF32, d).value();
      Tensor lse = Tensor::zeros({c.b, c.h, c.t}, DType::kF32, d).value();
      const View lse_view{lse, lse.shape(), lse.strides()};
      const double scale = 1.0 / std::sqrt(static_cast<double>(c.e));
      const AttentionHeads heads{view(in[0]), view(in[1]), view(in[2])};
      ASSERT_TRUE(flash_attention_forward(heads, view(o), lse_view, scale).ok());
      Tensor gy = floats(d, uniform(n, 1.0f, seed++), shape);

      std::vector<Tensor> unfused = in;
      unfused.push_back(causal_mask(d, c.t));
      const Attrs masked = Attrs().set("mask", 2).set("scale", scale);
      std::vector<Tensor> g_ref = backward_of("scaled_dot_product_attention", unfused, gy, masked);
      for (FlashBackward how : {FlashBackward::kSplit, FlashBackward::kPerHead}) {
        SCOPED_TRACE(how == FlashBackward::kSplit ? "split" : "per head");
        std::vector<Tensor> g;
        for (int i = 0; i < 3; ++i)
          g.push_back(floats(d, std::vector<float>(n, NAN), shape));  // every element written
        ASSERT_TRUE(flash_attention_backward(heads, view(o), view(gy), lse_view,
                                             {view(g[0]), view(g[1]), view(g[2])}, scale, how)
                        .ok());
        expect_gradients_near(g, g_ref);
      }
    }
  });
}

// Rank-5 batch dimensions merge into B when their strides allow, else the op copies (the
// views of heads_view), and the kernels take every stride the views give.
TEST(FlashAttention, HeadsViewMergesLeadingDimensions) {
  Tensor x = Tensor::zeros({2, 3, 4, 5, 6}, DType::kF32).value();
  std::optional<View> v = heads_view(x);
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->shape, (Shape{6, 4, 5, 6}));
  EXPECT_EQ(v->strides, (Strides{120, 30, 6, 1}));
  Tensor swapped = x.permute({1, 0, 2, 3, 4}).value();  // [3, 2, ...]: strides 360, 120 no merge
  EXPECT_FALSE(heads_view(swapped).has_value());
  Tensor ones = Tensor::zeros({1, 2, 1, 4, 5, 6}, DType::kF32).value();
  std::optional<View> w = heads_view(ones);
  ASSERT_TRUE(w.has_value());
  EXPECT_EQ(w->shape, (Shape{2, 4, 5, 6}));
  EXPECT_EQ(w->strides[0], 120);
}

TEST(FlashAttention, BadShapesAreErrors) {
  Device* d = cpu_device();
  Tensor lse = Tensor::zeros({1, 2, 4}, DType::kF32, d).value();
  expect_error(
      run("causal_attention", {floats(d, iota(4 * 16), {1, 4, 16}), lse}, Attrs().set("heads", 2)),
      Code::kInvalidArgument, {"causal_attention", "multiple of heads"});
  expect_error(
      run("causal_attention", {floats(d, iota(4 * 12), {1, 4, 12}), lse}, Attrs().set("heads", 1)),
      Code::kInvalidArgument, {"lse must be f32 [B, H, T] = [1, 1, 4]"});
  expect_error(run("causal_attention", {floats(d, iota(12), {4, 3}), lse}, Attrs().set("heads", 1)),
               Code::kInvalidArgument, {"needs f32 qkv [B, T, 3 C]"});
}

}  // namespace
}  // namespace tessel::ops
