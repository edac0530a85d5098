// GPT (see gpt.h): nanoGPT's model on the autograd functional API.
#include "nn/gpt.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <memory>

#include "autograd/functional.h"
#include "nn/init.h"

namespace tessel::nn {
namespace {

Initializer normal_init(double std) {
  return [std](Tensor& t, Pcg32& rng) { return normal(t, rng, 0.0, std); };
}

Initializer zeros_init() {
  return [](Tensor& t, Pcg32&) { return zeros(t); };
}

// nanoGPT's _init_weights: N(0, 0.02) weights, zero biases.
std::unique_ptr<Linear> gpt_linear(const GptConfig& config, int64_t in, int64_t out,
                                   double std = 0.02) {
  auto linear = std::make_unique<Linear>(in, out, config.bias);
  linear->weight().init = normal_init(std);
  if (linear->bias()) linear->bias()->init = zeros_init();
  return linear;
}

// The k-th Dropout of the model gets a generator of its own.
std::unique_ptr<Dropout> gpt_dropout(const GptConfig& config, uint64_t k) {
  return std::make_unique<Dropout>(config.dropout, config.dropout_seed + k * 0x9e3779b97f4a7c15ULL);
}

// Dropout modules in nanoGPT's order: transformer.drop, then per block attn_dropout,
// resid_dropout, mlp.dropout.
uint64_t block_dropout_index(int64_t layer, uint64_t which) {
  return 1 + 3 * static_cast<uint64_t>(layer) + which;
}

// The residual projections get 0.02 / sqrt(2 L) (GPT-2 paper, nanoGPT).
double residual_std(const GptConfig& config) {
  return 0.02 / std::sqrt(2.0 * static_cast<double>(config.n_layer));
}

// qkv [B, T, 3C] -> [B, T, C] by the op causal_attention, recorded with the [B, H, T] buffer
// it writes the rows' log-sum-exp into (its backward reads it; no gradient).
Expected<Variable> fused_attention(const Variable& qkv, int64_t b, int64_t t, int64_t h) {
  TESSEL_ASSIGN_OR_RETURN(Tensor lse, Tensor::empty({b, h, t}, DType::kF32, qkv.data().device()));
  return autograd::apply("causal_attention", {qkv, Variable(lse)}, ops::Attrs().set("heads", h));
}

}  // namespace

GptConfig gpt_tiny() {
  return {.vocab_size = 65, .block_size = 64, .n_layer = 4, .n_head = 4, .n_embd = 128};
}

GptConfig gpt_mini() {
  return {.vocab_size = 65, .block_size = 256, .n_layer = 6, .n_head = 6, .n_embd = 384};
}

GptAttention::GptAttention(const GptConfig& config, int64_t layer)
    : n_head_(config.n_head), n_embd_(config.n_embd), dropout_(config.dropout) {
  c_attn_ = &register_module("c_attn", gpt_linear(config, config.n_embd, 3 * config.n_embd));
  c_proj_ = &register_module(
      "c_proj", gpt_linear(config, config.n_embd, config.n_embd, residual_std(config)));
  if (config.dropout > 0) {
    attn_dropout_ =
        &register_module("attn_dropout", gpt_dropout(config, block_dropout_index(layer, 0)));
    resid_dropout_ =
        &register_module("resid_dropout", gpt_dropout(config, block_dropout_index(layer, 1)));
  }
}

Expected<Variable> GptAttention::forward(const Variable& x) {
  const Shape& s = x.shape();
  if (s.size() != 3 || s[2] != n_embd_)
    return invalid_argument("CausalSelfAttention: needs x [B, T, {}], got {}", n_embd_,
                            shape_string(s));
  if (n_head_ <= 0 || n_embd_ % n_head_ != 0)
    return invalid_argument("CausalSelfAttention: n_embd {} is not a multiple of n_head {}",
                            n_embd_, n_head_);
  const int64_t b = s[0], t = s[1], c = n_embd_, h = n_head_, d = c / h;
  if (!attn_dropout_ || !is_training()) {
    // One projection to [B, T, 3C], then the fused kernels read q, k, v from it by strides and
    // write y as [B, T, H, D] = [B, T, C]: no permute copies, one gradient for the whole
    // projection (ops/flash_attention.h).
    TESSEL_ASSIGN_OR_RETURN(Variable qkv, (*c_attn_)(x));
    TESSEL_ASSIGN_OR_RETURN(Variable y, fused_attention(qkv, b, t, h));
    TESSEL_ASSIGN_OR_RETURN(Variable out, (*c_proj_)(y));
    if (resid_dropout_) return (*resid_dropout_)(out);
    return out;
  }
  // With attention dropout the weights are spelled out. q, k, v = x W_i^T + b_i with W_i, b_i the
  // i-th row blocks of c_attn's fused [3C, C] weight and [3C] bias (views): three products instead
  // of one, so that backward writes the gradients of the weight blocks ([C, C]) instead of three
  // zero-padded [B, T, 3C] gradients of output slices, each the size of the whole activation. Then
  // [B, T, C] -> [B, H, T, D].
  TESSEL_ASSIGN_OR_RETURN(Variable w, value(c_attn_->weight()));
  Variable bias;
  const bool has_bias = c_attn_->bias() != nullptr;
  if (has_bias) {
    TESSEL_ASSIGN_OR_RETURN(bias, value(*c_attn_->bias()));
  }
  Variable heads[3];
  for (int64_t i = 0; i < 3; ++i) {
    TESSEL_ASSIGN_OR_RETURN(Variable wi, autograd::slice(w, 0, i * c, (i + 1) * c));
    Variable part;
    if (has_bias) {
      TESSEL_ASSIGN_OR_RETURN(Variable bi, autograd::slice(bias, 0, i * c, (i + 1) * c));
      TESSEL_ASSIGN_OR_RETURN(part, autograd::linear(x, wi, bi));
    } else {
      TESSEL_ASSIGN_OR_RETURN(Variable wt, autograd::permute(wi, {1, 0}));
      TESSEL_ASSIGN_OR_RETURN(part, autograd::matmul(x, wt));
    }
    TESSEL_ASSIGN_OR_RETURN(Variable split, autograd::reshape(part, {b, t, h, d}));
    TESSEL_ASSIGN_OR_RETURN(heads[i], autograd::permute(split, {0, 2, 1, 3}));
  }
  TESSEL_ASSIGN_OR_RETURN(Variable kt, autograd::permute(heads[1], {0, 1, 3, 2}));
  TESSEL_ASSIGN_OR_RETURN(Variable scores, autograd::matmul(heads[0], kt));
  TESSEL_ASSIGN_OR_RETURN(scores, autograd::scale(scores, 1.0 / std::sqrt(double(d))));
  TESSEL_ASSIGN_OR_RETURN(scores, autograd::causal_mask(scores));
  TESSEL_ASSIGN_OR_RETURN(Variable weights, autograd::softmax(scores));
  TESSEL_ASSIGN_OR_RETURN(weights, (*attn_dropout_)(weights));
  TESSEL_ASSIGN_OR_RETURN(Variable y, autograd::matmul(weights, heads[2]));
  TESSEL_ASSIGN_OR_RETURN(Variable merged, autograd::permute(y, {0, 2, 1, 3}));  // [B, T, H, D]
  TESSEL_ASSIGN_OR_RETURN(Variable flat, autograd::reshape(merged, {b, t, c}));  // copies
  TESSEL_ASSIGN_OR_RETURN(Variable out, (*c_proj_)(flat));
  if (resid_dropout_) return (*resid_dropout_)(out);
  return out;
}

GptMlp::GptMlp(const GptConfig& config, int64_t layer) {
  c_fc_ = &register_module("c_fc", gpt_linear(config, config.n_embd, 4 * config.n_embd));
  c_proj_ = &register_module(
      "c_proj", gpt_linear(config, 4 * config.n_embd, config.n_embd, residual_std(config)));
  if (config.dropout > 0)
    dropout_ = &register_module("dropout", gpt_dropout(config, block_dropout_index(layer, 2)));
}

Expected<Variable> GptMlp::forward(const Variable& x) {
  TESSEL_ASSIGN_OR_RETURN(Variable h, (*c_fc_)(x));
  TESSEL_ASSIGN_OR_RETURN(h, autograd::gelu(h));  // tanh approximation, as GPT-2
  TESSEL_ASSIGN_OR_RETURN(h, (*c_proj_)(h));
  if (dropout_) return (*dropout_)(h);
  return h;
}

GptBlock::GptBlock(const GptConfig& config, int64_t layer) {
  ln_1_ = &register_module("ln_1", std::make_unique<LayerNorm>(config.n_embd, 1e-5, config.bias));
  attn_ = &register_module("attn", std::make_unique<GptAttention>(config, layer));
  ln_2_ = &register_module("ln_2", std::make_unique<LayerNorm>(config.n_embd, 1e-5, config.bias));
  mlp_ = &register_module("mlp", std::make_unique<GptMlp>(config, layer));
}

Expected<Variable> GptBlock::forward(const Variable& x) {
  TESSEL_ASSIGN_OR_RETURN(Variable h, (*ln_1_)(x));
  TESSEL_ASSIGN_OR_RETURN(h, (*attn_)(h));
  TESSEL_ASSIGN_OR_RETURN(Variable x1, autograd::add(x, h));
  TESSEL_ASSIGN_OR_RETURN(h, (*ln_2_)(x1));
  TESSEL_ASSIGN_OR_RETURN(h, (*mlp_)(h));
  return autograd::add(x1, h);
}

GPT::Transformer::Transformer(const GptConfig& config) {
  wte = &register_module("wte", std::make_unique<Embedding>(config.vocab_size, config.n_embd));
  wpe = &register_module("wpe", std::make_unique<Embedding>(config.block_size, config.n_embd));
  wte->weight().init = normal_init(0.02);
  wpe->weight().init = normal_init(0.02);
  if (config.dropout > 0) drop = &register_module("drop", gpt_dropout(config, 0));
  h = &register_module("h", std::make_unique<ModuleList>());
  for (int64_t i = 0; i < config.n_layer; ++i)
    h->append(std::make_unique<GptBlock>(config, i));
  ln_f = &register_module("ln_f", std::make_unique<LayerNorm>(config.n_embd, 1e-5, config.bias));
}

GPT::GPT(const GptConfig& config) : config_(config) {
  transformer_ = &register_module("transformer", std::make_unique<Transformer>(config));
}

Expected<Variable> GPT::forward(const Variable& ids) {
  const Shape& s = ids.shape();
  if (s.size() != 2 || ids.data().dtype() != DType::kI64)
    return invalid_argument("GPT: needs i64 ids [B, T], got {} {}", shape_string(s),
                            dtype_name(ids.data().dtype()));
  const int64_t t = s[1];
  if (t < 1 || t > config_.block_size)
    return invalid_argument("GPT: sequence length {} is outside 1..block_size ({})", t,
                            config_.block_size);
  TESSEL_ASSIGN_OR_RETURN(Variable tokens, (*transformer_->wte)(ids));  // [B, T, C]
  // Positions 0..T-1 are the first T rows of wpe: a slice, broadcast over the batch by add.
  TESSEL_ASSIGN_OR_RETURN(Variable wpe, value(transformer_->wpe->weight()));
  TESSEL_ASSIGN_OR_RETURN(Variable positions, autograd::slice(wpe, 0, 0, t));  // [T, C]
  TESSEL_ASSIGN_OR_RETURN(Variable x, autograd::add(tokens, positions));
  if (transformer_->drop) {
    TESSEL_ASSIGN_OR_RETURN(x, (*transformer_->drop)(x));
  }
  for (size_t i = 0; i < transformer_->h->size(); ++i) {
    TESSEL_ASSIGN_OR_RETURN(x, (*transformer_->h)[i](x));
  }
  TESSEL_ASSIGN_OR_RETURN(x, (*transformer_->ln_f)(x));
  // lm_head tied to wte: logits = x wte^T, wte^T a transposed view.
  TESSEL_ASSIGN_OR_RETURN(Variable wte, value(transformer_->wte->weight()));
  TESSEL_ASSIGN_OR_RETURN(Variable head, autograd::permute(wte, {1, 0}));  // [C, V]
  return autograd::matmul(x, head);
}

Expected<Variable> GPT::loss(const Variable& logits, const Variable& targets) const {
  const Shape& s = logits.shape();
  if (s.size() != 3 || targets.shape() != Shape{s[0], s[1]})
    return invalid_argument("GPT::loss: needs logits [B, T, V] and targets [B, T], got {}, {}",
                            shape_string(s), shape_string(targets.shape()));
  TESSEL_ASSIGN_OR_RETURN(Variable flat_logits, autograd::reshape(logits, {s[0] * s[1], s[2]}));
  TESSEL_ASSIGN_OR_RETURN(Variable flat_targets, autograd::reshape(targets, {s[0] * s[1]}));
  return autograd::cross_entropy(flat_logits, flat_targets);
}

Expected<std::vector<int64_t>> GPT::generate(std::vector<int64_t> tokens,
                                             const GenerateOptions& options, Pcg32& rng) {
  const int64_t v = config_.vocab_size;
  if (tokens.empty()) return invalid_argument("GPT::generate: the prompt has no tokens");
  for (size_t i = 0; i < tokens.size(); ++i)
    if (tokens[i] < 0 || tokens[i] >= v)
      return out_of_range("GPT::generate: prompt token {} at position {} is outside [0, {})",
                          tokens[i], i, v);
  if (!(options.temperature > 0.0))
    return invalid_argument("GPT::generate: temperature must be > 0, got {}", options.temperature);
  if (options.max_new_tokens < 0 || options.top_k < 0)
    return invalid_argument("GPT::generate: max_new_tokens {} and top_k {} must be >= 0",
                            options.max_new_tokens, options.top_k);
  Device* device = transformer_->wte->weight().variable.data().device();
  if (!device)
    return failed_precondition(
        "GPT::generate: the parameters have no memory yet "
        "(FlatParameters::create)");
  autograd::NoGrad no_grad;
  std::vector<double> weights(static_cast<size_t>(v));
  for (int64_t n = 0; n < options.max_new_tokens; ++n) {
    const int64_t t = std::min<int64_t>(static_cast<int64_t>(tokens.size()), config_.block_size);
    std::vector<int64_t> window(tokens.end() - t, tokens.end());
    TESSEL_ASSIGN_OR_RETURN(Tensor ids, Tensor::from_vector<int64_t>(window, {1, t}, device));
    TESSEL_ASSIGN_OR_RETURN(Variable logits, forward(Variable(ids)));
    TESSEL_ASSIGN_OR_RETURN(std::vector<float> all, logits.data().to_vector<float>());
    const float* last = all.data() + (t - 1) * v;  // the next token's logits
    // Only the top_k likeliest stay: those at least as large as the k-th largest logit.
    float threshold = -std::numeric_limits<float>::infinity();
    if (options.top_k > 0 && options.top_k < v) {
      std::vector<float> sorted(last, last + v);
      std::nth_element(sorted.begin(), sorted.begin() + (options.top_k - 1), sorted.end(),
                       std::greater<float>());
      threshold = sorted[static_cast<size_t>(options.top_k - 1)];
    }
    const double top = *std::max_element(last, last + v);
    double total = 0.0;
    for (int64_t i = 0; i < v; ++i) {
      weights[i] = last[i] >= threshold ? std::exp((last[i] - top) / options.temperature) : 0.0;
      total += weights[i];
    }
    // Inverse CDF of a uniform draw in [0, total).
    double u = total * (static_cast<double>(rng.next_u32()) / 4294967296.0);
    int64_t next = v - 1;
    for (int64_t i = 0; i < v; ++i) {
      if (weights[i] > 0.0 && u < weights[i]) {
        next = i;
        break;
      }
      u -= weights[i];
    }
    while (weights[next] == 0.0)
      --next;  // rounding left u past the last candidate
    tokens.push_back(next);
  }
  return tokens;
}

}  // namespace tessel::nn
