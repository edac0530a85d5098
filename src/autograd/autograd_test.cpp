// The tape: gradients of composed ops against central finite differences of the composed
// plain-C++ references (in double), on every backend present; accumulation across backward
// calls; a variable used twice; no_grad; that a node keeps only what its backward reads; that a
// freed graph cannot be walked twice; that graphs are freed. Gradient tolerance: 2e-4 absolute +
// 2e-3 relative (f32 kernels against differences exact to ~1e-8).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>

#include "autograd/functional.h"
#include "autograd/variable.h"
#include "ops/gemm_precision.h"
#include "support/log.h"

namespace tessel::autograd {
namespace {

using ops::Attrs;
using ops::RefTensor;

std::vector<Device*> test_devices() {
  std::vector<Device*> devices;
  for (Device* d : available_devices())
    if (d->kind() != DeviceKind::kCuda) devices.push_back(d);
  return devices;
}

RefTensor random_ref(Shape shape, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  RefTensor t{shape, std::vector<double>(shape_numel(shape))};
  for (double& v : t.values)
    v = std::uniform_real_distribution<float>(lo, hi)(rng);
  return t;
}

Tensor device_tensor(const RefTensor& r, Device* device) {
  std::vector<float> v(r.values.begin(), r.values.end());
  return Tensor::from_vector(v, r.shape, device).value();
}

RefTensor ref(const std::string& op, const std::vector<RefTensor>& in, const Attrs& attrs = {}) {
  return ops::find_op(op).value()->reference(in, attrs);
}

void expect_close(const Tensor& got, const std::vector<double>& want, const std::string& what) {
  std::vector<float> g = got.to_vector<float>().value();
  ASSERT_EQ(g.size(), want.size()) << what;
  int misses = 0;
  for (size_t i = 0; i < g.size(); ++i)
    if (!(std::fabs(g[i] - want[i]) <= 2e-4 + 2e-3 * std::fabs(want[i])) && ++misses <= 4)
      ADD_FAILURE() << what << ": element " << i << " is " << g[i] << ", want " << want[i];
}

// d loss / d params[i] by central differences of `loss` (double, step 1e-4).
std::vector<double> numeric_grad(const std::function<double(std::vector<RefTensor>&)>& loss,
                                 std::vector<RefTensor> params, size_t which) {
  std::vector<double> g(params[which].values.size());
  for (size_t j = 0; j < g.size(); ++j) {
    const double h = 1e-4, x = params[which].values[j];
    params[which].values[j] = x + h;
    double up = loss(params);
    params[which].values[j] = x - h;
    double down = loss(params);
    params[which].values[j] = x;
    g[j] = (up - down) / (2 * h);
  }
  return g;
}

// A two-layer MLP with a label-smoothed cross-entropy, through the tape.
TEST(Autograd, MlpGradientsMatchFiniteDifferences) {
  std::vector<RefTensor> p = {random_ref({5, 4}, 1), random_ref({7, 4}, 2), random_ref({7}, 3),
                              random_ref({3, 7}, 4), random_ref({3}, 5)};
  RefTensor targets{{5}, {0, 2, 1, 1, 2}};
  const Attrs ce =
      Attrs().set("ignore_index", -100).set("label_smoothing", 0.1).set("reduction", 0);
  auto reference_loss = [&](std::vector<RefTensor>& q) {
    RefTensor h = ref("gelu", {ref("linear", {q[0], q[1], q[2]})});
    return ref("cross_entropy", {ref("linear", {h, q[3], q[4]}), targets}, ce).values[0];
  };
  for (Device* device : test_devices()) {
    SCOPED_TRACE(device->id());
    std::vector<Variable> v;
    for (size_t i = 0; i < p.size(); ++i)
      v.emplace_back(device_tensor(p[i], device), i > 0);
    Variable t(Tensor::from_vector<int64_t>({0, 2, 1, 1, 2}, {5}, device).value());
    Variable h = gelu(linear(v[0], v[1], v[2]).value()).value();
    Variable loss = cross_entropy(linear(h, v[3], v[4]).value(), t, -100, 0.1).value();
    EXPECT_NEAR(loss.data().to_vector<float>().value()[0], reference_loss(p), 1e-5);
    ASSERT_TRUE(loss.backward().ok());
    EXPECT_FALSE(v[0].grad().defined()) << "x does not require gradients";
    for (size_t i = 1; i < p.size(); ++i)
      expect_close(v[i].grad(), numeric_grad(reference_loss, p, i), "param " + std::to_string(i));
  }
}

// Embedding, layer norm, a single-head causal-free attention core (q k^T, softmax, @ v) with
// reshape/permute/slice views, and a mean: the shape ops of a transformer block.
TEST(Autograd, TransformerPiecesGradientsMatchFiniteDifferences) {
  std::vector<RefTensor> p = {random_ref({6, 4}, 11), random_ref({4}, 12, 0.5f, 1.5f),
                              random_ref({4}, 13), random_ref({12, 4}, 14)};
  RefTensor ids{{2, 3}, {1, 5, 0, 3, 3, 2}};
  auto reference_loss = [&](std::vector<RefTensor>& q) {
    RefTensor x = ref("layer_norm", {ref("embedding", {q[0], ids}), q[1], q[2]});  // [2, 3, 4]
    RefTensor qkv =
        ref("matmul", {x, ref("permute", {q[3]}, Attrs().set("order", {1, 0}))});  // [2, 3, 12]
    RefTensor qs = ref("slice", {qkv}, Attrs().set("dim", 2).set("start", 0).set("end", 4));
    RefTensor ks = ref("slice", {qkv}, Attrs().set("dim", 2).set("start", 4).set("end", 8));
    RefTensor vs = ref("slice", {qkv}, Attrs().set("dim", 2).set("start", 8).set("end", 12));
    RefTensor att = ref(
        "softmax",
        {ref("scale", {ref("matmul", {qs, ref("permute", {ks}, Attrs().set("order", {0, 2, 1}))})},
             Attrs().set("factor", 0.5))});
    RefTensor y = ref("reshape", {ref("matmul", {att, vs})}, Attrs().set("shape", {6, 4}));
    return ref("mean", {ref("tanh", {y})}).values[0];
  };
  for (Device* device : test_devices()) {
    SCOPED_TRACE(device->id());
    std::vector<Variable> v;
    for (const RefTensor& r : p)
      v.emplace_back(device_tensor(r, device), true);
    Variable id(Tensor::from_vector<int64_t>({1, 5, 0, 3, 3, 2}, {2, 3}, device).value());
    Variable x = layer_norm(embedding(v[0], id).value(), v[1], v[2]).value();
    Variable qkv = matmul(x, permute(v[3], {1, 0}).value()).value();
    Variable q = slice(qkv, 2, 0, 4).value(), k = slice(qkv, 2, 4, 8).value(),
             val = slice(qkv, 2, 8, 12).value();
    Variable att =
        softmax(scale(matmul(q, permute(k, {0, 2, 1}).value()).value(), 0.5).value()).value();
    Variable y = reshape(matmul(att, val).value(), {6, 4}).value();
    Variable loss = mean(tanh(y).value()).value();
    EXPECT_NEAR(loss.data().to_vector<float>().value()[0], reference_loss(p), 1e-5);
    ASSERT_TRUE(loss.backward().ok());
    for (size_t i = 0; i < p.size(); ++i)
      expect_close(v[i].grad(), numeric_grad(reference_loss, p, i), "param " + std::to_string(i));
  }
}

// Training-mode batch norm over N, H, W, written out in plain C++.
RefTensor batch_norm_reference(const RefTensor& x, const RefTensor& w, const RefTensor& b,
                               double eps) {
  const int64_t n = x.shape[0], c = x.shape[1], hw = x.shape[2] * x.shape[3];
  RefTensor y = x;
  for (int64_t ch = 0; ch < c; ++ch) {
    double mean = 0, var = 0;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t p = 0; p < hw; ++p)
        mean += x.values[(i * c + ch) * hw + p] / (n * hw);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t p = 0; p < hw; ++p)
        var += std::pow(x.values[(i * c + ch) * hw + p] - mean, 2) / (n * hw);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t p = 0; p < hw; ++p) {
        double& v = y.values[(i * c + ch) * hw + p];
        v = (v - mean) / std::sqrt(var + eps) * w.values[ch] + b.values[ch];
      }
  }
  return y;
}

