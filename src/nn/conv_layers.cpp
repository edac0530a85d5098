// Convolutional layers (see conv_layers.h): forward on the autograd functional API.
#include "nn/conv_layers.h"

#include <cmath>

#include "nn/init.h"

namespace tessel::nn {
namespace {

Initializer uniform_bound(double bound) {
  return [bound](Tensor& t, Pcg32& rng) { return uniform(t, rng, -bound, bound); };
}

}  // namespace

Conv2d::Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel_size,
               const Conv2dOptions& options)
    : out_channels_(out_channels), options_(options) {
  const int64_t group_in = options.groups > 0 ? in_channels / options.groups : in_channels;
  weight_ = &register_parameter(
      "weight", {out_channels, group_in, kernel_size, kernel_size},
      [](Tensor& t, Pcg32& rng) { return kaiming_uniform(t, rng, {.a = std::sqrt(5.0)}); });
  // nn.Conv2d.reset_parameters: the bias bound is 1/sqrt(fan_in) of the weight.
  const int64_t fan_in = group_in * kernel_size * kernel_size;
  if (options.bias)
    bias_ = &register_parameter("bias", {out_channels},
                                uniform_bound(fan_in > 0 ? 1.0 / std::sqrt(double(fan_in)) : 0.0));
}

Expected<Variable> Conv2d::forward(const Variable& x) {
  TESSEL_ASSIGN_OR_RETURN(Variable w, value(*weight_));
  Variable b;
  if (bias_) {
    TESSEL_ASSIGN_OR_RETURN(b, value(*bias_));
  } else {
    // The op always adds a bias; a constant zero one gets no gradient. It goes on the input's
    // device: the weight may have no value until the op reads it (ZeRO-3 gathers it then).
    TESSEL_ASSIGN_OR_RETURN(Tensor zero,
                            Tensor::zeros({out_channels_}, DType::kF32, x.data().device()));
    b = Variable(zero);
  }
  const int64_t s = options_.stride, p = options_.padding, d = options_.dilation;
  return tapped(x, autograd::conv2d(x, w, b, {s, s}, {p, p}, {d, d}, options_.groups));
}

BatchNorm2d::BatchNorm2d(int64_t features, double eps, double momentum)
    : eps_(eps), momentum_(momentum) {
  weight_ = &register_parameter("weight", {features}, [](Tensor& t, Pcg32&) { return ones(t); });
  bias_ = &register_parameter("bias", {features}, [](Tensor& t, Pcg32&) { return zeros(t); });
  running_mean_ = &register_buffer("running_mean", {features}, DType::kF32, 0.0);
  running_var_ = &register_buffer("running_var", {features}, DType::kF32, 1.0);
  num_batches_tracked_ = &register_buffer("num_batches_tracked", {}, DType::kI64, 0.0);
}

Expected<Variable> BatchNorm2d::forward(const Variable& x) {
  TESSEL_ASSIGN_OR_RETURN(Variable w, value(*weight_));
  TESSEL_ASSIGN_OR_RETURN(Variable b, value(*bias_));
  if (x.data().rank() != 4)
    return invalid_argument("BatchNorm2d: expected input [N, C, H, W], got {}",
                            shape_string(x.shape()));
  if (sync_ && is_training()) return forward_synchronised(x, w, b);
  autograd::BatchNormState state{running_mean_->tensor, running_var_->tensor};
  TESSEL_ASSIGN_OR_RETURN(Variable y,
                          autograd::batch_norm(x, w, b, state, is_training(), momentum_, eps_));
  if (is_training()) {
    running_mean_->tensor = state.running_mean;
    running_var_->tensor = state.running_var;
    TESSEL_TRY(count_batch());
  }
  return y;
}

Status BatchNorm2d::count_batch() {
  // A scalar counter: read, add one, write back (one 8-byte copy per step on a device).
  TESSEL_ASSIGN_OR_RETURN(std::vector<int64_t> count,
                          num_batches_tracked_->tensor.to_vector<int64_t>());
  TESSEL_ASSIGN_OR_RETURN(num_batches_tracked_->tensor,
                          Tensor::full({}, double(count.at(0) + 1), DType::kI64,
                                       num_batches_tracked_->tensor.device()));
  return ok_status();
}

