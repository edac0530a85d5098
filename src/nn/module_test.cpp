// Module tree names (against the names PyTorch gives the same structures, written out here),
// the flat layout (parameters and gradients alias the flat buffers), and gradients landing there.
#include "nn/module.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "autograd/functional.h"
#include "nn/layers.h"
#include "ops/ops.h"

namespace tessel::nn {
namespace {

// A GPT-2-like skeleton: the names below are what
//   class Block(nn.Module): ln_1 = LayerNorm(8); attn = Linear(8, 24); mlp = Sequential(
//       Linear(8, 32), GELU(), Linear(32, 8))
//   class Net(nn.Module): wte = Embedding(10, 8); blocks = ModuleList([Block(), Block()]);
//       ln_f = LayerNorm(8); head = Linear(8, 10, bias=False)
// prints for [n for n, _ in Net().named_parameters()].
class Block : public Module {
 public:
  Block() {
    register_module("ln_1", std::make_unique<LayerNorm>(8));
    register_module("attn", std::make_unique<Linear>(8, 24));
    auto mlp = std::make_unique<Sequential>();
    mlp->append(std::make_unique<Linear>(8, 32));
    mlp->append(std::make_unique<GELU>());
    mlp->append(std::make_unique<Linear>(32, 8));
    register_module("mlp", std::move(mlp));
  }
  std::string type_name() const override { return "Block"; }
};

class Net : public Module {
 public:
  Net() {
    register_module("wte", std::make_unique<Embedding>(10, 8));
    auto blocks = std::make_unique<ModuleList>();
    blocks->append(std::make_unique<Block>());
    blocks->append(std::make_unique<Block>());
    register_module("blocks", std::move(blocks));
    register_module("ln_f", std::make_unique<LayerNorm>(8));
    register_module("head", std::make_unique<Linear>(8, 10, /*bias=*/false));
  }
  std::string type_name() const override { return "Net"; }
};

std::vector<std::string> names_of(Module& m) {
  std::vector<std::string> names;
  for (auto& [name, p] : m.named_parameters())
    names.push_back(name);
  return names;
}

TEST(Module, NamesAreThoseOfPyTorch) {
  Net net;
  std::vector<std::string> expected = {"wte.weight"};
  for (std::string b : {"blocks.0.", "blocks.1."})
    for (std::string p : {"ln_1.weight", "ln_1.bias", "attn.weight", "attn.bias", "mlp.0.weight",
                          "mlp.0.bias", "mlp.2.weight", "mlp.2.bias"})
      expected.push_back(b + p);
  expected.insert(expected.end(), {"ln_f.weight", "ln_f.bias", "head.weight"});
  EXPECT_EQ(names_of(net), expected);
}

TEST(Module, MlpNamesShapesAndCountMatchPyTorch) {
  // nn.Sequential(Linear(784, 512), ReLU(), Linear(512, 256), ReLU(), Linear(256, 10))
  MLP mlp({784, 512, 256, 10});
  std::vector<std::pair<std::string, Shape>> expected = {
      {"0.weight", {512, 784}}, {"0.bias", {512}},       {"2.weight", {256, 512}},
      {"2.bias", {256}},        {"4.weight", {10, 256}}, {"4.bias", {10}}};
  auto named = mlp.named_parameters();
  ASSERT_EQ(named.size(), expected.size());
  for (size_t i = 0; i < named.size(); ++i) {
    EXPECT_EQ(named[i].first, expected[i].first);
    EXPECT_EQ(named[i].second->shape, expected[i].second);
  }
  EXPECT_EQ(mlp.num_parameters(), 784 * 512 + 512 + 512 * 256 + 256 + 256 * 10 + 10);
}

TEST(FlatParameters, LayoutIsOrderedAlignedAndPadded) {
  Net net;
  Pcg32 rng(1);
  FlatParameters flat = FlatParameters::create(net, cpu_device(), rng).value();
  ASSERT_EQ(flat.groups().size(), 1u);
  const int64_t a = FlatParameters::kAlignElements;
  int64_t expected_offset = 0;
  for (const auto& e : flat.entries()) {
    EXPECT_EQ(e.offset, expected_offset) << e.name;
    expected_offset += (e.numel + a - 1) / a * a;
  }
  EXPECT_EQ(flat.groups()[0].values.numel(), expected_offset);
  EXPECT_EQ(flat.groups()[0].grads.numel(), expected_offset);
  // The gaps between parameters are zero.
  const float* values = flat.groups()[0].values.data<float>();
  for (const auto& e : flat.entries())
    for (int64_t i = e.offset + e.numel; i < (e.offset + e.numel + a - 1) / a * a; ++i)
      ASSERT_EQ(values[i], 0.0f) << "after " << e.name;
}

TEST(FlatParameters, ParametersAndGradientsAliasTheFlatBuffers) {
  Net net;
  Pcg32 rng(2);
  FlatParameters flat = FlatParameters::create(net, cpu_device(), rng).value();
  float* values = flat.groups()[0].values.data<float>();
  float* grads = flat.groups()[0].grads.data<float>();
  for (const auto& e : flat.entries()) {
    values[e.offset + e.numel - 1] = 42.0f;
    grads[e.offset] = -7.0f;
    std::vector<float> v = e.parameter->variable.data().to_vector<float>().value();
    EXPECT_EQ(v.back(), 42.0f) << e.name;
    std::vector<float> g = e.parameter->variable.grad().to_vector<float>().value();
    EXPECT_EQ(g.front(), -7.0f) << e.name;
  }
  ASSERT_TRUE(flat.zero_grad().ok());
  for (int64_t i = 0; i < flat.groups()[0].grads.numel(); ++i)
    ASSERT_EQ(grads[i], 0.0f);
}

TEST(FlatParameters, BackwardAccumulatesIntoTheFlatGradients) {
  // loss = sum(x @ W^T + b): dL/db = batch size, dL/dW[o][i] = sum over the batch of x[b][i].
  Linear lin(3, 2);
  Pcg32 rng(3);
  FlatParameters flat = FlatParameters::create(lin, cpu_device(), rng).value();
  std::vector<float> x = {1, 2, 3, -1, 0.5f, 4};  // [2, 3]
  Variable input(Tensor::from_vector<float>(x, {2, 3}).value());
  for (int round = 1; round <= 2; ++round) {
    Variable y = lin.forward(input).value();
    ASSERT_TRUE(autograd::sum(y).value().backward().ok());
    const float* grads = flat.groups()[0].grads.data<float>();
    const auto& w = flat.entries()[0];
    const auto& b = flat.entries()[1];
    for (int o = 0; o < 2; ++o)
      for (int i = 0; i < 3; ++i)
        EXPECT_FLOAT_EQ(grads[w.offset + o * 3 + i], round * (x[i] + x[3 + i]));
    for (int o = 0; o < 2; ++o)
      EXPECT_FLOAT_EQ(grads[b.offset + o], round * 2.0f);
    EXPECT_EQ(lin.weight().variable.grad().storage(), flat.groups()[0].grads.storage());
  }
  ASSERT_TRUE(flat.zero_grad().ok());
  EXPECT_EQ(lin.weight().variable.grad().to_vector<float>().value(), std::vector<float>(6, 0.0f));
}

TEST(Linear, WithoutBiasIsXTimesWeightTransposed) {
  Linear lin(3, 2, /*bias=*/false);
  Pcg32 rng(4);
  FlatParameters flat = FlatParameters::create(lin, cpu_device(), rng).value();
  ASSERT_EQ(flat.entries().size(), 1u);
  std::vector<float> w = {1, -2, 0.5f, 3, 0, -1};  // [2, 3]
  std::copy(w.begin(), w.end(), flat.groups()[0].values.data<float>());
  std::vector<float> x = {1, 2, 3, -1, 0.5f, 4};  // [2, 3]
  Variable y = lin.forward(Variable(Tensor::from_vector<float>(x, {2, 3}).value())).value();
  std::vector<float> expected;
  for (int b = 0; b < 2; ++b)
    for (int o = 0; o < 2; ++o)
      expected.push_back(x[b * 3] * w[o * 3] + x[b * 3 + 1] * w[o * 3 + 1] +
                         x[b * 3 + 2] * w[o * 3 + 2]);
  std::vector<float> got = y.data().to_vector<float>().value();
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], expected[i], 1e-5) << i;
}