// The cnn workload's layers, small: conv 3x3 pad 1, batch norm, relu, max-pool 2, linear, loss.
TEST(Autograd, CnnGradientsMatchFiniteDifferences) {
  std::vector<RefTensor> p = {random_ref({2, 2, 4, 5}, 21), random_ref({3, 2, 3, 3}, 22),
                              random_ref({3}, 23),          random_ref({3}, 24, 0.5f, 1.5f),
                              random_ref({3}, 25),          random_ref({4, 12}, 26),
                              random_ref({4}, 27)};
  RefTensor targets{{2}, {3, 1}};
  auto reference_loss = [&](std::vector<RefTensor>& q) {
    RefTensor h = ref("conv2d", {q[0], q[1], q[2]}, Attrs().set("padding", {1, 1}));
    h = ref("relu", {batch_norm_reference(h, q[3], q[4], 1e-5)});
    h = ref("max_pool2d", {h}, Attrs().set("window", {2, 2}));  // [2, 3, 2, 2]
    h.shape = {2, 12};
    return ref("cross_entropy", {ref("linear", {h, q[5], q[6]}), targets}).values[0];
  };
  for (Device* device : test_devices()) {
    SCOPED_TRACE(device->id());
    std::vector<Variable> v;
    for (size_t i = 0; i < p.size(); ++i)
      v.emplace_back(device_tensor(p[i], device), true);
    Variable t(Tensor::from_vector<int64_t>({3, 1}, {2}, device).value());
    BatchNormState bn{Tensor::zeros({3}, DType::kF32, device).value(),
                      Tensor::full({3}, 1.0, DType::kF32, device).value()};
    Variable h = conv2d(v[0], v[1], v[2], {1, 1}, {1, 1}).value();
    h = relu(batch_norm(h, v[3], v[4], bn, /*training=*/true).value()).value();
    h = reshape(max_pool2d(h, {2, 2}).value(), {2, 12}).value();
    Variable loss = cross_entropy(linear(h, v[5], v[6]).value(), t).value();
    EXPECT_NEAR(loss.data().to_vector<float>().value()[0], reference_loss(p), 1e-5);
    ASSERT_TRUE(loss.backward().ok());
    for (size_t i = 0; i < p.size(); ++i)
      expect_close(v[i].grad(), numeric_grad(reference_loss, p, i), "param " + std::to_string(i));
  }
}

