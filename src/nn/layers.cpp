// Layers (see layers.h): forward on the autograd functional API, PyTorch's default initialisers.
#include "nn/layers.h"

#include <cmath>

#include "autograd/functional.h"
#include "nn/init.h"

namespace tessel::nn {
namespace {

// nn.Linear.reset_parameters: kaiming_uniform(a = sqrt(5)) on the weight is U(-1/sqrt(in),
// 1/sqrt(in)); the bias uses the same bound.
Initializer uniform_fan_in(int64_t fan_in) {
  double bound = fan_in > 0 ? 1.0 / std::sqrt(static_cast<double>(fan_in)) : 0.0;
  return [bound](Tensor& t, Pcg32& rng) { return uniform(t, rng, -bound, bound); };
}

}  // namespace

Linear::Linear(int64_t in_features, int64_t out_features, bool bias) : out_features_(out_features) {
  weight_ = &register_parameter("weight", {out_features, in_features}, [](Tensor& t, Pcg32& rng) {
    return kaiming_uniform(t, rng, {.a = std::sqrt(5.0)});
  });
  if (bias) bias_ = &register_parameter("bias", {out_features}, uniform_fan_in(in_features));
}

Expected<Variable> Linear::forward(const Variable& x) {
  TESSEL_ASSIGN_OR_RETURN(Variable w, value(*weight_));
  if (bias_) {
    TESSEL_ASSIGN_OR_RETURN(Variable b, value(*bias_));
    return tapped(x, autograd::linear(x, w, b));
  }
  // No bias: x @ w^T through matmul on a transposed view.
  TESSEL_ASSIGN_OR_RETURN(Variable wt, autograd::permute(w, {1, 0}));
  return tapped(x, autograd::matmul(x, wt));
}

Expected<Variable> ReLU::forward(const Variable& x) {
  return autograd::relu(x);
}

Expected<Variable> GELU::forward(const Variable& x) {
  return autograd::gelu(x);
}

LayerNorm::LayerNorm(int64_t features, double eps, bool bias) : eps_(eps) {
  weight_ = &register_parameter("weight", {features}, [](Tensor& t, Pcg32&) { return ones(t); });
  if (bias)
    bias_ = &register_parameter("bias", {features}, [](Tensor& t, Pcg32&) { return zeros(t); });
}

Expected<Variable> LayerNorm::forward(const Variable& x) {
  TESSEL_ASSIGN_OR_RETURN(Variable w, value(*weight_));
  if (bias_) {
    TESSEL_ASSIGN_OR_RETURN(Variable b, value(*bias_));
    return autograd::layer_norm(x, w, b, eps_);
  }
  if (!zero_bias_.defined() || zero_bias_.device() != w.data().device()) {
    TESSEL_ASSIGN_OR_RETURN(zero_bias_,
                            Tensor::zeros(weight_->shape, weight_->dtype, w.data().device()));
  }
  return autograd::layer_norm(x, w, Variable(zero_bias_), eps_);
}

Embedding::Embedding(int64_t num_embeddings, int64_t embedding_dim) {
  weight_ = &register_parameter("weight", {num_embeddings, embedding_dim},
                                [](Tensor& t, Pcg32& rng) { return normal(t, rng, 0.0, 1.0); });
}

Expected<Variable> Embedding::forward(const Variable& ids) {
  TESSEL_ASSIGN_OR_RETURN(Variable w, value(*weight_));
  return autograd::embedding(w, ids);
}

Expected<Variable> Sequential::forward(const Variable& x) {
  Variable h = x;
  for (size_t i = 0; i < modules_.size(); ++i) {
    TESSEL_ASSIGN_OR_RETURN(h, (*modules_[i])(h));
  }
  return h;
}

MLP::MLP(const std::vector<int64_t>& sizes) : in_features_(sizes.empty() ? 0 : sizes[0]) {
  for (size_t i = 0; i + 1 < sizes.size(); ++i) {
    if (i > 0) append(std::make_unique<ReLU>());
    append(std::make_unique<Linear>(sizes[i], sizes[i + 1]));
  }
}

Expected<Variable> MLP::forward(const Variable& x) {
  if (x.shape().empty())
    return invalid_argument("MLP: input must have a batch dimension, got a scalar");
  TESSEL_ASSIGN_OR_RETURN(Variable flat, autograd::reshape(x, {x.shape()[0], in_features_}));
  return Sequential::forward(flat);
}

}  // namespace tessel::nn
