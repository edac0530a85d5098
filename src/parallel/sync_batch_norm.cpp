// SyncBatchNorm's cross-rank sum (sync_batch_norm.h).
#include "parallel/sync_batch_norm.h"

#include <chrono>
#include <vector>

#include "autograd/pace.h"

namespace tessel::parallel {

GroupBatchNormSync::GroupBatchNormSync(dist::ProcessGroup& group, const DataParallel* data_parallel)
    : group_(group), data_parallel_(data_parallel) {
  op_.name = "sync_batch_norm_all_reduce";
  op_.arity = 1;
  op_.infer = [](const std::vector<ops::TensorMeta>& in,
                 const ops::Attrs&) -> Expected<ops::TensorMeta> {
    if (in[0].dtype != DType::kF32)
      return invalid_argument("sync_batch_norm_all_reduce: needs f32 statistics, got {}",
                              ops::shapes_string(in));
    return in[0];
  };
  op_.forward = [this](const std::vector<Tensor>& in, const ops::Attrs&, const ops::TensorMeta&) {
    return sum_over_ranks(in[0], 1.0);
  };
  op_.backward = [this](const ops::BackwardArgs& a) -> Expected<std::vector<Tensor>> {
    const double weight = data_parallel_ ? data_parallel_->gradient_weight() : 1.0;
    if (!(weight > 0))
      return failed_precondition(
          "SyncBatchNorm: rank {} has a gradient weight of {} (no rows): every rank needs rows "
          "while batch norm is synchronised",
          group_.rank(), weight);
    TESSEL_ASSIGN_OR_RETURN(Tensor sum, sum_over_ranks(a.grad_output, weight));
    return std::vector<Tensor>{sum};
  };
  op_.save_inputs = {false};
  op_.differentiable = {true};
}

// sum_r weight_r * local_r / weight (this rank's), in f64, on local's device.
Expected<Tensor> GroupBatchNormSync::sum_over_ranks(const Tensor& local, double weight) {
  TESSEL_ASSIGN_OR_RETURN(std::vector<float> values, local.to_vector<float>());
  std::vector<double> sums(values.begin(), values.end());
  for (double& v : sums)
    v *= weight;
  // A wait for the other ranks, not compute: a paced (slowed) rank arrives when its work would.
  autograd::PaceExempt not_compute;
  const auto start = std::chrono::steady_clock::now();
  TESSEL_ASSIGN_OR_RETURN(
      dist::Work work,
      group_.all_reduce(sums.data(), sums.size(), dist::DataType::kFloat64, dist::RedOp::kSum));
  TESSEL_TRY(work.wait());
  waited_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (size_t i = 0; i < sums.size(); ++i)
    values[i] = float(sums[i] / weight);
  return Tensor::from_vector(values, local.shape(), local.device());
}

Expected<autograd::Variable> GroupBatchNormSync::all_reduce_sum(const autograd::Variable& local) {
  return autograd::apply(op_, {local});
}

double GroupBatchNormSync::take_waited_s() {
  const double waited = waited_s_;
  waited_s_ = 0;
  return waited;
}

Expected<std::shared_ptr<GroupBatchNormSync>> convert_sync_batchnorm(
    nn::Module& model, dist::ProcessGroup& group, const DataParallel* data_parallel) {
  if (group.size() < 1) return invalid_argument("convert_sync_batchnorm: an empty group");
  auto sync = std::make_shared<GroupBatchNormSync>(group, data_parallel);
  sync->set_layers(nn::convert_sync_batchnorm(model, sync));
  return sync;
}

}  // namespace tessel::parallel
