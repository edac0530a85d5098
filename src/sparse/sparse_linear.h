// nn::Linear with a pruned, sparse weight: y = x W^T + b where W [out, in] keeps only some
// entries. The kept values are one parameter, "weight_values" [nnz], in the module tree (so
// FlatParameters, the optimizers and checkpoints treat it like any other), and the pattern is
// fixed. forward() runs W x^T through the sparse planner (sparse/functional.h): a CSR or COO
// kernel, or the dense gemm when the weight is not sparse enough to pay.
//
//   SparseMatrix w = SparseLinear::prune(dense_weight, /*keep=*/0.1).value();   // largest 10%
//   auto layer = std::make_unique<SparseLinear>(w);                               // + bias
#pragma once

#include "nn/module.h"
#include "sparse/sparse_matrix.h"

namespace tessel::sparse {

using autograd::Variable;

class SparseLinear : public nn::Module {
 public:
  // `weight`: the pattern and initial values [out, in]; the bias is nn::Linear's default,
  // U(-1/sqrt(in), 1/sqrt(in)).
  explicit SparseLinear(SparseMatrix weight, bool bias = true);
  // Magnitude pruning of a dense f32 weight [out, in]: the ceil(keep x numel) entries of largest
  // |w| (ties to the earlier entry), as a CSR matrix on the weight's device.
  static Expected<SparseMatrix> prune(const Tensor& weight, double keep);

  // x [..., in] -> [..., out].
  Expected<Variable> forward(const Variable& x) override;
  std::string type_name() const override { return "SparseLinear"; }
  const SparseMatrix& pattern() const { return pattern_; }
  nn::Parameter& weight_values() { return *values_; }
  nn::Parameter* bias() { return bias_; }

 private:
  SparseMatrix pattern_;         // as given; its index tensors are moved to the values' device
  SparseMatrix device_pattern_;  // on the device of the parameters, made at the first forward
  nn::Parameter* values_;
  nn::Parameter* bias_ = nullptr;
};

}  // namespace tessel::sparse
