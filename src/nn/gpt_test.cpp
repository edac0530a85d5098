// nn::GPT: nanoGPT's parameter names and order, parameter counts of the shared/WORKLOADS.md
// configurations against the closed form, shapes, argument errors, and the loss at initialisation
// (weights N(0, 0.02) give nearly uniform logits, so the loss is close to ln V).
#include "nn/gpt.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>

namespace tessel::nn {
namespace {

// Counted by hand from the architecture: wte V C, wpe T C, per block ln_1 2C, c_attn 3C^2 + 3C,
// attn.c_proj C^2 + C, ln_2 2C, c_fc 4C^2 + 4C, mlp.c_proj 4C^2 + C (= 12 C^2 + 13 C), ln_f 2C;
// the head is wte.
int64_t closed_form_parameters(int64_t v, int64_t t, int64_t l, int64_t c) {
  return v * c + t * c + l * (12 * c * c + 13 * c) + 2 * c;
}

TEST(Gpt, ParameterNamesAreNanoGpts) {
  GPT model({.vocab_size = 11, .block_size = 8, .n_layer = 2, .n_head = 2, .n_embd = 4});
  std::vector<std::string> want = {"transformer.wte.weight", "transformer.wpe.weight"};
  for (int i = 0; i < 2; ++i) {
    const std::string p = "transformer.h." + std::to_string(i) + ".";
    for (const char* m : {"ln_1", "attn.c_attn", "attn.c_proj", "ln_2", "mlp.c_fc", "mlp.c_proj"}) {
      want.push_back(p + m + ".weight");
      want.push_back(p + m + ".bias");
    }
  }
  want.push_back("transformer.ln_f.weight");
  want.push_back("transformer.ln_f.bias");
  std::vector<std::string> got;
  for (auto& [name, p] : model.named_parameters())
    got.push_back(name);
  EXPECT_EQ(got, want);
  // Linear weights are [out, in], as torch.nn.Linear.
  std::map<std::string, Shape> shapes;
  for (auto& [name, p] : model.named_parameters())
    shapes[name] = p->shape;
  EXPECT_EQ(shapes["transformer.h.0.attn.c_attn.weight"], (Shape{12, 4}));
  EXPECT_EQ(shapes["transformer.h.1.mlp.c_proj.weight"], (Shape{4, 16}));
  EXPECT_EQ(shapes["transformer.wpe.weight"], (Shape{8, 4}));
}

TEST(Gpt, WorkloadConfigurationsHaveTheClosedFormParameterCount) {
  GptConfig tiny = gpt_tiny();
  EXPECT_EQ(tiny.vocab_size, 65);
  EXPECT_EQ(tiny.block_size, 64);
  EXPECT_EQ(tiny.n_layer, 4);
  EXPECT_EQ(tiny.n_head, 4);
  EXPECT_EQ(tiny.n_embd, 128);
  GptConfig mini = gpt_mini();
  EXPECT_EQ(mini.block_size, 256);
  EXPECT_EQ(mini.n_layer, 6);
  EXPECT_EQ(mini.n_head, 6);
  EXPECT_EQ(mini.n_embd, 384);
  EXPECT_EQ(GPT(tiny).num_parameters(), closed_form_parameters(65, 64, 4, 128));
  EXPECT_EQ(GPT(tiny).num_parameters(), 809'856);
  EXPECT_EQ(GPT(mini).num_parameters(), closed_form_parameters(65, 256, 6, 384));
  EXPECT_EQ(GPT(mini).num_parameters(), 10'770'816);
}

TEST(Gpt, ForwardGivesLogitsAndTheLossStartsNearLnV) {
  GptConfig config{.vocab_size = 13, .block_size = 8, .n_layer = 2, .n_head = 2, .n_embd = 16};
  GPT model(config);
  Pcg32 rng(3);
  FlatParameters params = FlatParameters::create(model, cpu_device(), rng).value();
  std::vector<int64_t> ids(2 * 7), targets(2 * 7);
  for (size_t i = 0; i < ids.size(); ++i) {
    ids[i] = static_cast<int64_t>((i * 5) % 13);
    targets[i] = static_cast<int64_t>((i * 7 + 1) % 13);
  }
  Variable x(Tensor::from_vector<int64_t>(ids, {2, 7}).value());
  Variable y(Tensor::from_vector<int64_t>(targets, {2, 7}).value());
  Variable logits = model.forward(x).value();
  EXPECT_EQ(logits.shape(), (Shape{2, 7, 13}));
  Variable loss = model.loss(logits, y).value();
  EXPECT_NEAR(loss.data().to_vector<float>().value()[0], std::log(13.0), 0.1);
  ASSERT_TRUE(loss.backward().ok());
  // The tied head: wte's gradient has contributions from the embedding and from the head.
  for (auto& [name, p] : model.named_parameters()) {
    std::vector<float> grad = p->grad.to_vector<float>().value();
    double sq = 0;
    for (float g : grad)
      sq += g * g;
    EXPECT_GT(sq, 0.0) << name;
  }
}

TEST(Gpt, RejectsSequencesLongerThanTheBlockAndNonI64Ids) {
  GPT model({.vocab_size = 5, .block_size = 4, .n_layer = 1, .n_head = 1, .n_embd = 4});
  Pcg32 rng(1);
  FlatParameters params = FlatParameters::create(model, cpu_device(), rng).value();
  Variable too_long(Tensor::zeros({1, 5}, DType::kI64).value());
  Expected<Variable> r = model.forward(too_long);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("block_size"), std::string::npos) << r.status().message();
  Variable floats(Tensor::zeros({1, 3}, DType::kF32).value());
  EXPECT_FALSE(model.forward(floats).ok());
}

// The last position's logits of `tokens` (cropped to the block), computed here with forward().
std::vector<float> last_logits(GPT& model, const std::vector<int64_t>& tokens) {
  const int64_t t = std::min<int64_t>(tokens.size(), model.config().block_size);
  std::vector<int64_t> window(tokens.end() - t, tokens.end());
  Variable x(Tensor::from_vector<int64_t>(window, {1, t}).value());
  std::vector<float> all = model.forward(x).value().data().to_vector<float>().value();
  return std::vector<float>(all.end() - model.config().vocab_size, all.end());
}

TEST(Gpt, GenerateDrawsFromTheTopKOfTheLastLogits) {
  GptConfig config{.vocab_size = 11, .block_size = 6, .n_layer = 1, .n_head = 2, .n_embd = 8};
  GPT model(config);
  Pcg32 init(5);
  FlatParameters params = FlatParameters::create(model, cpu_device(), init).value();
  model.eval();
  // top_k = 1 is greedy: each new token is the argmax of the logits that precede it, also once
  // the sequence is longer than the block (the context is its last block_size tokens).
  Pcg32 rng(1);
  std::vector<int64_t> out = model.generate({3, 1}, {.max_new_tokens = 9, .top_k = 1}, rng).value();
  ASSERT_EQ(out.size(), 11u);
  EXPECT_EQ(out[0], 3);
  EXPECT_EQ(out[1], 1);
  for (size_t n = 2; n < out.size(); ++n) {
    std::vector<float> logits = last_logits(model, {out.begin(), out.begin() + n});
    EXPECT_EQ(out[n], std::max_element(logits.begin(), logits.end()) - logits.begin()) << n;
  }
  // top_k = 3 at a high temperature: every token among the three likeliest, and not always the
  // first; the same seed draws the same tokens.
  Pcg32 a(7), b(7);
  GenerateOptions three{.max_new_tokens = 30, .temperature = 5.0, .top_k = 3};
  std::vector<int64_t> drawn = model.generate({2}, three, a).value();
  EXPECT_EQ(drawn, model.generate({2}, three, b).value());
  int not_first = 0;
  for (size_t n = 1; n < drawn.size(); ++n) {
    std::vector<float> logits = last_logits(model, {drawn.begin(), drawn.begin() + n});
    std::vector<float> sorted = logits;
    std::sort(sorted.rbegin(), sorted.rend());
    EXPECT_GE(logits[drawn[n]], sorted[2]) << n;
    not_first += logits[drawn[n]] < sorted[0];
  }
  EXPECT_GT(not_first, 0);
  EXPECT_FALSE(model.generate({11}, three, a).ok());  // outside the vocabulary
  EXPECT_FALSE(model.generate({}, three, a).ok());
}

TEST(Gpt, WithoutBiasAndWithDropoutAsNanoGptConfiguresThem) {
  GptConfig config{.vocab_size = 13, .block_size = 8, .n_layer = 2, .n_head = 2, .n_embd = 16};
  GptConfig no_bias = config;
  no_bias.bias = false;
  // Biases: per block ln_1 C, c_attn 3C, attn.c_proj C, ln_2 C, c_fc 4C, mlp.c_proj C; ln_f C.
  EXPECT_EQ(GPT(no_bias).num_parameters(),
            closed_form_parameters(13, 8, 2, 16) - 2 * 11 * 16 - 16);
  for (auto& [name, p] : GPT(no_bias).named_parameters())
    EXPECT_EQ(name.find("bias"), std::string::npos) << name;

  GptConfig dropped = config;
  dropped.dropout = 0.5;
  GPT with(dropped), without(config);
  std::vector<std::string> dropouts;
  for (auto& [name, m] : with.named_modules())
    if (m->type_name() == "Dropout") dropouts.push_back(name);
  EXPECT_EQ(dropouts, (std::vector<std::string>{
                          "transformer.drop", "transformer.h.0.attn.attn_dropout",
                          "transformer.h.0.attn.resid_dropout", "transformer.h.0.mlp.dropout",
                          "transformer.h.1.attn.attn_dropout", "transformer.h.1.attn.resid_dropout",
                          "transformer.h.1.mlp.dropout"}));
  Pcg32 r1(9), r2(9);
  FlatParameters p1 = FlatParameters::create(with, cpu_device(), r1).value();
  FlatParameters p2 = FlatParameters::create(without, cpu_device(), r2).value();
  Variable x(Tensor::from_vector<int64_t>({1, 2, 3, 4, 5, 6}, {1, 6}).value());
  std::vector<float> plain = without.forward(x).value().data().to_vector<float>().value();
  std::vector<float> training = with.forward(x).value().data().to_vector<float>().value();
  EXPECT_NE(training, plain);  // dropout is active in training mode
  with.eval();
  EXPECT_EQ(with.forward(x).value().data().to_vector<float>().value(), plain);
}

}  // namespace
}  // namespace tessel::nn
