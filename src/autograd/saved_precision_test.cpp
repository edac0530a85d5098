// 16-bit saved activations under autocast (saved_precision.h), on every device here: which
// tensors a node keeps in 16 bits (and that f32 keeps everything as it was), that a copy is shared
// and its f32 original freed, that the gemms' gradients are bit-identical to keeping f32 (they
// round their operands as they stage them), that the other gradients stay within bf16's
// tolerance of the f32-kept path, and that a short training run follows the f32 one.
#include "autograd/saved_precision.h"

#include <gtest/gtest.h>

#include <cmath>
#include <optional>
#include <random>

#include <fmt/format.h>

#include "autograd/autocast.h"
#include "autograd/functional.h"
#include "ops/ops.h"
#include "ops/testing/every_device.h"

namespace tessel::autograd {
namespace {

using ops::testing::op_test_devices;

Tensor random_tensor(const Shape& shape, uint32_t seed, Device* device, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::vector<float> v(static_cast<size_t>(shape_numel(shape)));
  for (float& x : v)
    x = scale * std::uniform_real_distribution<float>(-1.0f, 1.0f)(rng);
  return Tensor::from_vector(v, shape, device).value();
}

// The dtypes a node keeps, "f32,-,bf16,-": per input, then the output; "-" where none.
std::string saved_dtypes(const Variable& v) {
  std::string out;
  for (const Tensor& t : saved_tensors_of(v))
    out = fmt::format("{}{}{}", out, out.empty() ? "" : ",",
                      t.defined() ? dtype_name(t.dtype()) : "-");
  return out;
}

std::vector<float> values(const Tensor& t) {
  return ops::cast(t, DType::kF32).value().to_vector<float>().value();
}

// A small CNN-and-MLP step over most of the ops the policy names; every intermediate is kept so
// the test can ask what each node saved.
struct Net {
  Variable x0, w, b, gamma, beta, w1, b1, lw, lb, w2, b2, y;
  BatchNormState bn_state;
  Variable c, bn, r, p, f, h, g, n, s, m, logits, loss;