TEST(Autograd, BatchNormRunningStatisticsAndEvaluation) {
  RefTensor x = random_ref({3, 2, 2, 2}, 31, -1.0f, 3.0f);
  Variable xv(device_tensor(x, cpu_device()));
  Variable w(Tensor::from_vector<float>({1, 1}, {2}).value()),
      b(Tensor::from_vector<float>({0, 0}, {2}).value());
  BatchNormState bn{Tensor::zeros({2}, DType::kF32).value(),
                    Tensor::full({2}, 1.0, DType::kF32).value()};
  ASSERT_TRUE(batch_norm(xv, w, b, bn, true, 0.1).ok());
  std::vector<float> rm = bn.running_mean.to_vector<float>().value(),
                     rv = bn.running_var.to_vector<float>().value();
  for (int ch = 0; ch < 2; ++ch) {
    double mean = 0, var = 0;
    std::vector<double> vals;
    for (int i = 0; i < 3; ++i)
      for (int p = 0; p < 4; ++p)
        vals.push_back(x.values[(i * 2 + ch) * 4 + p]);
    for (double v : vals)
      mean += v / 12;
    for (double v : vals)
      var += (v - mean) * (v - mean) / 11;  // unbiased
    EXPECT_NEAR(rm[ch], 0.1 * mean, 1e-6);
    EXPECT_NEAR(rv[ch], 0.9 + 0.1 * var, 1e-6);
  }
  // Evaluation normalises with the running statistics: (x - rm) / sqrt(rv + eps).
  Variable y = batch_norm(xv, w, b, bn, false).value();
  std::vector<float> got = y.data().to_vector<float>().value();
  for (size_t i = 0; i < got.size(); ++i) {
    int ch = static_cast<int>(i / 4 % 2);
    EXPECT_NEAR(got[i], (x.values[i] - rm[ch]) / std::sqrt(rv[ch] + 1e-5), 1e-5);
  }
}

