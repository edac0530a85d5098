// Every sparse op on every device the op library launches on (cpu, opencl where present): forward
// against the op's plain-C++ reference in double, backward (through autograd::apply) against
// central finite differences of that reference for L = sum(w * op(...)) with random w, as
// src/ops/ops_test.cpp does for the dense ops. Tolerances as there: forward 2e-5 + 2e-5 rel,
// gradients 2e-4 + 2e-3 rel.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "autograd/functional.h"
#include "autograd/variable.h"
#include "ops/kernel_cache.h"
#include "sparse/sparse_matrix.h"
#include "sparse/sparse_ops.h"
#include "sparse/testing.h"

namespace tessel::sparse {
namespace {

using autograd::Variable;
using ops::RefTensor;

RefTensor ref_of(const Tensor& t) {
  RefTensor r{t.shape(), {}};
  if (t.dtype() == DType::kI64) {
    std::vector<int64_t> host = t.to_vector<int64_t>().value();
    r.values.assign(host.begin(), host.end());
  } else {
    std::vector<float> host = t.to_vector<float>().value();
    r.values.assign(host.begin(), host.end());
  }
  return r;
}

void expect_close(const std::vector<double>& got, const std::vector<double>& want, double abs,
                  double rel, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int misses = 0;
  for (size_t i = 0; i < got.size(); ++i)
    if (!(std::fabs(got[i] - want[i]) <= abs + rel * std::fabs(want[i])) && misses++ < 5)
      ADD_FAILURE() << what << " [" << i << "]: got " << got[i] << ", want " << want[i];
  EXPECT_EQ(misses, 0) << what;
}

// Runs `name` on `inputs` (on one device): forward against the reference, then the gradient of
// every differentiable f32 input against finite differences (unless forward_only).
void check_op(const std::string& name, const std::vector<Tensor>& inputs, const ops::Attrs& attrs,
              bool forward_only = false) {
  SCOPED_TRACE(name + " on " + inputs[0].device()->id());
  const ops::OpDef* op = find_sparse_op(name).value();
  std::vector<RefTensor> refs;
  for (const Tensor& t : inputs)
    refs.push_back(ref_of(t));
  RefTensor want = op->reference(refs, attrs);
  Expected<Tensor> got = ops::run(*op, inputs, attrs);
  ASSERT_TRUE(got.ok()) << got.status().message();
  ASSERT_EQ(got->shape(), want.shape);
  expect_close(ref_of(*got).values, want.values, 2e-5, 2e-5, "forward");
  if (forward_only) return;

  std::mt19937 rng(7);
  std::vector<double> w(want.values.size());
  for (double& x : w)
    x = std::uniform_real_distribution<double>(-1, 1)(rng);
  std::vector<Variable> vars;
  for (size_t i = 0; i < inputs.size(); ++i)
    vars.emplace_back(inputs[i], op->differentiable[i] && inputs[i].dtype() == DType::kF32);
  Variable y = autograd::apply(*op, vars, attrs).value();
  std::vector<float> wf(w.begin(), w.end());
  Variable wv(Tensor::from_vector(wf, want.shape, inputs[0].device()).value());
  Variable loss = autograd::sum(autograd::mul(y, wv).value()).value();
  ASSERT_TRUE(loss.backward().ok());
  auto weighted = [&](const std::vector<RefTensor>& r) {
    RefTensor out = op->reference(r, attrs);
    double s = 0;
    for (size_t i = 0; i < w.size(); ++i)
      s += w[i] * out.values[i];
    return s;
  };
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!vars[i].requires_grad()) continue;
    ASSERT_TRUE(vars[i].grad().defined()) << "no gradient for input " << i;
    std::vector<double> numeric(refs[i].values.size());
    for (size_t j = 0; j < numeric.size(); ++j) {
      std::vector<RefTensor> r = refs;
      const double h = 1e-4;
      r[i].values[j] += h;
      double up = weighted(r);
      r[i].values[j] -= 2 * h;
      numeric[j] = (up - weighted(r)) / (2 * h);
    }
    expect_close(ref_of(vars[i].grad()).values, numeric, 2e-4, 2e-3,
                 "gradient of input " + std::to_string(i));
  }
}

std::vector<Tensor> csr_inputs(const SparseMatrix& m, const Tensor& dense) {
  SparseMatrix::Transposed t = m.transposed().value();
  SparseMatrix csr = m.to(SparseFormat::kCsr).value();
  return {csr.indptr(), m.col_indices(), m.values(),   dense, m.expanded_rows().value(),
          t.indptr,     t.col_indices,   t.permutation};
}

std::vector<Tensor> coo_inputs(const SparseMatrix& m, const Tensor& dense) {
  return {m.expanded_rows().value(), m.col_indices(), m.values(), dense};
}

