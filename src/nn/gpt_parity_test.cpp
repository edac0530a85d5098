// Parity with PyTorch: tessel's GPT against src/nn/testdata/gpt_parity.safetensors, written by
// tools/pytorch/make_fixtures.py (nanoGPT's model in PyTorch, V=65 T=16 L=2 H=2 C=32, batch 4,
// random weights; see the script for what each tensor is). The test needs only the committed
// fixture, not PyTorch. On every device the op library runs on (cpu, opencl) it loads the
// weights into nn::GPT, then compares tensor by tensor: logits, loss, the gradient of every
// parameter, and the losses of 5 AdamW steps (lr 1e-3, PyTorch's defaults).
//
// The reference values were computed in float64, so a difference is tessel's float32 error
// alone. Tolerances (|got - want| <= abs + rel |want|), each well above float32 accumulation
// error for these sizes (reductions over at most 4C = 128 terms; PyTorch's own float32 run is
// within ~1e-6 of the reference, see the fixture's torch_f32_max_abs.* metadata) and well below
// what a wrong formula, a transposed weight or a mask off by one gives (>= 1e-2):
//   logits       abs 1e-4           values of order 1
//   loss         abs 1e-5           a mean of 64 terms of order 4
//   gradients    abs 1e-5 + rel 1e-3  values from ~1e-6 to ~1e-1; the absolute part covers
//                                     entries that are sums of many cancelling terms
//   AdamW losses abs 1e-4           Adam's first steps move each weight by ~lr whatever the
//                                     gradient's size, so a near-zero gradient whose sign float32
//                                     flips moves a weight by 2e-3; its effect on the loss is
//                                     second order
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "nn/gpt.h"
#include "nn/testing/parity_check.h"
#include "optim/optimizer.h"
#include "support/log.h"

namespace tessel::nn {
namespace {

using parity::compare;
using parity::fixture_path;
using parity::load_parameters;
using parity::scalar;
using parity::Worst;

std::vector<Device*> test_devices() { return parity::devices("gpt parity"); }

TEST(GptParity, MatchesPyTorchOnEveryDevice) {
  const std::string path = fixture_path("gpt_parity.safetensors");
  Expected<SafetensorsFile> loaded = load_safetensors(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status().message();
  const NamedTensors& fx = loaded->tensors;
  // The script and this test must describe the same model.
  ASSERT_EQ(loaded->metadata.at("config"),
            "vocab_size=65 block_size=16 n_layer=2 n_head=2 n_embd=32 batch=4");
  const GptConfig config{.vocab_size = 65, .block_size = 16, .n_layer = 2, .n_head = 2,
                         .n_embd = 32};

  for (Device* device : test_devices()) {
    SCOPED_TRACE(device->id());
    GPT model(config);
    Pcg32 rng(0);
    FlatParameters params = FlatParameters::create(model, device, rng).value();
    ASSERT_NO_FATAL_FAILURE(load_parameters(fx, params));  // [out, in] on both sides

    Variable ids(fx.at("input.ids").to(device).value());
    Variable targets(fx.at("input.targets").to(device).value());
    Worst logits_worst, loss_worst, grads_worst, adamw_worst;

    Variable logits = model.forward(ids).value();
    compare("logits", logits.data(), fx.at("output.logits"), 1e-4, 0, logits_worst);
    Variable loss = model.loss(logits, targets).value();
    compare("loss", loss.data(), fx.at("output.loss"), 1e-5, 0, loss_worst);
    ASSERT_TRUE(loss.backward().ok());
    for (const FlatParameters::Entry& e : params.entries())
      compare("grad." + e.name, e.parameter->grad, fx.at("grad." + e.name), 1e-5, 1e-3,
              grads_worst);

    ASSERT_TRUE(params.zero_grad().ok());
    auto adamw = optim::AdamW::create(params, {.lr = 1e-3}).value();  // PyTorch's defaults
    std::vector<float> losses;
    for (int step = 0; step < 5; ++step) {
      Variable step_loss = model.loss(model.forward(ids).value(), targets).value();
      losses.push_back(scalar(step_loss));
      ASSERT_TRUE(step_loss.backward().ok());
      ASSERT_TRUE(adamw->step().ok());
      ASSERT_TRUE(params.zero_grad().ok());
    }
    compare("adamw.losses", Tensor::from_vector<float>(losses, {5}).value(),
            fx.at("adamw.losses"), 1e-4, 0, adamw_worst);
    // The losses must have moved, or the comparison above says nothing about the optimizer.
    EXPECT_LT(losses.back(), losses.front() - 1e-3);

    std::printf(
        "gpt parity %s: max abs (rel) difference: logits %.2e (%.2e), loss %.2e, grads %.2e "
        "(%.2e), adamw losses %.2e\n",
        device->id().c_str(), logits_worst.abs, logits_worst.rel, loss_worst.abs, grads_worst.abs,
        grads_worst.rel, adamw_worst.abs);
  }
}

}  // namespace
}  // namespace tessel::nn