TEST(Autograd, CausalSelfAttentionMatchesReferenceAndFiniteDifferences) {
  std::vector<RefTensor> p = {random_ref({2, 5, 3}, 41), random_ref({2, 5, 3}, 42),
                              random_ref({2, 5, 3}, 43)};
  // Plain attention: row t attends to keys 0..t.
  auto attention = [](const std::vector<RefTensor>& q) {
    RefTensor out{{2, 5, 3}, std::vector<double>(30, 0.0)};
    for (int b = 0; b < 2; ++b)
      for (int t = 0; t < 5; ++t) {
        std::vector<double> s(t + 1);
        double mx = -INFINITY, z = 0;
        for (int u = 0; u <= t; ++u) {
          for (int d = 0; d < 3; ++d)
            s[u] += q[0].values[(b * 5 + t) * 3 + d] * q[1].values[(b * 5 + u) * 3 + d];
          s[u] /= std::sqrt(3.0);
          mx = std::max(mx, s[u]);
        }
        for (double& x : s)
          z += (x = std::exp(x - mx));
        for (int u = 0; u <= t; ++u)
          for (int d = 0; d < 3; ++d)
            out.values[(b * 5 + t) * 3 + d] += s[u] / z * q[2].values[(b * 5 + u) * 3 + d];
      }
    return out;
  };
  RefTensor w = random_ref({2, 5, 3}, 44);
  auto reference_loss = [&](std::vector<RefTensor>& q) {
    RefTensor y = attention(q);
    double s = 0;
    for (size_t i = 0; i < y.values.size(); ++i)
      s += y.values[i] * w.values[i];
    return s;
  };
  for (Device* device : test_devices()) {
    SCOPED_TRACE(device->id());
    std::vector<Variable> v;
    for (const RefTensor& r : p)
      v.emplace_back(device_tensor(r, device), true);
    Variable y = causal_self_attention(v[0], v[1], v[2]).value();
    expect_close(y.data(), attention(p).values, "forward");
    ASSERT_TRUE(y.backward(device_tensor(w, device)).ok());
    for (size_t i = 0; i < p.size(); ++i)
      expect_close(v[i].grad(), numeric_grad(reference_loss, p, i), "input " + std::to_string(i));
  }
}

TEST(Autograd, GradientsAccumulateUntilZeroed) {
  Variable x(Tensor::from_vector<float>({1, -2, 3}, {3}).value(), true);
  for (int round = 0; round < 2; ++round) {
    Variable y = sum(mul(x, x).value()).value();  // dy/dx = 2x
    ASSERT_TRUE(y.backward().ok());
  }
  EXPECT_EQ(x.grad().to_vector<float>().value(), (std::vector<float>{4, -8, 12}));
  ASSERT_TRUE(x.zero_grad().ok());
  EXPECT_EQ(x.grad().to_vector<float>().value(), (std::vector<float>{0, 0, 0}));
  Variable y = sum(x).value();
  ASSERT_TRUE(y.backward().ok());
  EXPECT_EQ(x.grad().to_vector<float>().value(), (std::vector<float>{1, 1, 1}));
}

// A leaf's gradient never shares memory with a tensor its caller keeps; a gradient handed over
// (backward(Tensor&&)) that nothing else holds becomes the leaf's own, and accumulation after
// that adds into it as before.
TEST(Autograd, LeafBackwardCopiesAKeptGradientAndTakesAHandedOverOne) {
  Variable x(Tensor::from_vector<float>({1, 2, 3}, {3}).value(), true);
  Tensor kept = Tensor::from_vector<float>({0.5f, -1, 2}, {3}).value();
  ASSERT_TRUE(x.backward(kept).ok());
  EXPECT_NE(x.grad().storage(), kept.storage());
  EXPECT_EQ(x.grad().to_vector<float>().value(), (std::vector<float>{0.5f, -1, 2}));

  Variable z(Tensor::from_vector<float>({1, 2, 3}, {3}).value(), true);
  Tensor given = Tensor::from_vector<float>({4, 5, 6}, {3}).value();
  const Storage* buffer = given.storage().get();
  ASSERT_TRUE(z.backward(std::move(given)).ok());
  EXPECT_EQ(z.grad().storage().get(), buffer);
  EXPECT_EQ(z.grad().to_vector<float>().value(), (std::vector<float>{4, 5, 6}));
  // Handing over a view of a tensor still held elsewhere copies, as the const overload does.
  Tensor shared = Tensor::from_vector<float>({1, 1, 1}, {3}).value();
  Variable w(Tensor::from_vector<float>({0, 0, 0}, {3}).value(), true);
  ASSERT_TRUE(w.backward(shared.reshape({3}).value()).ok());
  EXPECT_NE(w.grad().storage(), shared.storage());
  ASSERT_TRUE(z.backward(std::move(shared)).ok());  // accumulates: 4 5 6 + 1 1 1
  EXPECT_EQ(z.grad().storage().get(), buffer);
  EXPECT_EQ(z.grad().to_vector<float>().value(), (std::vector<float>{5, 6, 7}));
  // A wrongly shaped gradient is the same error either way.
  EXPECT_FALSE(z.backward(Tensor::from_vector<float>({1, 2}, {2}).value()).ok());
}