TEST(SparseOps, EveryOpForwardAndGradientOnEveryDevice) {
  for (Device* device : testing::devices()) {
    // Shapes: a column tile and a bit (N = 70 on 64/128-wide tiles), two 256-wide tiles (300),
    // empty rows (density 0.05 on 5 rows), rows with more than four nonzeros (the unrolled loop).
    struct Shape3 {
      int64_t m, k, n;
      double density;
    };
    for (Shape3 s : {Shape3{37, 29, 70, 0.2}, Shape3{5, 11, 300, 0.05}, Shape3{9, 40, 3, 0.6}}) {
      SparseMatrix a = testing::random_matrix(s.m, s.k, s.density, 11, device);
      Tensor b = testing::random_dense({s.k, s.n}, 12, device);
      Tensor x = testing::random_dense({s.k}, 13, device);
      Tensor d = testing::random_dense({s.m, s.k}, 14, device);
      ops::Attrs rows = ops::Attrs().set("rows", s.m);
      check_op("spmm_csr", csr_inputs(a, b), {});
      check_op("spmm_coo", coo_inputs(a, b), rows);
      check_op("spmv_csr", csr_inputs(a, x), {});
      check_op("spmv_coo", coo_inputs(a, x), rows);
      check_op("sparse_add_dense", coo_inputs(a, d), {});
      check_op("sparse_to_dense", {a.expanded_rows().value(), a.col_indices(), a.values()},
               ops::Attrs().set("rows", s.m).set("cols", s.k));
      SparseMatrix::Transposed t = a.transposed().value();
      check_op("gather_values", {a.values(), t.permutation, t.inverse}, {});
      // BSR with ragged edge blocks (4 x 3 blocks over 37 x 29), forward only.
      SparseMatrix bsr = a.to(SparseFormat::kBsr, 4, 3).value();
      check_op("spmm_bsr", {bsr.indptr(), bsr.col_indices(), bsr.values(), b}, rows, true);
    }
  }
}

// spmm_csr's column tiles (spmm_csr_tiled): several tiles per row (N = 768: 3 x 256 and 384:
// 3 x 128 on the CPU, 6 x 64 on a GPU), one tile (128 on the CPU), and a last block of rows shorter
// than kCsrBlockRows (37 rows); row lengths from 0 to past a multiple of four; and N = 600, which
// no tile divides (spmm_csr). Forward only: the gradients run the same kernels.
TEST(SparseOps, SpmmCsrColumnTilesMatchTheReference) {
  for (Device* device : testing::devices())
    for (int64_t n : {768, 600, 384, 128}) {
      SCOPED_TRACE("n = " + std::to_string(n));
      // Every tenth row empty, the others about 7 nonzeros.
      std::mt19937 rng(21);
      std::vector<int64_t> rows, cols;
      for (int64_t r = 0; r < 37; ++r)
        for (int64_t c = 0; c < 23; ++c)
          if (r % 10 != 5 && rng() % 10 < 3) {
            rows.push_back(r);
            cols.push_back(c);
          }
      std::vector<float> values(rows.size());
      for (float& v : values)
        v = std::uniform_real_distribution<float>(-1, 1)(rng);
      SparseMatrix a = SparseMatrix::coo(37, 23, rows, cols, values, device).value();
      check_op("spmm_csr", csr_inputs(a, testing::random_dense({23, n}, 22, device)), {}, true);
    }
  EXPECT_EQ(csr_tile(cpu_device(), 600), 0);
  EXPECT_EQ(csr_tile(cpu_device(), 70), 70);  // narrow: one tile of its own width
  EXPECT_EQ(csr_tile(cpu_device(), 384), 128);
  EXPECT_EQ(csr_tile(cpu_device(), 768), 256);
}

// spmv_csr's blocks of several row groups (spmv_groups): 1000 rows of ~420 nonzeros make three
// blocks on the CPU, of 6, 6 and 4 groups of 64 rows, the last group ragged (40 rows); a product
// of fewer nonzeros than kSpmvBlockNonzeros is one block. Forward only, against the reference
// (the gradients run the same kernel).
TEST(SparseOps, SpmvCsrBlocksOfRowGroupsMatchTheReference) {
  EXPECT_EQ(spmv_groups(cpu_device(), 4096, 16384), 64);  // one block
  for (Device* device : testing::devices()) {
    SparseMatrix a = testing::random_matrix(1000, 1400, 0.3, 31, device);
    if (device->kind() == DeviceKind::kCpu) {
      ASSERT_EQ(a.nnz() / kSpmvBlockNonzeros, 3) << a.nnz();
      EXPECT_EQ(spmv_groups(device, 1000, a.nnz()), 6);
    }
    check_op("spmv_csr", csr_inputs(a, testing::random_dense({1400}, 32, device)), {}, true);
  }
}

TEST(SparseOps, ShapeErrorsNameTheOp) {
  SparseMatrix a = testing::random_matrix(4, 5, 0.5, 1, cpu_device());
  Tensor wrong = testing::random_dense({6, 3}, 2, cpu_device());
  Expected<Tensor> y = ops::run(*find_sparse_op("spmm_csr").value(), csr_inputs(a, wrong));
  ASSERT_FALSE(y.ok());
  EXPECT_NE(y.status().message().find("spmm_csr: needs a CSR matrix of 4 x 5"), std::string::npos)
      << y.status().message();
}

}  // namespace
}  // namespace tessel::sparse
