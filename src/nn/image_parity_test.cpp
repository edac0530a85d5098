// Parity with PyTorch for the convolutional models, batch norm in training mode: nn/cnn.h's
// SmallCnn (at 6x6 images) and two tiny ResNets of nn/resnet.h (BasicBlock with the CIFAR stem;
// Bottleneck with the ImageNet stem and an identity-shortcut block), against
// src/nn/testdata/{cnn,resnet_basic,resnet_bottleneck}_parity.safetensors, written by
// tools/pytorch/make_fixtures.py (random weights and running statistics; see the script for what
// each tensor is). The test needs only the committed fixtures, not PyTorch. On every device the op
// library runs on (cpu, opencl) it loads the weights and buffers by name, then compares tensor by
// tensor: evaluation-mode logits (running statistics), training-mode logits, loss, the gradient of
// every parameter, the losses of 5 AdamW steps (lr 1e-3, PyTorch's defaults), and the batch-norm
// buffers after those 6 training forwards.
//
// The references were computed in float64, so a difference is tessel's float32 error alone
// (PyTorch's own float32 run is within the fixture's torch_f32_max_abs.* of them). Tolerances,
// |got - want| <= abs + rel |want|:
//   logits, eval logits  abs 1e-4 + rel 1e-4   values of order 1-10; sums of <= 600 products
//   loss                 abs 1e-5              a mean of <= 4 terms of order 1
//   gradients            abs 1e-5 + rel 1e-3   as gpt_parity_test: the absolute part covers
//                                              entries that are sums of cancelling terms (a
//                                              convolution bias before batch norm has gradient
//                                              exactly 0, float noise here)
//   AdamW losses         abs 1e-4              as gpt_parity_test
//   running_var          abs 1e-5 + rel 1e-4   shift-invariant, so as exact as the batch
//   running_mean         abs 2e-3              Adam moves a weight whose true gradient is 0 (a
//                                              bias before batch norm; a batch-norm bias whose
//                                              channel the next ReLU never clips) by up to lr per
//                                              step on the sign of float noise. Training mode
//                                              cancels such per-channel shifts, so the losses do
//                                              not see them, but the running means take 0.1 of
//                                              each: at most 0.1 * (1+2+3+4+5) * 1e-3 = 1.5e-3
//                                              after 5 steps (PyTorch float32: up to 1.1e-3)
//   num_batches_tracked  exact (6)
// A wrong momentum, a biased running variance (36/35 and 8/7 here) or a missed update gives
// differences of 3e-3 and more per update in the running statistics, and a wrong formula, a
// transposed weight or a misplaced stride >= 1e-2 in the logits or gradients.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "nn/cnn.h"
#include "nn/resnet.h"
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

std::vector<Device*> test_devices() { return parity::devices("image parity"); }

