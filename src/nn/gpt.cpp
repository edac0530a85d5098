// GPT (see gpt.h): nanoGPT's model on the autograd functional API.
#include "nn/gpt.h"

#include <cmath>
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
std::unique_ptr<Linear> gpt_linear(int64_t in, int64_t out, double std = 0.02) {
  auto linear = std::make_unique<Linear>(in, out);
  linear->weight().init = normal_init(std);
  linear->bias()->init = zeros_init();
  return linear;
}

// The residual projections get 0.02 / sqrt(2 L) (GPT-2 paper, nanoGPT).
double residual_std(const GptConfig& config) {
  return 0.02 / std::sqrt(2.0 * static_cast<double>(config.n_layer));
}

}  // namespace

GptConfig gpt_tiny() {
  return {.vocab_size = 65, .block_size = 64, .n_layer = 4, .n_head = 4, .n_embd = 128};
}

GptConfig gpt_mini() {
  return {.vocab_size = 65, .block_size = 256, .n_layer = 6, .n_head = 6, .n_embd = 384};
}

GptAttention::GptAttention(const GptConfig& config)
    : n_head_(config.n_head), n_embd_(config.n_embd) {
  c_attn_ = &register_module("c_attn", gpt_linear(config.n_embd, 3 * config.n_embd));
  c_proj_ = &register_module("c_proj",
                             gpt_linear(config.n_embd, config.n_embd, residual_std(config)));
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
  TESSEL_ASSIGN_OR_RETURN(Variable qkv, c_attn_->forward(x));  // [B, T, 3C]
  // q, k, v: [B, T, C] column slices -> [B, T, H, D] -> [B, H, T, D], all views.
  Variable heads[3];
  for (int64_t i = 0; i < 3; ++i) {
    TESSEL_ASSIGN_OR_RETURN(Variable part, autograd::slice(qkv, 2, i * c, (i + 1) * c));
    TESSEL_ASSIGN_OR_RETURN(Variable split, autograd::reshape(part, {b, t, h, d}));
    TESSEL_ASSIGN_OR_RETURN(heads[i], autograd::permute(split, {0, 2, 1, 3}));
  }
  TESSEL_ASSIGN_OR_RETURN(Variable y, autograd::causal_self_attention(heads[0], heads[1], heads[2]));
  TESSEL_ASSIGN_OR_RETURN(Variable merged, autograd::permute(y, {0, 2, 1, 3}));  // [B, T, H, D]
  TESSEL_ASSIGN_OR_RETURN(Variable flat, autograd::reshape(merged, {b, t, c}));  // copies
  return c_proj_->forward(flat);
}

GptMlp::GptMlp(const GptConfig& config) {
  c_fc_ = &register_module("c_fc", gpt_linear(config.n_embd, 4 * config.n_embd));
  c_proj_ = &register_module("c_proj",
                             gpt_linear(4 * config.n_embd, config.n_embd, residual_std(config)));
}

Expected<Variable> GptMlp::forward(const Variable& x) {
  TESSEL_ASSIGN_OR_RETURN(Variable h, c_fc_->forward(x));
  TESSEL_ASSIGN_OR_RETURN(h, autograd::gelu(h));  // tanh approximation, as GPT-2
  return c_proj_->forward(h);
}

GptBlock::GptBlock(const GptConfig& config) {
  ln_1_ = &register_module("ln_1", std::make_unique<LayerNorm>(config.n_embd));
  attn_ = &register_module("attn", std::make_unique<GptAttention>(config));
  ln_2_ = &register_module("ln_2", std::make_unique<LayerNorm>(config.n_embd));
  mlp_ = &register_module("mlp", std::make_unique<GptMlp>(config));
}

Expected<Variable> GptBlock::forward(const Variable& x) {
  TESSEL_ASSIGN_OR_RETURN(Variable h, ln_1_->forward(x));
  TESSEL_ASSIGN_OR_RETURN(h, attn_->forward(h));
  TESSEL_ASSIGN_OR_RETURN(Variable x1, autograd::add(x, h));
  TESSEL_ASSIGN_OR_RETURN(h, ln_2_->forward(x1));
  TESSEL_ASSIGN_OR_RETURN(h, mlp_->forward(h));
  return autograd::add(x1, h);
}

GPT::Transformer::Transformer(const GptConfig& config) {
  wte = &register_module("wte", std::make_unique<Embedding>(config.vocab_size, config.n_embd));
  wpe = &register_module("wpe", std::make_unique<Embedding>(config.block_size, config.n_embd));
  wte->weight().init = normal_init(0.02);
  wpe->weight().init = normal_init(0.02);
  h = &register_module("h", std::make_unique<ModuleList>());
  for (int64_t i = 0; i < config.n_layer; ++i)
    h->append(std::make_unique<GptBlock>(config));
  ln_f = &register_module("ln_f", std::make_unique<LayerNorm>(config.n_embd));
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
  TESSEL_ASSIGN_OR_RETURN(Variable tokens, transformer_->wte->forward(ids));  // [B, T, C]
  // Positions 0..T-1 are the first T rows of wpe: a slice, broadcast over the batch by add.
  TESSEL_ASSIGN_OR_RETURN(Variable wpe, value(transformer_->wpe->weight()));
  TESSEL_ASSIGN_OR_RETURN(Variable positions, autograd::slice(wpe, 0, 0, t));  // [T, C]
  TESSEL_ASSIGN_OR_RETURN(Variable x, autograd::add(tokens, positions));
  for (size_t i = 0; i < transformer_->h->size(); ++i) {
    Expected<Variable> next = (*transformer_->h)[i].forward(x);
    if (!next.ok()) return next.status().with_context("GPT: transformer.h.{}", i);
    x = std::move(*next);
  }
  TESSEL_ASSIGN_OR_RETURN(x, transformer_->ln_f->forward(x));
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

}  // namespace tessel::nn