TEST(Autograd, OperatorsComputeAndDifferentiateAsTheFunctionsDo) {
  // y = (a b + 1) / 2 - a / b + 3 (-a) + (2 - b) + 6 / b - (b - 0.5) * 1, summed; by hand:
  // dy/da = b / 2 - 1 / b - 3, dy/db = a / 2 + a / b^2 - 1 - 6 / b^2 - 1.
  const std::vector<float> av = {1, -2, 3}, bv = {4, 5, -0.5f};
  Variable a(Tensor::from_vector<float>(av, {3}).value(), true);
  Variable b(Tensor::from_vector<float>(bv, {3}).value(), true);
  Expected<Variable> y =
      (a * b + 1.0) / 2.0 - a / b + 3.0 * (-a) + (2.0 - b) + 6.0 / b - (b - 0.5) * 1.0;
  ASSERT_TRUE(y.ok()) << y.status().to_string();
  std::vector<float> got = y->data().to_vector<float>().value();
  ASSERT_TRUE(sum(*y).value().backward().ok());
  std::vector<float> da = a.grad().to_vector<float>().value();
  std::vector<float> db = b.grad().to_vector<float>().value();
  for (size_t i = 0; i < 3; ++i) {
    const double x = av[i], z = bv[i];
    EXPECT_NEAR(got[i], (x * z + 1) / 2 - x / z - 3 * x + (2 - z) + 6 / z - (z - 0.5), 1e-5);
    EXPECT_NEAR(da[i], z / 2 - 1 / z - 3, 1e-5) << i;
    EXPECT_NEAR(db[i], x / 2 + x / (z * z) - 1 - 6 / (z * z) - 1, 1e-4) << i;
  }
}

TEST(Autograd, OperatorsPassTheFirstErrorOn) {
  Variable a(Tensor::zeros({3}, DType::kF32).value());
  Variable c(Tensor::zeros({2}, DType::kF32).value());
  Expected<Variable> bad = a + c;
  ASSERT_FALSE(bad.ok());
  Expected<Variable> chained = (bad * 2.0 + a) / a;
  ASSERT_FALSE(chained.ok());
  EXPECT_EQ(chained.status().to_string(), bad.status().to_string());
}

// A double with an integer variable is a float scalar, as in PyTorch: the result is f32 (it was
// the integer dtype, 2.5 truncated to 2).
TEST(Autograd, ScalarsWithIntegerVariablesPromoteAsPyTorch) {
  Variable i(Tensor::from_vector<int32_t>({1, -2, 7}, {3}).value());
  for (const Expected<Variable>& y : {i + 2.5, 10.0 - i}) {
    ASSERT_TRUE(y.ok()) << y.status().to_string();
    EXPECT_EQ(y->data().dtype(), DType::kF32);
  }
  EXPECT_EQ((i + 2.5)->data().to_vector<float>().value(), (std::vector<float>{3.5f, 0.5f, 9.5f}));
  EXPECT_EQ((10.0 - i)->data().to_vector<float>().value(), (std::vector<float>{9, 12, 3}));
  Variable small(Tensor::from_vector<int8_t>({1}, {1}).value());
  EXPECT_EQ((small + 300.0)->data().to_vector<float>().value(), (std::vector<float>{301}));
}

