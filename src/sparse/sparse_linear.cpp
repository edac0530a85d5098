// SparseLinear (see sparse_linear.h).
#include "sparse/sparse_linear.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "autograd/functional.h"
#include "nn/init.h"
#include "sparse/functional.h"

namespace tessel::sparse {

SparseLinear::SparseLinear(SparseMatrix weight, bool bias) : pattern_(std::move(weight)) {
  std::vector<float> initial = pattern_.to(SparseFormat::kCsr)
                                   .value()
                                   .values()
                                   .to_vector<float>()
                                   .value();  // a bug if a validated matrix cannot be read
  values_ = &register_parameter(
      "weight_values", {pattern_.nnz()}, [initial](Tensor& t, Pcg32&) -> Status {
        TESSEL_ASSIGN_OR_RETURN(Tensor host, Tensor::from_vector(
                                                 initial, {static_cast<int64_t>(initial.size())}));
        return t.copy_from(host);
      });
  if (bias) {
    // nn.Linear's bias: U(-1/sqrt(in), 1/sqrt(in)).
    const double bound = pattern_.cols() > 0 ? 1.0 / std::sqrt(static_cast<double>(pattern_.cols())) : 0.0;
    bias_ = &register_parameter("bias", {pattern_.rows()}, [bound](Tensor& t, Pcg32& rng) {
      return nn::uniform(t, rng, -bound, bound);
    });
  }
}

Expected<SparseMatrix> SparseLinear::prune(const Tensor& weight, double keep) {
  if (weight.rank() != 2 || weight.dtype() != DType::kF32 || keep <= 0 || keep > 1)
    return invalid_argument("SparseLinear::prune: needs an f32 [out, in] weight and 0 < keep <= 1, "
                            "got {} {} and keep {}",
                            dtype_name(weight.dtype()), shape_string(weight.shape()), keep);
  TESSEL_ASSIGN_OR_RETURN(std::vector<float> w, weight.to_vector<float>());
  const int64_t rows = weight.size(0), cols = weight.size(1);
  const size_t kept = static_cast<size_t>(std::ceil(keep * static_cast<double>(w.size())));
  std::vector<int64_t> order(w.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return std::fabs(w[a]) > std::fabs(w[b]); });
  order.resize(kept);
  std::sort(order.begin(), order.end());
  std::vector<int64_t> indptr(static_cast<size_t>(rows + 1), 0), col;
  std::vector<float> values;
  for (int64_t i : order) {
    indptr[i / cols + 1] += 1;
    col.push_back(i % cols);
    values.push_back(w[i]);
  }
  std::partial_sum(indptr.begin(), indptr.end(), indptr.begin());
  return SparseMatrix::csr(rows, cols, std::move(indptr), std::move(col), std::move(values),
                           weight.device());
}

Expected<Variable> SparseLinear::forward(const Variable& x) {
  TESSEL_ASSIGN_OR_RETURN(Variable v, value(*values_));
  const Shape& s = x.shape();
  if (s.empty() || s.back() != pattern_.cols())
    return invalid_argument("SparseLinear: input {} for a weight of {}", shape_string(s),
                            pattern_.describe());
  if (!device_pattern_.defined() || device_pattern_.device() != v.data().device()) {
    TESSEL_ASSIGN_OR_RETURN(device_pattern_, pattern_.to_device(v.data().device()));
  }
  // y^T [out, rows] = W [out, in] x^T [in, rows].
  const int64_t rows = x.data().numel() / pattern_.cols();
  TESSEL_ASSIGN_OR_RETURN(Variable x2, autograd::reshape(x, {rows, pattern_.cols()}));
  TESSEL_ASSIGN_OR_RETURN(Variable xt, autograd::permute(x2, {1, 0}));
  TESSEL_ASSIGN_OR_RETURN(Variable yt, spmm(SparseVariable{device_pattern_, v}, xt));
  TESSEL_ASSIGN_OR_RETURN(Variable y, autograd::permute(yt, {1, 0}));
  if (bias_) {
    TESSEL_ASSIGN_OR_RETURN(Variable b, value(*bias_));
    TESSEL_ASSIGN_OR_RETURN(y, autograd::add(y, b));
  }
  Shape out = s;
  out.back() = pattern_.rows();
  return autograd::reshape(y, out);
}

}  // namespace tessel::sparse
