// GPT: the GPT-2 architecture as nanoGPT writes it, with its parameter names, so a nanoGPT (or
// tools/pytorch/make_fixtures.py) state dict loads unchanged.
//
//   GptConfig config = gpt_tiny();                 // shared/WORKLOADS.md
//   GPT model(config);
//   TESSEL_ASSIGN_OR_RETURN(FlatParameters params, FlatParameters::create(model, device, rng));
//   TESSEL_ASSIGN_OR_RETURN(Variable logits, model.forward(ids));        // ids: i64 [B, T]
//   TESSEL_ASSIGN_OR_RETURN(Variable loss, model.loss(logits, targets)); // mean cross-entropy
//
// Legend: B batch, T time (sequence length, <= block_size), C width (n_embd), H heads, D = C / H,
// L layers, V vocabulary.
//
//   ids [B, T] -> wte(ids) + wpe[0:T]                           [B, T, C]
//   L blocks (pre-LN): x = x + c_proj(attn(c_attn(ln_1(x))))    c_attn: C -> 3C (q, k, v fused)
//                      x = x + c_proj(gelu_tanh(c_fc(ln_2(x)))) c_fc: C -> 4C, c_proj: 4C -> C
//   ln_f, then logits = x wte^T                                 [B, T, V] (lm_head tied to wte)
//
// Parameters (named_parameters() order, nanoGPT's):
//   transformer.wte.weight [V, C], transformer.wpe.weight [T, C],
//   transformer.h.<i>.{ln_1, attn.c_attn, attn.c_proj, ln_2, mlp.c_fc, mlp.c_proj}.{weight, bias},
//   transformer.ln_f.{weight, bias}.
// Linear weights are [out, in] as in torch.nn.Linear (nanoGPT), not HF's Conv1D [in, out].
// lm_head.weight is wte's tensor, so it is not a parameter of its own (nanoGPT's
// named_parameters() does not list it either; its state_dict repeats it).
//
// Initialisation is nanoGPT's: Linear and Embedding weights N(0, 0.02), biases 0, LayerNorm 1/0,
// and every c_proj.weight N(0, 0.02 / sqrt(2 L)) (the residual projections).
// bias = false drops every Linear and LayerNorm bias (nanoGPT's `bias` option). dropout > 0 adds
// nanoGPT's Dropout modules (transformer.drop, attn.attn_dropout, attn.resid_dropout,
// mlp.dropout; no parameters), each with a generator of its own seeded from dropout_seed, active
// in training mode only; at 0 (the default) there are none.
//
// generate() writes text the way nanoGPT's does: the last block_size tokens in, the last
// position's logits / temperature, optionally only the top_k likeliest tokens, a draw.
#pragma once

#include <cstdint>
#include <vector>

#include "nn/conv_layers.h"
#include "nn/layers.h"

namespace tessel::nn {

struct GptConfig {
  int64_t vocab_size = 65;  // V
  int64_t block_size = 64;  // the longest T (rows of wpe)
  int64_t n_layer = 4;      // L
  int64_t n_head = 4;       // H
  int64_t n_embd = 128;     // C (a multiple of n_head)
  double dropout = 0.0;     // probability, in [0, 1)
  bool bias = true;         // biases in Linear and LayerNorm
  uint64_t dropout_seed = 0;
};

struct GenerateOptions {
  int64_t max_new_tokens = 100;
  double temperature = 1.0;  // > 0; logits are divided by it
  int64_t top_k = 0;         // draw among the k likeliest tokens; 0: among all
};

// The workloads of shared/WORKLOADS.md.
GptConfig gpt_tiny();  // V 65, T 64, L 4, H 4, C 128
GptConfig gpt_mini();  // V 65, T 256, L 6, H 6, C 384

class GptAttention : public Module {
 public:
  GptAttention(const GptConfig& config, int64_t layer = 0);
  // x [B, T, C] -> [B, T, C]
  Expected<Variable> forward(const Variable& x) override;
  std::string type_name() const override { return "CausalSelfAttention"; }

 private:
  Linear* c_attn_;
  Linear* c_proj_;
  Dropout* attn_dropout_ = nullptr;  // only when dropout > 0
  Dropout* resid_dropout_ = nullptr;
  int64_t n_head_;
  int64_t n_embd_;
  double dropout_;
};

class GptMlp : public Module {
 public:
  GptMlp(const GptConfig& config, int64_t layer = 0);
  Expected<Variable> forward(const Variable& x) override;
  std::string type_name() const override { return "MLP"; }

 private:
  Linear* c_fc_;
  Linear* c_proj_;
  Dropout* dropout_ = nullptr;
};

class GptBlock : public Module {
 public:
  GptBlock(const GptConfig& config, int64_t layer = 0);
  Expected<Variable> forward(const Variable& x) override;
  std::string type_name() const override { return "Block"; }

 private:
  LayerNorm* ln_1_;
  GptAttention* attn_;
  LayerNorm* ln_2_;
  GptMlp* mlp_;
};

class GPT : public Module {
 public:
  explicit GPT(const GptConfig& config);
  // ids: i64 [B, T] with T <= block_size and ids in [0, V) -> logits [B, T, V].
  Expected<Variable> forward(const Variable& ids) override;
  // Mean cross-entropy of logits [B, T, V] against i64 targets [B, T].
  Expected<Variable> loss(const Variable& logits, const Variable& targets) const;
  std::string type_name() const override { return "GPT"; }
  const GptConfig& config() const { return config_; }

  // `prompt` (at least one id in [0, V)) followed by max_new_tokens drawn one at a time from
  // the model (see the top of this file), on the device of the parameters, without recording
  // gradients; `rng` draws. Call eval() first to turn dropout off, as nanoGPT's sample.py does.
  Expected<std::vector<int64_t>> generate(std::vector<int64_t> prompt,
                                          const GenerateOptions& options, Pcg32& rng);

 private:
  // nanoGPT's `transformer` ModuleDict: wte, wpe, h, ln_f.
  class Transformer : public Module {
   public:
    explicit Transformer(const GptConfig& config);
    std::string type_name() const override { return "ModuleDict"; }
    Embedding* wte;
    Embedding* wpe;
    Dropout* drop = nullptr;
    ModuleList* h;
    LayerNorm* ln_f;
  };

  GptConfig config_;
  Transformer* transformer_;
};

}  // namespace tessel::nn
