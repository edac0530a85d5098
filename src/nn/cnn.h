// The small CNN of shared/WORKLOADS.md for 1 x 28 x 28 images (Fashion-MNIST), named as this
// PyTorch module names its parameters, so state dicts move between the two unchanged:
//
//   class SmallCnn(nn.Module):
//       def __init__(self, classes=10, image_size=28):
//           super().__init__()
//           side = image_size // 2 // 2                      # 7 for 28
//           self.conv1 = nn.Conv2d(1, 32, 3, padding=1);  self.bn1 = nn.BatchNorm2d(32)
//           self.conv2 = nn.Conv2d(32, 64, 3, padding=1); self.bn2 = nn.BatchNorm2d(64)
//           self.fc1 = nn.Linear(64 * side * side, 128);  self.fc2 = nn.Linear(128, classes)
//       def forward(self, x):                               # x [N, 1, 28, 28]
//           x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
//           x = F.max_pool2d(F.relu(self.bn2(self.conv2(x))), 2)
//           return self.fc2(F.relu(self.fc1(x.flatten(1))))
//
// forward() also takes [N, 28, 28] (what ImageBatches hands out) and adds the channel axis.
// image_size (square images, >= 4) exists so the parity fixture (tools/pytorch/make_fixtures.py)
// can use 6 x 6 images and stay small; the workload is 28.
#pragma once

#include "nn/conv_layers.h"
#include "nn/layers.h"

namespace tessel::nn {

class SmallCnn : public Module {
 public:
  explicit SmallCnn(int64_t classes = 10, int64_t image_size = 28);
  // [N, 1, S, S] or [N, S, S] (S = image_size) -> logits [N, classes].
  Expected<Variable> forward(const Variable& x) override;
  std::string type_name() const override { return "SmallCnn"; }

 private:
  Conv2d* conv1_;
  BatchNorm2d* bn1_;
  Conv2d* conv2_;
  BatchNorm2d* bn2_;
  Linear* fc1_;
  Linear* fc2_;
  int64_t image_size_;
  int64_t fc1_in_;
};

}  // namespace tessel::nn