void expect_parity(const std::string& file, const std::string& config,
                   const std::function<std::unique_ptr<Module>()>& make) {
  Expected<SafetensorsFile> loaded = load_safetensors(fixture_path(file));
  ASSERT_TRUE(loaded.ok()) << loaded.status().message();
  const NamedTensors& fx = loaded->tensors;
  // The script and this test must describe the same model.
  ASSERT_EQ(loaded->metadata.at("config"), config);

  for (Device* device : test_devices()) {
    SCOPED_TRACE(file + " on " + device->id());
    std::unique_ptr<Module> model = make();
    Pcg32 rng(0);
    FlatParameters params = FlatParameters::create(*model, device, rng).value();
    ASSERT_NO_FATAL_FAILURE(load_parameters(fx, params));
    size_t loaded_buffers = 0;
    for (auto& [name, buffer] : model->named_buffers()) {
      auto it = fx.find("buffer." + name);
      ASSERT_NE(it, fx.end()) << "fixture has no buffer." << name;
      ASSERT_TRUE(buffer->tensor.copy_from(it->second).ok()) << name;
      ++loaded_buffers;
    }
    ASSERT_EQ(loaded_buffers, parity::count_prefixed(fx, "buffer.")) << "the fixture has buffers the model lacks";

    Variable images(fx.at("input.images").to(device).value());
    Variable targets(fx.at("input.targets").to(device).value());
    auto loss_of = [&](const Variable& logits) {
      return autograd::cross_entropy(logits, targets).value();
    };
    Worst eval_worst, logits_worst, loss_worst, grads_worst, adamw_worst, var_worst, mean_worst;

    model->eval();
    {
      autograd::NoGrad no_grad;
      compare("eval.logits", model->forward(images).value().data(), fx.at("eval.logits"), 1e-4,
              1e-4, eval_worst);
    }
    model->train();

    Variable logits = model->forward(images).value();
    compare("logits", logits.data(), fx.at("output.logits"), 1e-4, 1e-4, logits_worst);
    Variable loss = loss_of(logits);
    compare("loss", loss.data(), fx.at("output.loss"), 1e-5, 0, loss_worst);
    ASSERT_TRUE(loss.backward().ok());
    for (const FlatParameters::Entry& e : params.entries())
      compare("grad." + e.name, e.parameter->grad, fx.at("grad." + e.name), 1e-5, 1e-3,
              grads_worst);

    ASSERT_TRUE(params.zero_grad().ok());
    auto adamw = optim::AdamW::create(params, {.lr = 1e-3}).value();  // PyTorch's defaults
    std::vector<float> losses;
    for (int step = 0; step < 5; ++step) {
      Variable step_loss = loss_of(model->forward(images).value());
      losses.push_back(scalar(step_loss));
      ASSERT_TRUE(step_loss.backward().ok());
      ASSERT_TRUE(adamw->step().ok());
      ASSERT_TRUE(params.zero_grad().ok());
    }
    compare("adamw.losses", Tensor::from_vector<float>(losses, {5}).value(), fx.at("adamw.losses"),
            1e-4, 0, adamw_worst);
    // The losses must have moved, or the comparison above says nothing about the optimizer.
    EXPECT_LT(losses.back(), losses.front() - 1e-2);

    for (auto& [name, buffer] : model->named_buffers()) {
      const Tensor& want = fx.at("after." + name);
      if (want.dtype() == DType::kI64) {
        EXPECT_EQ(buffer->tensor.to_vector<int64_t>().value(), want.to_vector<int64_t>().value())
            << name;
      } else if (name.ends_with("running_var")) {
        compare("after." + name, buffer->tensor, want, 1e-5, 1e-4, var_worst);
      } else {
        compare("after." + name, buffer->tensor, want, 2e-3, 0, mean_worst);
      }
    }

    std::printf(
        "%s %s: max abs (rel) difference: eval logits %.2e, logits %.2e (%.2e), loss %.2e, "
        "grads %.2e (%.2e), adamw losses %.2e, running var %.2e (%.2e), running mean %.2e\n",
        file.c_str(), device->id().c_str(), eval_worst.abs, logits_worst.abs, logits_worst.rel,
        loss_worst.abs, grads_worst.abs, grads_worst.rel, adamw_worst.abs, var_worst.abs,
        var_worst.rel, mean_worst.abs);
  }
}

TEST(ImageParity, SmallCnnMatchesPyTorchOnEveryDevice) {
  expect_parity("cnn_parity.safetensors", "SmallCnn classes=10 image_size=6 batch=4",
                [] { return std::make_unique<SmallCnn>(10, 6); });
}

TEST(ImageParity, ResNetBasicBlockMatchesPyTorchOnEveryDevice) {
  expect_parity("resnet_basic_parity.safetensors",
                "ResNet block=basic blocks=1,1,1,1 base_width=4 stem=cifar classes=5 "
                "input=4x3x12x12",
                [] {
                  return std::make_unique<ResNet>(ResNetConfig{.block = ResNetBlock::kBasic,
                                                               .blocks = {1, 1, 1, 1},
                                                               .stem = ResNetStem::kCifar,
                                                               .classes = 5,
                                                               .base_width = 4});
                });
}

TEST(ImageParity, ResNetBottleneckMatchesPyTorchOnEveryDevice) {
  expect_parity("resnet_bottleneck_parity.safetensors",
                "ResNet block=bottleneck blocks=2,1,1,1 base_width=2 stem=imagenet classes=5 "
                "input=2x3x36x36",
                [] {
                  return std::make_unique<ResNet>(ResNetConfig{.block = ResNetBlock::kBottleneck,
                                                               .blocks = {2, 1, 1, 1},
                                                               .stem = ResNetStem::kImageNet,
                                                               .classes = 5,
                                                               .base_width = 2});
                });
}

}  // namespace
}  // namespace tessel::nn
