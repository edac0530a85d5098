// SparseEmbedding and the lazy optimizers on every device, against plain C++ references of the
// lookup, the summed row gradients and PyTorch's SGD / AdamW equations applied to touched rows
// only (untouched rows and their state must not move); and lazy SGD against the dense-gradient
// embedding with optim::Sgd, which must agree exactly in value (up to float rounding).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>

#include "autograd/functional.h"
#include "nn/layers.h"
#include "ops/kernel_util.h"
#include "optim/optimizer.h"
#include "sparse/embedding.h"
#include "sparse/embedding_step.h"
#include "sparse/testing.h"

namespace tessel::sparse {
namespace {

constexpr int64_t kV = 11, kC = 5;

TEST(SparseEmbedding, LookupGradientAndLazyAdamWOnEveryDevice) {
  for (Device* device : testing::devices()) {
    SCOPED_TRACE(device->id());
    Tensor table = testing::random_dense({kV, kC}, 1, device);
    const std::vector<float> w0 = table.to_vector<float>().value();
    SparseEmbedding emb = SparseEmbedding::over(table).value();
    LazyAdamWOptions o;
    o.lr = 0.1;
    o.weight_decay = 0.05;
    LazyAdamW opt = LazyAdamW::create(emb, o).value();
    const std::vector<int64_t> ids = {7, 2, 7, 9, 2, 7};
    Tensor t = Tensor::from_vector(ids, {2, 3}, device).value();
    Variable y = emb.forward(t).value();
    ASSERT_EQ(y.shape(), (Shape{2, 3, kC}));
    std::vector<float> yv = y.data().to_vector<float>().value();
    for (size_t p = 0; p < ids.size(); ++p)
      for (int64_t c = 0; c < kC; ++c)
        ASSERT_EQ(yv[p * kC + c], w0[ids[p] * kC + c]);
    Tensor g = testing::random_dense({2, 3, kC}, 2, device);
    const std::vector<float> gv = g.to_vector<float>().value();
    ASSERT_TRUE(y.backward(g).ok());
    EXPECT_EQ(emb.grad_indices().to_vector<int64_t>().value(), (std::vector<int64_t>{2, 7, 9}));
    // The gradient of each touched row: the sum over its positions.
    std::map<int64_t, std::vector<double>> want;
    for (size_t p = 0; p < ids.size(); ++p) {
      auto& row = want[ids[p]];
      row.resize(kC);
      for (int64_t c = 0; c < kC; ++c)
        row[c] += gv[p * kC + c];
    }
    std::vector<float> rows = emb.grad_rows().value().to_vector<float>().value();
    int u = 0;
    for (const auto& [id, row] : want) {
      for (int64_t c = 0; c < kC; ++c)
        EXPECT_NEAR(rows[u * kC + c], row[c], 1e-6);
      ++u;
    }
    // One AdamW step (t = 1): p = p (1 - lr wd) - lr / (1 - b1) m / (sqrt(v) / sqrt(1 - b2) + eps)
    ASSERT_TRUE(opt.step(emb).ok());
    std::vector<float> w1 = emb.weight().to_vector<float>().value();
    std::vector<float> m = opt.exp_avg().to_vector<float>().value();
    for (int64_t v = 0; v < kV; ++v)
      for (int64_t c = 0; c < kC; ++c) {
        const size_t i = v * kC + c;
        if (!want.count(v)) {
          EXPECT_EQ(w1[i], w0[i]) << "untouched row " << v << " moved";
          EXPECT_EQ(m[i], 0.0f);
          continue;
        }
        double gr = want[v][c], mm = (1 - o.beta1) * gr, vv = (1 - o.beta2) * gr * gr;
        double step_size = o.lr / (1 - o.beta1), bc2 = std::sqrt(1 - o.beta2);
        double p =
            w0[i] * (1 - o.lr * o.weight_decay) - step_size * mm / (std::sqrt(vv) / bc2 + o.eps);
        EXPECT_NEAR(w1[i], p, 1e-5) << v << ", " << c;
        EXPECT_NEAR(m[i], mm, 1e-6);
      }
    EXPECT_EQ(opt.step_count(), 1);
  }
}

// Lazy SGD without weight decay is dense SGD: rows without gradient do not move either way.
// Ids repeat within a step, so rows sum several positions.
TEST(SparseEmbedding, LazySgdEqualsDenseSgd) {
  for (Device* device : testing::devices()) {
    SCOPED_TRACE(device->id());
    nn::Embedding dense(kV, kC);
    Pcg32 rng(3);
    nn::FlatParameters flat = nn::FlatParameters::create(dense, device, rng).value();
    auto sgd = optim::Sgd::create(flat, {.lr = 0.5}).value();
    // Its own copy of the same weights.
    SparseEmbedding emb =
        SparseEmbedding::over(ops::copy_on_device(dense.weight().variable.data()).value()).value();
    LazySgd lazy = LazySgd::create({.lr = 0.5}).value();
    for (int step = 0; step < 3; ++step) {
      std::vector<int64_t> ids = {static_cast<int64_t>(step), 4, 4, 10};
      Tensor t = Tensor::from_vector(ids, {4}, device).value();
      Tensor g = testing::random_dense({4, kC}, 10 + step, device);
      // y + 0.5 y: the gradient reaches the lookup through an op, by two edges that add up.
      auto through_ops = [](const Variable& y) {
        return autograd::add(y, autograd::scale(y, 0.5).value()).value();
      };
      Variable yd = dense.forward(Variable(t)).value();
      ASSERT_TRUE(through_ops(yd).backward(g).ok());
      ASSERT_TRUE(sgd->step().ok());
      ASSERT_TRUE(flat.zero_grad().ok());
      Variable ys = emb.forward(t).value();
      ASSERT_TRUE(through_ops(ys).backward(g).ok());
      ASSERT_TRUE(lazy.step(emb).ok());
      emb.zero_grad();
    }
    std::vector<float> a = dense.weight().variable.data().to_vector<float>().value();
    std::vector<float> b = emb.weight().to_vector<float>().value();
    for (size_t i = 0; i < a.size(); ++i)
      EXPECT_NEAR(a[i], b[i], 1e-6) << i;
  }
}

TEST(SparseEmbedding, IdsOutsideTheTableAreAnError) {
  SparseEmbedding emb =
      SparseEmbedding::over(testing::random_dense({4, 2}, 1, cpu_device())).value();
  Expected<Variable> y = emb.forward(Tensor::from_vector<int64_t>({1, 4}, {2}).value());
  ASSERT_FALSE(y.ok());
  EXPECT_NE(y.status().message().find("id 4 at position 1 is outside the table of 4 rows"),
            std::string::npos)
      << y.status().message();
}

// The radix grouping against std::sort + std::unique, for tables of one, two and three bytes of
// ids (one to three passes), a table of one row, and no ids: every position once, under its id,
// in increasing order within an id.
TEST(SparseEmbedding, GroupIdsMatchesSortAndUnique) {
  std::mt19937_64 rng(3);
  for (int64_t v : {1, 200, 50000, 70000}) {
    for (size_t n : {size_t{0}, size_t{1}, size_t{300}, size_t{5000}}) {
      SCOPED_TRACE(fmt::format("v = {}, n = {}", v, n));
      std::vector<int64_t> ids(n);
      for (int64_t& id : ids)
        id = static_cast<int64_t>(rng() % static_cast<uint64_t>(v));
      std::vector<int64_t> want = ids;
      std::sort(want.begin(), want.end());
      want.erase(std::unique(want.begin(), want.end()), want.end());
      const IdGroups g = group_ids(ids, v);
      EXPECT_EQ(g.unique, want);
      ASSERT_EQ(g.starts.size(), want.size() + 1);
      ASSERT_EQ(g.positions.size(), n);
      EXPECT_EQ(g.starts.front(), 0);
      EXPECT_EQ(g.starts.back(), static_cast<int64_t>(n));
      std::vector<int> seen(n, 0);
      for (size_t u = 0; u < want.size(); ++u)
        for (int64_t k = g.starts[u]; k < g.starts[u + 1]; ++k) {
          const int64_t p = g.positions[k];
          ASSERT_EQ(ids[p], want[u]) << k;
          if (k > g.starts[u]) {
            ASSERT_LT(g.positions[k - 1], p) << k;
          }
          seen[p] += 1;
        }
      EXPECT_EQ(std::count(seen.begin(), seen.end(), 1), static_cast<long>(n));
    }
  }
}

// The dense- and sparse-gradient steps start equal and both train (small sizes; the timing is
// the benchmark's business, not a test's).
TEST(SparseEmbedding, StepComparisonTrainsBothWays) {
  EmbeddingStepOptions o;
  o.vocabulary = 40;
  o.dim = 16;
  o.batch = 4;
  o.tokens = 16;
  o.steps = 8;
  o.warmup = 1;
  o.lr = 0.1;
  EmbeddingStepReport r = compare_embedding_steps(o).value();
  ASSERT_EQ(r.dense_loss.size(), 9u);
  EXPECT_DOUBLE_EQ(r.dense_loss[0], r.sparse_loss[0]);
  EXPECT_LT(r.dense_loss.back(), r.dense_loss.front());
  EXPECT_LT(r.sparse_loss.back(), r.sparse_loss.front());
  EXPECT_EQ(r.dense_ms.size(), 8u);
  EXPECT_EQ(r.scattered_rows_cpu_ms.size(), 8u);
  EXPECT_EQ(r.contiguous_rows_cpu_ms.size(), 8u);
}

// The batches the comparison draws touch as many distinct rows as the closed form says: with n
// draws of probabilities p_k, E[distinct] = sum_k 1 - (1 - p_k)^n; uniform p_k = 1 / V, Zipf
// p_k = k^-s / H. Zipf ids touch fewer rows, and both kinds of step still train.
TEST(SparseEmbedding, StepComparisonDrawsUniformAndZipfIdsAsTheirLawsSay) {
  EmbeddingStepOptions o;
  o.vocabulary = 2000;
  o.dim = 8;
  o.batch = 8;
  o.tokens = 64;
  o.steps = 7;
  o.warmup = 1;
  o.lr = 0.1;
  const double n = static_cast<double>(o.batch * o.tokens);
  auto expected_distinct = [&](double s) {
    std::vector<double> p(static_cast<size_t>(o.vocabulary));
    double total = 0;
    for (size_t k = 0; k < p.size(); ++k)
      total += p[k] = s > 0 ? std::pow(static_cast<double>(k + 1), -s) : 1.0;
    double distinct = 0;
    for (double pk : p)
      distinct += 1 - std::pow(1 - pk / total, n);
    return distinct;
  };
  for (double s : {0.0, 1.0}) {
    o.zipf = s;
    EmbeddingStepReport r = compare_embedding_steps(o).value();
    const double want = expected_distinct(s);
    EXPECT_NEAR(r.mean_touched_rows, want, 0.05 * want) << "zipf " << s;
    EXPECT_LT(r.dense_loss.back(), r.dense_loss.front()) << "zipf " << s;
    EXPECT_LT(r.sparse_loss.back(), r.sparse_loss.front()) << "zipf " << s;
  }
  EXPECT_LT(expected_distinct(1.0), 0.6 * expected_distinct(0.0));
}

}  // namespace
}  // namespace tessel::sparse