// A whole number keeps an integer variable's dtype (int + 2 is int), must fit it, and divides
// truly; with a float variable it is the double (PyTorch's promotion of a Python int).
TEST(Autograd, WholeNumbersWithIntegerVariablesKeepTheirDtype) {
  Variable i(Tensor::from_vector<int32_t>({1, -2, 7}, {3}).value());
  Expected<Variable> sum = i + 2, diff = 7 - i, prod = i * 3, neg = -i;
  for (const Expected<Variable>* y : {&sum, &diff, &prod, &neg}) {
    ASSERT_TRUE(y->ok()) << y->status().to_string();
    EXPECT_EQ((*y)->data().dtype(), DType::kI32);
  }
  EXPECT_EQ(sum->data().to_vector<int32_t>().value(), (std::vector<int32_t>{3, 0, 9}));
  EXPECT_EQ(diff->data().to_vector<int32_t>().value(), (std::vector<int32_t>{6, 9, 0}));
  EXPECT_EQ(prod->data().to_vector<int32_t>().value(), (std::vector<int32_t>{3, -6, 21}));
  EXPECT_EQ(neg->data().to_vector<int32_t>().value(), (std::vector<int32_t>{-1, 2, -7}));
  Expected<Variable> half = i / 2, scaled = i * 2.5;
  ASSERT_TRUE(half.ok() && scaled.ok());
  EXPECT_EQ(half->data().dtype(), DType::kF32);
  EXPECT_EQ(half->data().to_vector<float>().value(), (std::vector<float>{0.5f, -1.0f, 3.5f}));
  EXPECT_EQ(scaled->data().to_vector<float>().value(), (std::vector<float>{2.5f, -5.0f, 17.5f}));
  Variable small(Tensor::from_vector<int8_t>({1}, {1}).value());
  Expected<Variable> over = small + 300;
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.status().message(), "value 300 cannot be converted to type i8 without overflow");
  Variable f(Tensor::from_vector<float>({1.5f}, {1}).value());
  Expected<Variable> fsum = f + int64_t{2};
  ASSERT_TRUE(fsum.ok());
  EXPECT_EQ(fsum->data().dtype(), DType::kF32);
  EXPECT_EQ(fsum->data().to_vector<float>().value(), (std::vector<float>{3.5f}));
}

TEST(Autograd, ItemIsTheValueOfAOneElementVariable) {
  EXPECT_EQ(Variable(Tensor::full({}, 2.5, DType::kF32).value()).item().value(), 2.5);
  EXPECT_EQ(Variable(Tensor::full({1, 1}, -3.0, DType::kBF16).value()).item().value(), -3.0);
  EXPECT_EQ(Variable(Tensor::from_vector<int64_t>({7}, {1}).value()).item().value(), 7.0);
  Expected<double> many = Variable(Tensor::zeros({2}, DType::kF32).value()).item();
  ASSERT_FALSE(many.ok());
  EXPECT_EQ(many.status().message(), "item() needs a one-element variable, got shape [2]");
}

TEST(Autograd, LinearGradientsAccumulateInPlaceIntoLeafGradients) {
  // Backward adds dW and db into the gradients the leaves have (a gemm with beta = 1 and column
  // sums into the leaf where kernels can write in place, else add and copy): after two backwards,
  // twice the plain-C++ gradient, still in the views at offsets into one buffer that
  // nn::FlatParameters would have installed, with the bytes around them untouched.
  const int64_t m = 5, k = 7, n = 3;
  RefTensor x = random_ref({m, k}, 1), w = random_ref({n, k}, 2), b = random_ref({n}, 3);
  std::vector<double> dw(n * k, 0.0), db(n, 0.0);  // of sum(x @ w^T + b): dW[j, p] = sum_i x[i, p]
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      db[j] += 1;
      for (int64_t p = 0; p < k; ++p)
        dw[j * k + p] += x.values[i * k + p];
    }
  for (Device* device : test_devices()) {
    SCOPED_TRACE(device->id());
    Variable xv(device_tensor(x, device)), wv(device_tensor(w, device), true),
        bv(device_tensor(b, device), true);
    Tensor flat = Tensor::zeros({64}, DType::kF32, device).value();
    wv.state()->grad = flat.slice(0, 16, 16 + n * k).value().reshape({n, k}).value();
    bv.state()->grad = flat.slice(0, 48, 48 + n).value();
    for (int round = 0; round < 2; ++round)
      ASSERT_TRUE(sum(linear(xv, wv, bv).value()).value().backward().ok());
    EXPECT_EQ(wv.grad().storage(), flat.storage());
    EXPECT_EQ(bv.grad().storage(), flat.storage());
    EXPECT_EQ(flat.to_vector<float>().value()[0], 0.0f);
    std::vector<double> dw2(dw), db2(db);
    for (double& v : dw2)
      v *= 2;
    for (double& v : db2)
      v *= 2;
    expect_close(wv.grad(), dw2, "dW after two backwards");
    expect_close(bv.grad(), db2, "db after two backwards");
  }
}

