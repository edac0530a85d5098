// The torch.nn layers of convolutional networks, with PyTorch's names, shapes, default
// initialisers and train/eval behaviour, each a thin module over the autograd ops.
//
//   Conv2d(in, out, k, {.stride, .padding, .dilation, .groups, .bias})
//                        weight [out, in / groups, k, k], bias [out]: kaiming_uniform(a = sqrt(5)),
//                        and U(-1/sqrt(fan_in), 1/sqrt(fan_in)) with fan_in = in / groups * k * k
//   BatchNorm2d(c)       weight [c] = 1, bias [c] = 0; buffers running_mean [c] = 0,
//                        running_var [c] = 1, num_batches_tracked [] = 0 (i64)
//   MaxPool2d, AvgPool2d (kernel, stride = kernel, padding), no parameters
//   Flatten              [N, ...] -> [N, prod(...)] (torch.nn.Flatten's default start_dim = 1)
//   Dropout(p, seed)     zeroes with probability p and scales by 1/(1-p) in training mode; the
//                        identity in eval mode. Its mask seeds come from rng(), which a trainer
//                        saves and restores so a resumed run drops the same elements.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "autograd/functional.h"
#include "nn/module.h"

namespace tessel::nn {

struct Conv2dOptions {
  int64_t stride = 1;
  int64_t padding = 0;
  int64_t dilation = 1;
  int64_t groups = 1;  // in and out must be multiples of it
  bool bias = true;
};

class Conv2d : public Module {
 public:
  Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel_size,
         const Conv2dOptions& options = {});
  // x [N, in, H, W] -> [N, out, H', W'].
  Expected<Variable> forward(const Variable& x) override;
  std::string type_name() const override { return "Conv2d"; }
  Parameter& weight() { return *weight_; }
  Parameter* bias() { return bias_; }
  const Conv2dOptions& options() const { return options_; }

 private:
  Parameter* weight_;
  Parameter* bias_ = nullptr;
  int64_t out_channels_;
  Conv2dOptions options_;
};

class BatchNorm2d : public Module {
 public:
  explicit BatchNorm2d(int64_t features, double eps = 1e-5, double momentum = 0.1);
  // x [N, C, H, W]: batch statistics (and running-statistic updates) in training mode, the
  // running statistics in eval mode.
  Expected<Variable> forward(const Variable& x) override;
  std::string type_name() const override { return "BatchNorm2d"; }

 private:
  Parameter* weight_;
  Parameter* bias_;
  Buffer* running_mean_;
  Buffer* running_var_;
  Buffer* num_batches_tracked_;
  double eps_, momentum_;
};

class MaxPool2d : public Module {
 public:
  // stride 0 means stride = kernel_size (PyTorch's default).
  explicit MaxPool2d(int64_t kernel_size, int64_t stride = 0, int64_t padding = 0);
  Expected<Variable> forward(const Variable& x) override;
  std::string type_name() const override { return "MaxPool2d"; }

 private:
  int64_t kernel_, stride_, padding_;
};

class AvgPool2d : public Module {
 public:
  explicit AvgPool2d(int64_t kernel_size, int64_t stride = 0, int64_t padding = 0);
  Expected<Variable> forward(const Variable& x) override;
  std::string type_name() const override { return "AvgPool2d"; }

 private:
  int64_t kernel_, stride_, padding_;
};

class Flatten : public Module {
 public:
  Expected<Variable> forward(const Variable& x) override;
  std::string type_name() const override { return "Flatten"; }
};

class Dropout : public Module {
 public:
  explicit Dropout(double p = 0.5, uint64_t seed = 0);
  Expected<Variable> forward(const Variable& x) override;
  std::string type_name() const override { return "Dropout"; }
  // Draws one mask seed per training forward.
  Pcg32& rng() { return rng_; }

 private:
  double p_;
  Pcg32 rng_;
};

}  // namespace tessel::nn