// SyncBatchNorm's training forward, composed of recorded ops so that autograd derives its
// backward: the reductions of the statistics' backward come out of BatchNormSync's all-reduce
// backward (PyTorch's SyncBatchNorm all-reduces sum(dy) and sum(dy * (x - mean)) by hand; the
// chain rule through the two all-reduces below is the same sums). Two passes, as the batch_norm
// op: the mean first, then the variance around it, so no E[x^2] - mean^2 cancellation.
Expected<Variable> BatchNorm2d::forward_synchronised(const Variable& x, const Variable& w,
                                                     const Variable& b) {
  using autograd::Variable;
  const Shape& s = x.shape();
  const int64_t c = s[1];
  const Shape per_channel = {1, c, 1, 1};
  // One all-reduce carries every channel's sum and the number of values per channel (rows x H x
  // W; uneven shares make it differ between ranks).
  TESSEL_ASSIGN_OR_RETURN(Variable local_sum, autograd::sum(x, {0, 2, 3}, /*keepdim=*/true));
  TESSEL_ASSIGN_OR_RETURN(Tensor local_count, Tensor::full({1, 1, 1, 1}, double(s[0] * s[2] * s[3]),
                                                           DType::kF32, x.data().device()));
  TESSEL_ASSIGN_OR_RETURN(Variable packed,
                          autograd::concat(local_sum, Variable(local_count), /*dim=*/1));
  TESSEL_ASSIGN_OR_RETURN(Variable totals, sync_->all_reduce_sum(packed));
  TESSEL_ASSIGN_OR_RETURN(std::vector<float> host_totals, totals.data().to_vector<float>());
  const double count = host_totals.at(size_t(c));
  if (count <= 1)
    return invalid_argument(
        "SyncBatchNorm: expected more than 1 value per channel when training, got {} over all "
        "ranks (input {})",
        count, shape_string(s));
  TESSEL_ASSIGN_OR_RETURN(Variable total_sum, autograd::slice(totals, 1, 0, c));
  TESSEL_ASSIGN_OR_RETURN(Variable mean, autograd::scale(total_sum, 1.0 / count));
  TESSEL_ASSIGN_OR_RETURN(Variable centred, autograd::sub(x, mean));
  TESSEL_ASSIGN_OR_RETURN(Variable squares, autograd::mul(centred, centred));
  TESSEL_ASSIGN_OR_RETURN(Variable local_squares, autograd::sum(squares, {0, 2, 3}, true));
  TESSEL_ASSIGN_OR_RETURN(Variable total_squares, sync_->all_reduce_sum(local_squares));
  TESSEL_ASSIGN_OR_RETURN(Variable var, autograd::scale(total_squares, 1.0 / count));
  TESSEL_ASSIGN_OR_RETURN(Variable var_eps, var + eps_);
  TESSEL_ASSIGN_OR_RETURN(Variable invstd, autograd::rsqrt(var_eps));
  TESSEL_ASSIGN_OR_RETURN(Variable w4, autograd::reshape(w, per_channel));
  TESSEL_ASSIGN_OR_RETURN(Variable b4, autograd::reshape(b, per_channel));
  TESSEL_ASSIGN_OR_RETURN(Variable y, centred * invstd * w4 + b4);

  // Running statistics as PyTorch's SyncBatchNorm moves them: towards the global mean and the
  // global unbiased variance (count / (count - 1) over every rank's values).
  autograd::NoGrad no_grad;
  const Shape flat = {c};
  TESSEL_ASSIGN_OR_RETURN(Variable mean_c, autograd::reshape(Variable(mean.data()), flat));
  TESSEL_ASSIGN_OR_RETURN(Variable var_c, autograd::reshape(Variable(var.data()), flat));
  TESSEL_ASSIGN_OR_RETURN(Variable new_mean,
                          Variable(running_mean_->tensor) * (1 - momentum_) + mean_c * momentum_);
  TESSEL_ASSIGN_OR_RETURN(Variable new_var, Variable(running_var_->tensor) * (1 - momentum_) +
                                                var_c * (momentum_ * count / (count - 1)));
  TESSEL_TRY(running_mean_->tensor.copy_from(new_mean.data()));
  TESSEL_TRY(running_var_->tensor.copy_from(new_var.data()));
  TESSEL_TRY(count_batch());
  return y;
}

int convert_sync_batchnorm(Module& model, std::shared_ptr<BatchNormSync> sync) {
  int converted = 0;
  for (auto& [name, module] : model.named_modules())
    if (auto* bn = dynamic_cast<BatchNorm2d*>(module)) {
      bn->set_sync(sync);
      ++converted;
    }
  return converted;
}

MaxPool2d::MaxPool2d(int64_t kernel_size, int64_t stride, int64_t padding)
    : kernel_(kernel_size), stride_(stride > 0 ? stride : kernel_size), padding_(padding) {}

Expected<Variable> MaxPool2d::forward(const Variable& x) {
  return autograd::max_pool2d(x, {kernel_, kernel_}, {stride_, stride_}, {padding_, padding_});
}

AvgPool2d::AvgPool2d(int64_t kernel_size, int64_t stride, int64_t padding)
    : kernel_(kernel_size), stride_(stride > 0 ? stride : kernel_size), padding_(padding) {}

Expected<Variable> AvgPool2d::forward(const Variable& x) {
  return autograd::avg_pool2d(x, {kernel_, kernel_}, {stride_, stride_}, {padding_, padding_});
}

Expected<Variable> Flatten::forward(const Variable& x) {
  if (x.shape().empty())
    return invalid_argument("Flatten: input must have a batch dimension, got a scalar");
  const int64_t n = x.shape()[0];
  return autograd::reshape(x, {n, n > 0 ? x.data().numel() / n : 0});
}

Dropout::Dropout(double p, uint64_t seed) : p_(p), rng_(seed) {}

Expected<Variable> Dropout::forward(const Variable& x) {
  if (!is_training() || p_ == 0.0) return x;
  // A non-negative 31-bit seed: the kernel takes it as a 32-bit scalar.
  const int64_t seed = static_cast<int64_t>(rng_.next_u32() >> 1);
  return autograd::dropout(x, p_, seed);
}

}  // namespace tessel::nn
