// ResNet (see resnet.h): torchvision.models.resnet's BasicBlock, Bottleneck and ResNet, on the
// autograd functional API.
#include "nn/resnet.h"

#include "autograd/functional.h"
#include "nn/init.h"

namespace tessel::nn {

Expected<ResNetConfig> resnet_config(int depth, ResNetStem stem, int64_t classes) {
  ResNetConfig config;
  switch (depth) {
    case 18:
      config.block = ResNetBlock::kBasic;
      config.blocks = {2, 2, 2, 2};
      break;
    case 34:
      config.block = ResNetBlock::kBasic;
      config.blocks = {3, 4, 6, 3};
      break;
    case 50:
      config.block = ResNetBlock::kBottleneck;
      config.blocks = {3, 4, 6, 3};
      break;
    default:
      return invalid_argument("resnet: depth {} is not built in; allowed: 18, 34, 50", depth);
  }
  if (classes < 1) return invalid_argument("resnet: classes must be >= 1, got {}", classes);
  config.stem = stem;
  config.classes = classes;
  return config;
}

namespace {

std::unique_ptr<Conv2d> conv_no_bias(int64_t in, int64_t out, int64_t kernel, int64_t stride) {
  // torchvision's conv1x1 / conv3x3 and the stem's 7x7: padding kernel / 2, no bias.
  return std::make_unique<Conv2d>(
      in, out, kernel, Conv2dOptions{.stride = stride, .padding = kernel / 2, .bias = false});
}

}  // namespace

ResNetBlockModule::ResNetBlockModule(ResNetBlock kind, int64_t in_planes, int64_t planes,
                                     int64_t stride)
    : kind_(kind) {
  const int64_t out_planes = planes * expansion(kind);
  // (in, out, kernel, stride) of conv1, conv2[, conv3]; each is followed by bn<i>.
  std::vector<std::array<int64_t, 4>> convs;
  if (kind == ResNetBlock::kBasic)
    convs = {{in_planes, planes, 3, stride}, {planes, planes, 3, 1}};
  else  // v1.5: the stride is on the 3x3 convolution, not on the first 1x1
    convs = {{in_planes, planes, 1, 1}, {planes, planes, 3, stride}, {planes, out_planes, 1, 1}};
  for (size_t i = 0; i < convs.size(); ++i) {
    const auto [in, out, kernel, s] = convs[i];
    const std::string index = std::to_string(i + 1);
    Conv2d& conv = register_module("conv" + index, conv_no_bias(in, out, kernel, s));
    BatchNorm2d& bn = register_module("bn" + index, std::make_unique<BatchNorm2d>(out));
    body_.emplace_back(&conv, &bn);
  }
  if (stride != 1 || in_planes != out_planes) {
    auto downsample = std::make_unique<Sequential>();
    downsample->append(conv_no_bias(in_planes, out_planes, 1, stride));
    downsample->append(std::make_unique<BatchNorm2d>(out_planes));
    downsample_ = &register_module("downsample", std::move(downsample));
  }
}

Expected<Variable> ResNetBlockModule::forward(const Variable& x) {
  Variable out = x;
  for (size_t i = 0; i < body_.size(); ++i) {
    TESSEL_ASSIGN_OR_RETURN(out, (*body_[i].first)(out));
    TESSEL_ASSIGN_OR_RETURN(out, (*body_[i].second)(out));
    // The last batch norm's output is added to the shortcut before its ReLU.
    if (i + 1 < body_.size()) {
      TESSEL_ASSIGN_OR_RETURN(out, autograd::relu(out));
    }
  }
  Variable shortcut = x;
  if (downsample_) {
    TESSEL_ASSIGN_OR_RETURN(shortcut, (*downsample_)(x));
  }
  TESSEL_ASSIGN_OR_RETURN(out, autograd::add(out, shortcut));
  return autograd::relu(out);
}

ResNet::ResNet(const ResNetConfig& config) : config_(config) {
  const int64_t width = config.base_width;
  // ImageNet: 7x7 stride 2 pad 3 (then the max-pool in forward); CIFAR: 3x3 stride 1 pad 1.
  const bool imagenet = config.stem == ResNetStem::kImageNet;
  conv1_ = &register_module(
      "conv1", conv_no_bias(config.in_channels, width, imagenet ? 7 : 3, imagenet ? 2 : 1));
  bn1_ = &register_module("bn1", std::make_unique<BatchNorm2d>(width));
  const int64_t expansion = ResNetBlockModule::expansion(config.block);
  int64_t in_planes = width;
  for (int stage = 0; stage < 4; ++stage) {
    const int64_t planes = width << stage;
    auto layer = std::make_unique<Sequential>();
    for (int64_t b = 0; b < config.blocks[stage]; ++b) {
      const int64_t stride = (stage > 0 && b == 0) ? 2 : 1;
      layer->append(std::make_unique<ResNetBlockModule>(config.block, in_planes, planes, stride));
      in_planes = planes * expansion;
    }
    layers_[stage] = &register_module("layer" + std::to_string(stage + 1), std::move(layer));
  }
  fc_ = &register_module("fc", std::make_unique<Linear>(in_planes, config.classes));

  // torchvision's ResNet.__init__: every convolution kaiming_normal_(mode="fan_out",
  // nonlinearity="relu"); batch norm keeps weight 1, bias 0; fc keeps nn.Linear's default.
  for (auto& [name, module] : named_modules()) {
    if (dynamic_cast<Conv2d*>(module) == nullptr) continue;
    for (auto& [param_name, param] : module->named_parameters())
      if (param_name == "weight")
        param->init = [](Tensor& t, Pcg32& rng) {
          return kaiming_normal(t, rng,
                                {.mode = FanMode::kFanOut, .nonlinearity = Nonlinearity::kRelu});
        };
  }
}

Expected<Variable> ResNet::forward(const Variable& input) {
  Variable x = input;
  if (x.data().rank() == 3 && config_.in_channels == 1) {
    TESSEL_ASSIGN_OR_RETURN(x, autograd::reshape(x, {x.shape()[0], 1, x.shape()[1], x.shape()[2]}));
  }
  if (x.data().rank() != 4 || x.shape()[1] != config_.in_channels)
    return invalid_argument("ResNet: expected images [N, {}, H, W], got {}", config_.in_channels,
                            shape_string(input.shape()));
  TESSEL_ASSIGN_OR_RETURN(x, (*conv1_)(x));
  TESSEL_ASSIGN_OR_RETURN(x, (*bn1_)(x));
  TESSEL_ASSIGN_OR_RETURN(x, autograd::relu(x));
  if (config_.stem == ResNetStem::kImageNet) {
    TESSEL_ASSIGN_OR_RETURN(x, autograd::max_pool2d(x, {3, 3}, {2, 2}, {1, 1}));
  }
  for (Sequential* layer : layers_) {
    TESSEL_ASSIGN_OR_RETURN(x, (*layer)(x));
  }
  // Global average pooling (torchvision's AdaptiveAvgPool2d((1, 1)) then flatten(1)).
  TESSEL_ASSIGN_OR_RETURN(x, autograd::mean(x, {2, 3}));
  return (*fc_)(x);
}

}  // namespace tessel::nn
