// The torch.nn layers of convolutional networks, with PyTorch's names, shapes, default
// initialisers and train/eval behaviour, each a thin module over the autograd ops.
//
//   Conv2d(in, out, k, {.stride, .padding, .dilation, .groups, .bias})
//                        weight [out, in / groups, k, k], bias [out]: kaiming_uniform(a = sqrt(5)),
//                        and U(-1/sqrt(fan_in), 1/sqrt(fan_in)) with fan_in = in / groups * k * k
//   BatchNorm2d(c)       weight [c] = 1, bias [c] = 0; buffers running_mean [c] = 0,
//                        running_var [c] = 1, num_batches_tracked [] = 0 (i64); with a
//                        BatchNormSync (convert_sync_batchnorm) it is torch.nn.SyncBatchNorm
//   MaxPool2d, AvgPool2d (kernel, stride = kernel, padding), no parameters
//   Flatten              [N, ...] -> [N, prod(...)] (torch.nn.Flatten's default start_dim = 1)
//   Dropout(p, seed)     zeroes with probability p and scales by 1/(1-p) in training mode; the
//                        identity in eval mode. Its mask seeds come from rng(), which a trainer
//                        saves and restores so a resumed run drops the same elements.
#pragma once

#include <cstdint>
#include <memory>
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

// The cross-rank sum that makes BatchNorm2d a SyncBatchNorm (torch.nn.SyncBatchNorm): the batch
// statistics of the whole global batch, over every rank's rows. parallel/sync_batch_norm.h
// implements it over a process group; nn/ only calls it.
class BatchNormSync {
 public:
  virtual ~BatchNormSync() = default;
  // The element-wise sum over the ranks of each rank's `local` (f32, any shape, the same on every
  // rank), recorded for autograd: its backward is the sum over the ranks of their gradients,
  // each weighted by how much that rank's loss counts in the data-parallel gradient relative to
  // this rank's (1 when the ranks' shares are even, as in PyTorch). Every rank calls it in the
  // same order.
  virtual Expected<Variable> all_reduce_sum(const Variable& local) = 0;
};

class BatchNorm2d : public Module {
 public:
  explicit BatchNorm2d(int64_t features, double eps = 1e-5, double momentum = 0.1);
  // x [N, C, H, W]: batch statistics (and running-statistic updates) in training mode, the
  // running statistics in eval mode. Synchronised (set_sync), training uses the statistics of
  // every rank's rows together, and the running variance's unbiased correction counts them all.
  Expected<Variable> forward(const Variable& x) override;
  std::string type_name() const override { return sync_ ? "SyncBatchNorm" : "BatchNorm2d"; }
  void set_sync(std::shared_ptr<BatchNormSync> sync) { sync_ = std::move(sync); }
  bool synchronised() const { return sync_ != nullptr; }

 private:
  Expected<Variable> forward_synchronised(const Variable& x, const Variable& w, const Variable& b);
  Status count_batch();

  std::shared_ptr<BatchNormSync> sync_;
  Parameter* weight_;
  Parameter* bias_;
  Buffer* running_mean_;
  Buffer* running_var_;
  Buffer* num_batches_tracked_;
  double eps_, momentum_;
};

// torch.nn.SyncBatchNorm.convert_sync_batchnorm: every BatchNorm2d under `model` (itself
// included) synchronises its batch statistics through `sync` from now on (nullptr: back to
// per-rank statistics). Returns how many layers it set.
int convert_sync_batchnorm(Module& model, std::shared_ptr<BatchNormSync> sync);

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