TEST(FlatParameters, ForwardBeforeCreateIsAnError) {
  Linear lin(3, 2);
  Variable input(Tensor::zeros({1, 3}, DType::kF32).value());
  Expected<Variable> y = lin.forward(input);
  ASSERT_FALSE(y.ok());
  EXPECT_NE(y.status().message().find("FlatParameters::create"), std::string::npos)
      << y.status().message();
}

TEST(Module, ZeroGradOfAParameterClearsTheFlatGradientTheOptimizerReads) {
  // PyTorch's habit of clearing each parameter's gradient between steps: the optimizer reads the
  // flat buffer, so that is where the second step's gradient must be, alone.
  Linear lin(3, 2);
  Pcg32 rng(3);
  FlatParameters flat = FlatParameters::create(lin, cpu_device(), rng).value();
  std::vector<float> first = {1, 2, 3}, second = {-1, 0.5f, 4};
  Variable x1(Tensor::from_vector<float>(first, {1, 3}).value());
  Variable x2(Tensor::from_vector<float>(second, {1, 3}).value());
  ASSERT_TRUE(autograd::sum(lin(x1).value()).value().backward().ok());
  for (auto& [name, p] : lin.named_parameters())
    ASSERT_TRUE(p->variable.zero_grad().ok());
  ASSERT_TRUE(autograd::sum(lin(x2).value()).value().backward().ok());
  // loss = sum(x W^T + b): dL/dW[o][i] = x[i], dL/db[o] = 1.
  std::vector<float> grads = flat.groups()[0].grads.to_vector<float>().value();
  const auto& w = flat.entries()[0];
  const auto& b = flat.entries()[1];
  for (int o = 0; o < 2; ++o) {
    for (int i = 0; i < 3; ++i)
      EXPECT_EQ(grads[w.offset + o * 3 + i], second[i]) << o << i;
    EXPECT_EQ(grads[b.offset + o], 1.0f) << o;
  }
  ASSERT_TRUE(lin.zero_grad().ok());
  EXPECT_EQ(flat.groups()[0].grads.to_vector<float>().value(),
            std::vector<float>(grads.size(), 0.0f));
}

