// Autocast: inside the scope linear, matmul and conv2d compute on operands rounded to the scope's
// dtype, the rest stays f32, the weights' gradients stay f32 and reach the master weights, and
// the scope nests and restores. The expected values are plain C++ on the rounded inputs.
#include "autograd/autocast.h"

#include <gtest/gtest.h>

#include <random>

#include "autograd/functional.h"

namespace tessel::autograd {
namespace {

std::vector<float> random_values(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<float> v(n);
  for (float& x : v)
    x = std::uniform_real_distribution<float>(-2.0f, 2.0f)(rng);
  return v;
}

float bf16(float x) {
  return static_cast<float>(BFloat16(x));
}

TEST(Autocast, LinearComputesOnRoundedOperandsAndKeepsF32Gradients) {
  const int64_t m = 5, k = 37, n = 6;
  std::vector<float> xv = random_values(m * k, 1), wv = random_values(n * k, 2),
                     bv = random_values(n, 3);
  Variable x(Tensor::from_vector(xv, {m, k}).value(), true);
  Variable w(Tensor::from_vector(wv, {n, k}).value(), true);
  Variable b(Tensor::from_vector(bv, {n}).value(), true);
  Variable y;
  {
    Autocast autocast(DType::kBF16);
    EXPECT_EQ(autocast_dtype(), DType::kBF16);
    y = linear(x, w, b).value();
    // sum(y) has gradient 1 (exact in bf16) for every output.
    Variable loss = sum(y).value();
    ASSERT_TRUE(loss.backward().ok());
  }
  EXPECT_EQ(autocast_dtype(), DType::kF32);
  ASSERT_EQ(y.data().dtype(), DType::kF32);
  std::vector<float> got = y.data().to_vector<float>().value();
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double want = bv[j];
      for (int64_t p = 0; p < k; ++p)
        want += double(bf16(xv[i * k + p])) * double(bf16(wv[j * k + p]));
      EXPECT_NEAR(got[i * n + j], want, 1e-5 * (1 + std::fabs(want))) << i << "," << j;
    }
  // dW[j, p] = sum_i round(x[i, p]); dx[i, p] = sum_j round(w[j, p]); db[j] = m.
  ASSERT_EQ(w.grad().dtype(), DType::kF32);
  ASSERT_EQ(x.grad().dtype(), DType::kF32);
  std::vector<float> dw = w.grad().to_vector<float>().value(),
                     dx = x.grad().to_vector<float>().value(),
                     db = b.grad().to_vector<float>().value();
  for (int64_t j = 0; j < n; ++j)
    for (int64_t p = 0; p < k; ++p) {
      double want = 0;
      for (int64_t i = 0; i < m; ++i)
        want += bf16(xv[i * k + p]);
      EXPECT_NEAR(dw[j * k + p], want, 1e-5) << "dW " << j << "," << p;
    }
  for (int64_t i = 0; i < m; ++i)
    for (int64_t p = 0; p < k; ++p) {
      double want = 0;
      for (int64_t j = 0; j < n; ++j)
        want += bf16(wv[j * k + p]);
      EXPECT_NEAR(dx[i * k + p], want, 1e-5) << "dx " << i << "," << p;
    }
  for (int64_t j = 0; j < n; ++j)
    EXPECT_FLOAT_EQ(db[j], float(m));
}

TEST(Autocast, OutsideTheScopeNothingIsRounded) {
  // Values that bf16 cannot hold: 1 + 2^-12 rounds to 1.
  const float fine = 1.0f + 1.0f / 4096;
  Variable a(Tensor::from_vector<float>({fine, fine}, {1, 2}).value());
  Variable b(Tensor::from_vector<float>({1.0f, 1.0f}, {2, 1}).value());
  EXPECT_FLOAT_EQ(matmul(a, b).value().data().to_vector<float>().value()[0], 2 * fine);
  {
    Autocast autocast(DType::kBF16);
    EXPECT_FLOAT_EQ(matmul(a, b).value().data().to_vector<float>().value()[0], 2.0f);
    {
      Autocast off(DType::kF32);  // nested scopes restore what was there
      EXPECT_FLOAT_EQ(matmul(a, b).value().data().to_vector<float>().value()[0], 2 * fine);
    }
    EXPECT_EQ(autocast_dtype(), DType::kBF16);
    // softmax, sums and the like stay f32 inside the scope.
    Variable s = sum(a).value();
    EXPECT_FLOAT_EQ(s.data().to_vector<float>().value()[0], 2 * fine);
  }
  EXPECT_FLOAT_EQ(matmul(a, b).value().data().to_vector<float>().value()[0], 2 * fine);
}

TEST(Autocast, Conv2dComputesInF16InsideTheScope) {
  // 1 + 2^-12 is between two f16 values (spacing 2^-10 above 1): it rounds to 1.
  const float fine = 1.0f + 1.0f / 4096;
  Variable x(Tensor::from_vector<float>({fine, fine, fine, fine}, {1, 1, 2, 2}).value());
  Variable w(Tensor::from_vector<float>({1.0f}, {1, 1, 1, 1}).value(), true);
  Variable b(Tensor::from_vector<float>({0.0f}, {1}).value());
  Autocast autocast(DType::kF16);
  Variable y = conv2d(x, w, b).value();
  std::vector<float> out = y.data().to_vector<float>().value();
  for (float v : out)
    EXPECT_FLOAT_EQ(v, 1.0f);
  ASSERT_TRUE(sum(y).value().backward().ok());
  EXPECT_EQ(w.grad().dtype(), DType::kF32);
  EXPECT_FLOAT_EQ(w.grad().to_vector<float>().value()[0], 4.0f);  // four rounded ones
}

}  // namespace
}  // namespace tessel::autograd
