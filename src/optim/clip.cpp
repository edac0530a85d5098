// Global-norm gradient clipping on the flat gradient buffers (see clip.h).
#include "optim/clip.h"

#include <cmath>
#include <numeric>

#include "ops/kernel_cache.h"

namespace tessel::optim {

Expected<double> global_grad_norm(const nn::FlatParameters& params) {
  double total = 0;
  for (const auto& group : params.groups()) {
    // Rows of whole flat groups are kAlignElements long; a ZeRO shard of one is a whole
    // fraction of that (parallel/data_parallel.h), so the gcd covers every element.
    const int64_t n = group.grads.numel();
    if (n == 0) continue;
    const int64_t kRow = std::gcd(n, nn::FlatParameters::kAlignElements);
    const int64_t rows = n / kRow;
    TESSEL_ASSIGN_OR_RETURN(Tensor partial, Tensor::empty({rows}, DType::kF32, params.device()));
    TESSEL_TRY(ops::launch_kernel("sum_squares_rows", {},
                                  {ops::View{group.grads, {rows, kRow}, {kRow, 1}}, partial}));
    TESSEL_ASSIGN_OR_RETURN(Tensor sum, Tensor::empty({1}, DType::kF32, params.device()));
    TESSEL_TRY(ops::launch_kernel("reduce_rows", {{"OP", "0"}},
                                  {ops::View{partial, {1, rows}, {rows, 1}}, sum}));
    TESSEL_ASSIGN_OR_RETURN(std::vector<float> host, sum.to_vector<float>());
    total += static_cast<double>(host[0]);
  }
  return std::sqrt(total);
}

Expected<double> clip_grad_norm(const nn::FlatParameters& params, double max_norm) {
  if (!(max_norm > 0))
    return invalid_argument("clip_grad_norm: max_norm must be > 0, got {}", max_norm);
  TESSEL_ASSIGN_OR_RETURN(double norm, global_grad_norm(params));
  const double coefficient = max_norm / (norm + 1e-6);
  if (coefficient < 1.0) TESSEL_TRY(scale_grads(params, coefficient));
  return norm;
}

Status scale_grads(const nn::FlatParameters& params, double factor) {
  for (const auto& group : params.groups()) {
    const int64_t n = group.grads.numel();
    if (n == 0) continue;
    // unary with OP 0 is y = scale * x; in place is safe (each element reads only itself).
    TESSEL_TRY(ops::launch_kernel("unary", {{"OP", "0"}},
                                  {ops::View{group.grads, {1, 1, n}, {n, n, 1}},
                                   ops::View{group.grads, {1, 1, n}, {n, n, 1}}, factor}));
  }
  return ok_status();
}

}  // namespace tessel::optim