// encoder.layer1 maps 3 -> 4 features, encoder.layer2 expects 5: its fc1 is where it fails.
class Layer : public Module {
 public:
  Layer(int64_t in, int64_t out)
      : fc1_(register_module("fc1", std::make_unique<Linear>(in, out))) {}
  Expected<Variable> forward(const Variable& x) override { return fc1_(x); }
  std::string type_name() const override { return "Layer"; }

 private:
  Linear& fc1_;
};

class Encoder : public Module {
 public:
  Encoder()
      : layer1_(register_module("layer1", std::make_unique<Layer>(3, 4))),
        layer2_(register_module("layer2", std::make_unique<Layer>(5, 2))) {}
  Expected<Variable> forward(const Variable& x) override { return layer2_(layer1_(x)); }
  std::string type_name() const override { return "Encoder"; }

 private:
  Layer& layer1_;
  Layer& layer2_;
};

class Model : public Module {
 public:
  Model() : encoder_(register_module("encoder", std::make_unique<Encoder>())) {}
  Expected<Variable> forward(const Variable& x) override { return encoder_(x); }
  std::string type_name() const override { return "Model"; }

 private:
  Encoder& encoder_;
};

TEST(Module, AnErrorNamesTheModulePathWhereItArose) {
  Model model;
  Pcg32 rng(1);
  FlatParameters flat = FlatParameters::create(model, cpu_device(), rng).value();
  EXPECT_EQ(model.named_modules()[3].first, "encoder.layer1.fc1");
  EXPECT_EQ(model.named_modules()[3].second->path(), "encoder.layer1.fc1");
  Expected<Variable> y = model(Variable(Tensor::zeros({2, 3}, DType::kF32).value()));
  ASSERT_FALSE(y.ok());
  const std::string& message = y.status().message();
  EXPECT_EQ(message.rfind("encoder.layer2.fc1 (Linear): ", 0), 0u) << message;
  EXPECT_EQ(message.find("encoder.layer2 ("), std::string::npos) << message;  // named once
  // The next call names its own failure afresh.
  Expected<Variable> again = model(Variable(Tensor::zeros({2, 7}, DType::kF32).value()));
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.status().message().rfind("encoder.layer1.fc1 (Linear): ", 0), 0u)
      << again.status().message();
}

// The tensors of a state dict as host vectors, by name.
std::map<std::string, std::vector<float>> host_values(const StateDict& state) {
  std::map<std::string, std::vector<float>> out;
  for (const auto& [name, t] : state)
    out[name] = t.to_vector<float>().value();
  return out;
}

