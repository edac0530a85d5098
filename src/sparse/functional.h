// Sparse operations for autograd: a SparseVariable is a matrix whose values are a Variable, and
// each function records sparse OpDefs (sparse/sparse_ops.h) on the tape, so gradients reach the
// values (SDDMM) and the dense operands.
//
//   SparseVariable a = SparseVariable::of(adjacency, /*requires_grad=*/false);
//   TESSEL_ASSIGN_OR_RETURN(Variable h, sparse::spmm(a, x));          // [M, K] x [K, N]
//   TESSEL_ASSIGN_OR_RETURN(Variable y, sparse::dense_spmm(x, a));    // [B, M] x [M, K]
//
// Each call plans (sparse/planner.h): structure and plans are cached per pattern, so a matrix
// used every step is measured and planned once; when the model's two best are close the first
// call times both. PreparedSpmm converts once for inference (values fixed), where the dense
// choice keeps its densified matrix.
#pragma once

#include "autograd/variable.h"
#include "sparse/planner.h"
#include "sparse/sparse_matrix.h"

namespace tessel::sparse {

using autograd::Variable;

struct SparseVariable {
  SparseMatrix matrix;  // pattern and format (values: those of `values` when made)
  Variable values;      // [NNZ] (or the BSR blocks)
  static SparseVariable of(SparseMatrix m, bool requires_grad = false);
};

// The plan for `op` on `a` with n dense columns (cached per pattern, device, op, n, gradients).
// `dense` (B, or x for spmv) lets the planner time candidates on the real operand.
Expected<Plan> plan_for(const SparseMatrix& a, SparseOp op, int64_t n, bool needs_grad,
                        const PlanOptions& options = {}, const Tensor* dense = nullptr);

// a [M, K] x b [K, N] -> [M, N].
Expected<Variable> spmm(const SparseVariable& a, const Variable& b, const PlanOptions& o = {});
// The same with a fixed choice (what the planner runs, and the benchmark's fixed formats).
Expected<Variable> spmm_as(const SparseVariable& a, const Variable& b, Choice choice);
// b [B, M] x a [M, K] -> [B, K], as (a^T b^T)^T.
Expected<Variable> dense_spmm(const Variable& b, const SparseVariable& a,
                              const PlanOptions& o = {});
// a [M, K] x x [K] -> [M].
Expected<Variable> spmv(const SparseVariable& a, const Variable& x, const PlanOptions& o = {});
Expected<Variable> spmv_as(const SparseVariable& a, const Variable& x, Choice choice);
// a + d, d [M, K] dense -> dense: one scatter of a's values into a copy of d, or (planned, where
// it measures faster) d + the densified a.
Expected<Variable> add_dense(const SparseVariable& a, const Variable& d, const PlanOptions& o = {});
Expected<Variable> to_dense(const SparseVariable& a);
// a^T with differentiable values (a permutation of a's).
Expected<SparseVariable> transpose(const SparseVariable& a);

// SpMM for inference: the plan and the matrix in the chosen format made once, values fixed.
class PreparedSpmm {
 public:
  static Expected<PreparedSpmm> make(const SparseMatrix& a, int64_t n,
                                     const PlanOptions& options = {},
                                     const Tensor* sample = nullptr);
  // The same with the choice fixed (no planning).
  static Expected<PreparedSpmm> fixed(const SparseMatrix& a, Choice choice);
  Expected<Tensor> run(const Tensor& b) const;
  const Plan& plan() const { return plan_; }

 private:
  Plan plan_;
  SparseMatrix matrix_;  // in the chosen format
  Tensor dense_;         // Choice::kDense
};

}  // namespace tessel::sparse