  explicit Net(Device* d) {
    x0 = Variable(random_tensor({4, 3, 6, 6}, 1, d), true);
    w = Variable(random_tensor({5, 3, 3, 3}, 2, d, 0.4f), true);
    b = Variable(random_tensor({5}, 3, d), true);
    gamma = Variable(random_tensor({5}, 4, d), true);
    beta = Variable(random_tensor({5}, 5, d), true);
    w1 = Variable(random_tensor({16, 45}, 6, d, 0.3f), true);
    b1 = Variable(random_tensor({16}, 7, d), true);
    lw = Variable(random_tensor({16}, 8, d), true);
    lb = Variable(random_tensor({16}, 9, d), true);
    w2 = Variable(random_tensor({3, 16}, 10, d), true);
    b2 = Variable(random_tensor({3}, 11, d), true);
    y = Variable(Tensor::from_vector<int64_t>({0, 2, 1, 2}, {4}, d).value());
    bn_state = {Tensor::zeros({5}, DType::kF32, d).value(),
                Tensor::full({5}, 1.0, DType::kF32, d).value()};
  }
  void forward() {
    Variable x = scale(x0, 1.0).value();  // an activation, not a leaf
    c = conv2d(x, w, b, {1, 1}, {1, 1}).value();
    bn = batch_norm(c, gamma, beta, bn_state, true).value();
    r = relu(bn).value();
    p = max_pool2d(r, {2, 2}).value();
    f = reshape(p, {4, 45}).value();
    h = linear(f, w1, b1).value();
    g = gelu(h).value();
    n = layer_norm(g, lw, lb).value();
    s = softmax(n).value();
    m = mul(s, n).value();
    logits = linear(m, w2, b2).value();
    loss = cross_entropy(logits, y).value();
  }
  std::vector<Variable> leaves() const { return {x0, w, b, gamma, beta, w1, b1, lw, lb, w2, b2}; }
};

TEST(SavedPrecision, NodesKeepActivationsIn16BitsUnderAutocastOnly) {
  for (Device* d : op_test_devices()) {
    SCOPED_TRACE(d->id());
    for (DType compute : {DType::kF32, DType::kBF16, DType::kF16}) {
      SCOPED_TRACE(dtype_name(compute));
      const std::string h16 = compute == DType::kF32 ? "f32" : dtype_name(compute);
      Net net(d);
      Autocast autocast(compute);
      net.forward();
      // conv2d: x rounded, the weight (a leaf) as it is; no bias or output.
      EXPECT_EQ(saved_dtypes(net.c), fmt::format("{},f32,-,-", h16));
      // batch norm: its input; gamma and the running statistics are leaves and buffers.
      EXPECT_EQ(saved_dtypes(net.bn), fmt::format("{},f32,-,f32,f32,-", h16));
      // relu's output is max pooling's input, which stays f32 (its argmax must not tie): one f32
      // tensor for both nodes, not an f32 and a copy.
      EXPECT_EQ(saved_dtypes(net.r), "-,f32");
      EXPECT_EQ(saved_dtypes(net.p), "f32,-");
      EXPECT_EQ(saved_dtypes(net.h), fmt::format("{},f32,-,-", h16));
      EXPECT_EQ(saved_dtypes(net.g), fmt::format("{},-", h16));
      EXPECT_EQ(saved_dtypes(net.n), fmt::format("{},f32,-,-", h16));
      EXPECT_EQ(saved_dtypes(net.s), fmt::format("-,{}", h16));
      EXPECT_EQ(saved_dtypes(net.m), fmt::format("{0},{0},-", h16));
      EXPECT_EQ(saved_dtypes(net.logits), fmt::format("{},f32,-,-", h16));
      EXPECT_EQ(saved_dtypes(net.loss), "f32,i64,-");  // the loss's logits stay f32
      EXPECT_EQ(saved_tensors_of(net.r)[1].storage(), net.r.data().storage());
      EXPECT_EQ(saved_tensors_of(net.p)[0].storage(), net.r.data().storage());
      // softmax's output and mul's first operand are one tensor: one copy, shared.
      EXPECT_EQ(saved_tensors_of(net.s)[1].storage(), saved_tensors_of(net.m)[0].storage());
      if (compute == DType::kF32) {
        EXPECT_EQ(saved_tensors_of(net.s)[1].storage(), net.s.data().storage());
      }
      // gelu's input (linear's output) is held by gelu's node alone: dropping the variable frees
      // the f32 tensor under a 16-bit policy, and keeps it under f32.
      std::weak_ptr<Storage> h_f32 = net.h.data().storage();
      net.h = Variable();
      EXPECT_EQ(h_f32.expired(), compute != DType::kF32);
      ASSERT_TRUE(net.loss.backward().ok());
    }
  }
}

// dW and dx of linear, matmul and conv2d with their activations kept in 16 bits equal, bit for
// bit, those of the same step keeping them in f32; the output gradient is a fixed f32 weight
// (a leaf, kept as it is), so only the gemms see the rounded copies.
TEST(SavedPrecision, GemmGradientsAreBitIdenticalToKeepingF32) {
  for (Device* d : op_test_devices()) {
    SCOPED_TRACE(d->id());
    for (DType compute : {DType::kBF16, DType::kF16}) {
      SCOPED_TRACE(dtype_name(compute));
      auto run = [&](bool keep_f32) {
        Variable x0(random_tensor({7, 37}, 1, d), true), w(random_tensor({6, 37}, 2, d), true),
            bias(random_tensor({6}, 3, d), true), a0(random_tensor({2, 5, 19}, 4, d), true),
            b0(random_tensor({2, 19, 9}, 5, d), true), c0(random_tensor({2, 3, 9, 9}, 6, d), true),
            wc(random_tensor({4, 3, 3, 3}, 7, d), true), bc(random_tensor({4}, 8, d), true);
        Variable cy(random_tensor({7, 6}, 9, d)), cm(random_tensor({2, 5, 9}, 10, d)),
            cc(random_tensor({2, 4, 5, 5}, 11, d));
        std::optional<KeepSavedF32> keep;
        if (keep_f32) keep.emplace();
        Autocast autocast(compute);
        Variable x = scale(x0, 1.0).value(), a = scale(a0, 1.0).value(),
                 bm = scale(b0, 1.0).value(), xc = scale(c0, 1.0).value();
        Variable y = linear(x, w, bias).value(), ym = matmul(a, bm).value(),
                 yc = conv2d(xc, wc, bc, {2, 2}, {1, 1}).value();
        EXPECT_EQ(saved_dtypes(y),
                  fmt::format("{},f32,-,-", keep_f32 ? "f32" : dtype_name(compute)));
        Variable loss =
            (sum((y * cy).value()) + sum((ym * cm).value()) + sum((yc * cc).value())).value();
        EXPECT_TRUE(loss.backward().ok());
        std::vector<std::vector<float>> grads;
        for (const Variable& v : {x0, w, bias, a0, b0, c0, wc, bc})
          grads.push_back(values(v.grad()));
        return grads;
      };
      std::vector<std::vector<float>> rounded = run(false), kept = run(true);
      for (size_t i = 0; i < rounded.size(); ++i)
        EXPECT_EQ(rounded[i], kept[i]) << "gradient " << i;
    }
  }
}

// The whole Net under bf16: every leaf's gradient with 16-bit activations is within bf16's
// tolerance of the one with f32 activations (both compute their gemms in bf16).
TEST(SavedPrecision, GradientsStayWithinBf16OfKeepingF32) {
  for (Device* d : op_test_devices()) {
    SCOPED_TRACE(d->id());
    auto run = [&](bool keep_f32) {
      Net net(d);
      std::optional<KeepSavedF32> keep;
      if (keep_f32) keep.emplace();
      Autocast autocast(DType::kBF16);
      net.forward();
      EXPECT_TRUE(net.loss.backward().ok());
      std::vector<std::vector<float>> grads;
      for (const Variable& v : net.leaves())
        grads.push_back(values(v.grad()));
      return grads;
    };
    std::vector<std::vector<float>> rounded = run(false), kept = run(true);
    float largest = 0;
    for (const std::vector<float>& g : kept)
      for (float v : g)
        largest = std::max(largest, std::fabs(v));
    for (size_t i = 0; i < rounded.size(); ++i) {
      float scale = 0, diff = 0;
      for (size_t j = 0; j < kept[i].size(); ++j) {
        scale = std::max(scale, std::fabs(kept[i][j]));
        diff = std::max(diff, std::fabs(rounded[i][j] - kept[i][j]));
      }
      // The conv's bias feeds batch norm, which removes it: its gradient is 0 but for what the
      // batch-norm gradient's sums leave over (1e-5 here, 3e-4 from bf16 inputs), so it is held
      // to the largest gradient of the net instead of its own.
      if (i == 2) scale = largest;
      // bf16 keeps 8 bits: a few units of 2^-8 of the gradient's size.
      EXPECT_LE(diff, 0.03f * scale) << "leaf " << i << ", largest " << scale;
    }
  }
}

// Twenty SGD steps of a two-layer MLP on a fixed batch: the loss under bf16 (16-bit gemms and
// activations) follows the f32 loss step by step and falls as far.
TEST(SavedPrecision, ShortTrainingRunUnderBf16FollowsF32) {
  for (Device* d : op_test_devices()) {
    SCOPED_TRACE(d->id());
    auto train = [&](DType compute) {
      Variable w1(random_tensor({32, 24}, 1, d, 0.3f), true), b1(random_tensor({32}, 2, d), true),
          w2(random_tensor({5, 32}, 3, d, 0.3f), true), b2(random_tensor({5}, 4, d), true);
      Variable x(random_tensor({64, 24}, 5, d));
      std::vector<int64_t> labels(64);
      for (size_t i = 0; i < labels.size(); ++i)
        labels[i] = int64_t((i * 7) % 5);
      Variable y(Tensor::from_vector(labels, {64}, d).value());
      std::vector<double> losses;
      for (int step = 0; step < 20; ++step) {
        Variable loss;
        {
          Autocast autocast(compute);
          Variable h = relu(linear(x, w1, b1).value()).value();
          Variable t = gelu(h).value();
          loss = cross_entropy(linear(t, w2, b2).value(), y).value();
        }
        EXPECT_TRUE(loss.backward().ok());
        losses.push_back(loss.item().value());
        NoGrad no_grad;
        for (const Variable& p : {w1, b1, w2, b2}) {
          Tensor step_size = ops::scale(p.grad(), 0.5).value();
          Variable(p).set_data(ops::sub(p.data(), step_size).value());
          EXPECT_TRUE(Variable(p).zero_grad().ok());
        }
      }
      return losses;
    };
    std::vector<double> f32 = train(DType::kF32), bf16 = train(DType::kBF16);
    for (size_t i = 0; i < f32.size(); ++i)
      EXPECT_NEAR(bf16[i], f32[i], 0.02 * f32[i]) << "step " << i;
    EXPECT_LT(f32.back(), 0.8 * f32.front());
  }
}

}  // namespace
}  // namespace tessel::autograd