TEST(Module, StateDictHasPyTorchsKeysAndLoadsIntoAnotherInstance) {
  Net a, b;
  Pcg32 rng_a(1), rng_b(2);
  FlatParameters flat_a = FlatParameters::create(a, cpu_device(), rng_a).value();
  FlatParameters flat_b = FlatParameters::create(b, cpu_device(), rng_b).value();
  StateDict state = a.state_dict();
  std::vector<std::string> keys;
  for (const auto& [name, t] : state)
    keys.push_back(name);
  std::vector<std::string> expected = names_of(a);
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(keys, expected);
  EXPECT_NE(host_values(b.state_dict()), host_values(state));
  Expected<IncompatibleKeys> loaded = b.load_state_dict(state);
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  EXPECT_TRUE(loaded->missing_keys.empty());
  EXPECT_TRUE(loaded->unexpected_keys.empty());
  EXPECT_EQ(host_values(b.state_dict()), host_values(state));
  // Copies, not shared memory.
  EXPECT_NE(b.state_dict()["head.weight"].storage(), state["head.weight"].storage());
}

TEST(Module, LoadStateDictIsStrictAboutKeysAndAlwaysAboutShapes) {
  Linear target(3, 2);
  Pcg32 rng(1);
  FlatParameters flat = FlatParameters::create(target, cpu_device(), rng).value();
  const std::vector<float> before = target.weight().variable.data().to_vector<float>().value();
  StateDict state;
  state["weight"] = Tensor::full({2, 3}, 0.25, DType::kF32).value();
  state["extra"] = Tensor::zeros({1}, DType::kF32).value();
  Expected<IncompatibleKeys> strict = target.load_state_dict(state);
  ASSERT_FALSE(strict.ok());
  EXPECT_EQ(strict.status().message(),
            "Error(s) in loading state_dict for Linear:\n\tMissing key(s) in state_dict: "
            "\"bias\".\n\tUnexpected key(s) in state_dict: \"extra\".");
  EXPECT_EQ(target.weight().variable.data().to_vector<float>().value(), before);

  Expected<IncompatibleKeys> lenient = target.load_state_dict(state, /*strict=*/false);
  ASSERT_TRUE(lenient.ok()) << lenient.status().to_string();
  EXPECT_EQ(lenient->missing_keys, std::vector<std::string>{"bias"});
  EXPECT_EQ(lenient->unexpected_keys, std::vector<std::string>{"extra"});
  EXPECT_EQ(target.weight().variable.data().to_vector<float>().value(),
            std::vector<float>(6, 0.25f));

  state["weight"] = Tensor::zeros({2, 4}, DType::kF32).value();
  Expected<IncompatibleKeys> misshapen = target.load_state_dict(state, /*strict=*/false);
  ASSERT_FALSE(misshapen.ok());
  EXPECT_NE(misshapen.status().message().find(
                "size mismatch for weight: copying a tensor of shape [2, 4] from the state dict, "
                "the shape in the module is [2, 3]"),
            std::string::npos)
      << misshapen.status().message();

  // Another float dtype is converted, as torch's copy_ does.
  state.erase("extra");
  state["weight"] = ops::cast(Tensor::full({2, 3}, 1.5, DType::kF32).value(), DType::kBF16).value();
  state["bias"] = Tensor::full({2}, -2.0, DType::kF32).value();
  ASSERT_TRUE(target.load_state_dict(state).ok());
  EXPECT_EQ(target.weight().variable.data().to_vector<float>().value(),
            std::vector<float>(6, 1.5f));
}

TEST(Module, ToMovesParametersAndBuffersToAnotherDevice) {
  Device* other = nullptr;
  for (Device* d : available_devices())
    if (d->kind() == DeviceKind::kOpenCL) other = d;
  if (!other) GTEST_SKIP() << "no OpenCL device here to move to";
  Linear lin(3, 2);
  Pcg32 rng(5);
  FlatParameters flat = FlatParameters::create(lin, cpu_device(), rng).value();
  Tensor x = Tensor::from_vector<float>({1, 2, 3, -1, 0.5f, 4}, {2, 3}).value();
  std::vector<float> on_cpu = lin(Variable(x)).value().data().to_vector<float>().value();
  ASSERT_TRUE(lin.to(other).ok());
  EXPECT_EQ(flat.device(), other);  // the caller's handle sees the move
  EXPECT_EQ(lin.weight().variable.data().device(), other);
  EXPECT_EQ(lin.weight().variable.grad().device(), other);
  std::vector<float> moved =
      lin(Variable(x.to(other).value())).value().data().to_vector<float>().value();
  ASSERT_EQ(moved.size(), on_cpu.size());
  for (size_t i = 0; i < moved.size(); ++i)
    EXPECT_NEAR(moved[i], on_cpu[i], 1e-5) << i;
  ASSERT_TRUE(lin.to(cpu_device()).ok());
  EXPECT_EQ(lin(Variable(x)).value().data().to_vector<float>().value(), on_cpu);
}

}  // namespace
}  // namespace tessel::nn