// Shapes whose gemms cpu_gemm_blocks runs in smaller blocks on two threads (a 67 x 131 weight
// gradient over 301 rows: one 192 x 256 block, so 48 x 128 blocks; 301 rows: 96-row blocks), with
// x a transposed view and dW accumulated into the leaf's gradient (beta = 1) twice: forward,
// dX and dW against plain-C++ sums in double, on every thread count the pool has.
TEST(Autograd, LinearInSmallerCpuBlocksMatchesTheReference) {
  const int64_t m = 301, k = 131, n = 67;
  EXPECT_EQ(ops::cpu_gemm_blocks(1, n, k, 2), (ops::KernelParams{{"BM", "48"}, {"BN", "128"}}));
  EXPECT_EQ(ops::cpu_gemm_blocks(1, m, n, 2), (ops::KernelParams{{"BM", "96"}}));
  EXPECT_EQ(ops::cpu_gemm_blocks(1, 768, 128, 2), ops::KernelParams{});  // 4 blocks: defaults
  EXPECT_EQ(ops::cpu_gemm_blocks(1, 128, 512, 2), (ops::KernelParams{{"BM", "96"}}));
  EXPECT_EQ(ops::cpu_gemm_blocks(1, 128, 128, 2), (ops::KernelParams{{"BM", "48"}, {"BN", "64"}}));
  EXPECT_EQ(ops::cpu_gemm_blocks(1, 20, 30, 2), ops::KernelParams{});  // nothing splits it
  EXPECT_EQ(ops::cpu_gemm_blocks(3, 128, 128, 2), (ops::KernelParams{{"BM", "96"}}));
  EXPECT_EQ(ops::cpu_gemm_blocks(1, 5000, 5000, 64), ops::KernelParams{});
  RefTensor xt = random_ref({k, m}, 11), w = random_ref({n, k}, 12), b = random_ref({n}, 13),
            r = random_ref({m, n}, 14);
  auto x_at = [&](int64_t i, int64_t p) { return xt.values[p * m + i]; };
  std::vector<double> y(m * n), dx(m * k, 0.0), dw(n * k, 0.0);  // L = sum(r * (x w^T + b))
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = b.values[j];
      for (int64_t p = 0; p < k; ++p) {
        s += x_at(i, p) * w.values[j * k + p];
        dx[i * k + p] += r.values[i * n + j] * w.values[j * k + p];
        dw[j * k + p] += 2 * r.values[i * n + j] * x_at(i, p);  // two backwards
      }
      y[i * n + j] = s;
    }
  for (Device* device : test_devices()) {
    SCOPED_TRACE(device->id());
    Variable xv(device_tensor(xt, device).transpose(0, 1).value(), true);
    Variable wv(device_tensor(w, device), true), bv(device_tensor(b, device), true);
    wv.state()->grad = Tensor::zeros({n, k}, DType::kF32, device).value();
    Variable rv(device_tensor(r, device));
    for (int round = 0; round < 2; ++round) {
      Variable out = linear(xv, wv, bv).value();
      if (round == 0) expect_close(out.data(), y, "y");
      ASSERT_TRUE(sum(mul(out, rv).value()).value().backward().ok());
    }
    std::vector<double> dx2(dx);
    for (double& v : dx2)
      v *= 2;
    expect_close(xv.grad(), dx2, "dX after two backwards");
    expect_close(wv.grad(), dw, "dW accumulated twice");
  }
}

TEST(Autograd, VariableUsedTwiceGetsBothContributions) {
  // y = x * x + x: dy/dx = 2x + 1. Also the seed is a caller's tensor that must not alias x.grad.
  Variable x(Tensor::from_vector<float>({0.5f, -1.5f}, {2}).value(), true);
  Variable y = add(mul(x, x).value(), x).value();
  Tensor seed = Tensor::from_vector<float>({1, 1}, {2}).value();
  ASSERT_TRUE(y.backward(seed).ok());
  EXPECT_EQ(x.grad().to_vector<float>().value(), (std::vector<float>{2, -2}));
  ASSERT_TRUE(seed.fill(5.0).ok());
  EXPECT_EQ(x.grad().to_vector<float>().value(), (std::vector<float>{2, -2}))
      << "grad aliases the seed";
}

TEST(Autograd, GradReadyHookRunsOnceAfterTheLastContribution) {
  // y = sum(x * x + x * w) with x used three times: the hook must see the finished gradient
  // 2x + w, once per backward, and w's hook must run too (its gradient is x).
  Variable x(Tensor::from_vector<float>({0.5f, -1.5f}, {2}).value(), true);
  Variable w(Tensor::from_vector<float>({2.0f, 3.0f}, {2}).value(), true);
  std::vector<std::vector<float>> seen_x;
  int w_calls = 0;
  x.state()->on_grad_ready = [&](VariableState& s) {
    seen_x.push_back(s.grad.to_vector<float>().value());
    return ok_status();
  };
  w.state()->on_grad_ready = [&](VariableState&) {
    ++w_calls;
    return ok_status();
  };
  Variable y = sum(add(mul(x, x).value(), mul(x, w).value()).value()).value();
  ASSERT_TRUE(y.backward().ok());
  ASSERT_EQ(seen_x.size(), 1u);
  EXPECT_EQ(seen_x[0], (std::vector<float>{3.0f, 0.0f}));  // 2x + w
  EXPECT_EQ(w_calls, 1);
  x.state()->on_grad_ready = [](VariableState&) { return internal_error("hook says no"); };
  Variable z = sum(mul(x, w).value()).value();
  Status s = z.backward();
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("hook says no"), std::string::npos) << s.message();
}

