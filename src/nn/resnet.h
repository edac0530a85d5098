// ResNet-18/34/50 as torchvision.models builds them (He et al. 2015; ResNet-50 is "v1.5", with
// the stride on the 3x3 convolution of a bottleneck), with torchvision's parameter and buffer
// names, so state dicts move between the two unchanged:
//
//   conv1, bn1                        stem: 7x7/2 pad 3 + max-pool 3x3/2 pad 1 (ImageNet), or
//                                     3x3/1 pad 1 and no max-pool (CIFAR, the usual 32x32 variant:
//                                     torchvision's model with conv1 = Conv2d(3, 64, 3, 1, 1,
//                                     bias=False) and maxpool = Identity())
//   layer1 .. layer4                  stages of blocks, planes = base_width * {1, 2, 4, 8}; the
//                                     first block of layers 2-4 has stride 2
//     layer2.0.conv1, .bn1, .conv2, .bn2            BasicBlock (two 3x3), expansion 1
//     layer2.0.conv1 .. .bn3                        Bottleneck (1x1, 3x3 with the stride, 1x1),
//                                                   expansion 4
//     layer2.0.downsample.0 / .1      1x1 conv with the stride + BN, where the shortcut changes
//                                     shape
//   fc                                global average pooling, then Linear(512 * expansion, classes)
//
//   ResNet model(resnet_config(18, ResNetStem::kCifar, /*classes=*/10));
//   TESSEL_ASSIGN_OR_RETURN(Variable logits, model.forward(x));   // x [N, 3, H, W] -> [N, 10]
//
// Initialisation is torchvision's: convolutions kaiming_normal(fan_out, relu), batch norm
// weight 1 bias 0, fc nn.Linear's default. Convolutions have no bias. base_width (64 in
// torchvision) is configurable only so tests can build tiny networks of the same structure.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "nn/conv_layers.h"
#include "nn/layers.h"

namespace tessel::nn {

enum class ResNetBlock { kBasic, kBottleneck };
enum class ResNetStem { kImageNet, kCifar };

struct ResNetConfig {
  ResNetBlock block = ResNetBlock::kBasic;
  std::array<int64_t, 4> blocks = {2, 2, 2, 2};  // blocks per stage
  ResNetStem stem = ResNetStem::kImageNet;
  int64_t in_channels = 3;
  int64_t classes = 1000;
  int64_t base_width = 64;  // planes of layer1 (and the stem's output channels)
};

// depth 18 / 34 (BasicBlock, {2,2,2,2} / {3,4,6,3}) or 50 (Bottleneck, {3,4,6,3}); any other
// depth is an error that names the allowed ones.
Expected<ResNetConfig> resnet_config(int depth, ResNetStem stem, int64_t classes);

// One residual block: relu(body(x) + shortcut(x)), shortcut = downsample(x) or x.
class ResNetBlockModule : public Module {
 public:
  ResNetBlockModule(ResNetBlock kind, int64_t in_planes, int64_t planes, int64_t stride);
  Expected<Variable> forward(const Variable& x) override;
  std::string type_name() const override {
    return kind_ == ResNetBlock::kBasic ? "BasicBlock" : "Bottleneck";
  }
  // Output channels per plane: 1 for BasicBlock, 4 for Bottleneck.
  static int64_t expansion(ResNetBlock kind) { return kind == ResNetBlock::kBasic ? 1 : 4; }

 private:
  ResNetBlock kind_;
  std::vector<std::pair<Conv2d*, BatchNorm2d*>> body_;  // conv1/bn1, conv2/bn2[, conv3/bn3]
  Sequential* downsample_ = nullptr;
};

class ResNet : public Module {
 public:
  explicit ResNet(const ResNetConfig& config);
  // x [N, in_channels, H, W] (or [N, H, W] when in_channels is 1) -> logits [N, classes].
  Expected<Variable> forward(const Variable& x) override;
  std::string type_name() const override { return "ResNet"; }
  const ResNetConfig& config() const { return config_; }

 private:
  ResNetConfig config_;
  Conv2d* conv1_;
  BatchNorm2d* bn1_;
  std::array<Sequential*, 4> layers_;
  Linear* fc_;
};

}  // namespace tessel::nn