TEST(Autograd, UseHookRunsBeforeAnOpReadsTheLeaf) {
  // The hook replaces the leaf's value (as ZeRO-3 puts a gathered parameter in place): the op
  // must compute with the new value.
  Variable x(Tensor::from_vector<float>({0, 0}, {2}).value(), true);
  int uses = 0;
  x.state()->on_use = [&](VariableState& s) {
    ++uses;
    s.data = Tensor::from_vector<float>({1.5f, -2.0f}, {2}).value();
    return ok_status();
  };
  Variable y = sum(mul(x, x).value()).value();
  EXPECT_EQ(uses, 2);  // one op with x as both inputs: the hook runs per input that reads it
  ASSERT_TRUE(y.backward().ok());
  EXPECT_EQ(y.data().to_vector<float>().value(), (std::vector<float>{1.5f * 1.5f + 4.0f}));
  EXPECT_EQ(x.grad().to_vector<float>().value(), (std::vector<float>{3.0f, -4.0f}));
}

TEST(Autograd, NoGradRecordsNothing) {
  const int64_t before = live_nodes();
  Variable x(Tensor::from_vector<float>({1, 2}, {2}).value(), true);
  {
    NoGrad no_grad;
    Variable y = relu(x).value();
    EXPECT_FALSE(y.requires_grad());
    EXPECT_TRUE(y.is_leaf());
    EXPECT_EQ(live_nodes(), before);
  }
  Variable z = relu(x).value();
  EXPECT_TRUE(z.requires_grad());
  EXPECT_EQ(live_nodes(), before + 1);
}

TEST(Autograd, NodesKeepOnlyWhatBackwardReads) {
  Variable w(Tensor::from_vector<float>({1, 2}, {2}).value(), true);
  Variable c(Tensor::from_vector<float>({3, 4}, {2}).value());
  // add's backward reads nothing: the intermediate's memory is freed with the variable.
  Variable a = scale(w, 2.0).value();
  std::weak_ptr<Storage> a_memory = a.data().storage();
  Variable b = add(a, c).value();
  a = Variable();
  EXPECT_TRUE(a_memory.expired()) << "add kept its input";
  // mul's backward reads both inputs: they stay alive until backward has run.
  Variable m = scale(w, 2.0).value();
  std::weak_ptr<Storage> m_memory = m.data().storage();
  Variable p = mul(m, c).value();
  m = Variable();
  EXPECT_FALSE(m_memory.expired()) << "mul must keep its inputs for backward";
  ASSERT_TRUE(sum(p).value().backward().ok());
  EXPECT_TRUE(m_memory.expired()) << "backward frees what it saved";
}

TEST(Autograd, SecondBackwardThroughAFreedGraphIsAnError) {
  Variable x(Tensor::from_vector<float>({1, 2}, {2}).value(), true);
  Variable y = sum(mul(x, x).value()).value();
  ASSERT_TRUE(y.backward().ok());
  Status again = y.backward();
  EXPECT_EQ(again.code(), Code::kFailedPrecondition);
  EXPECT_NE(again.message().find("second time"), std::string::npos) << again.message();
}

TEST(Autograd, BackwardOfANonScalarNeedsAGradient) {
  Variable x(Tensor::from_vector<float>({1, 2}, {2}).value(), true);
  Variable y = relu(x).value();
  Status s = y.backward();
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find(shape_string({2})), std::string::npos) << s.message();
}

TEST(Autograd, GraphsAreFreedWithTheirOutputs) {
  const int64_t before = live_nodes();
  {
    Variable x(Tensor::from_vector<float>({1, 2, 3}, {3}).value(), true);
    Variable y = sum(tanh(mul(x, x).value()).value()).value();
    EXPECT_EQ(live_nodes(), before + 3);
  }
  EXPECT_EQ(live_nodes(), before);
}

}  // namespace
}  // namespace tessel::autograd
