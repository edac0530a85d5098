// Optimizers over a model's flat parameter buffers (nn::FlatParameters): SGD and AdamW with
// exactly PyTorch's update equations, each step one tile kernel launch per dtype group
// (kernels/sgd.tile, kernels/adamw.tile) over the whole flat buffer.
//
//   TESSEL_ASSIGN_OR_RETURN(auto opt, AdamW::create(params, {.lr = 1e-3, .weight_decay = 0.01}));
//   loss.backward();  opt->set_lr(schedule.lr_at(step));  TESSEL_TRY(opt->step());
//   TESSEL_TRY(params.zero_grad());
//
// State (momentum buffers, exp_avg, exp_avg_sq) is f32 and flat, laid out like the parameters
// (same offsets, same padding), so sharding it (ZeRO) cuts the same ranges as the gradients.
// named_state() exposes per-parameter views as "<param>.momentum_buffer", "<param>.exp_avg",
// "<param>.exp_avg_sq" (PyTorch's state keys), and step_count() is the step for bias correction;
// state_dict() / load_state_dict() save and restore both (io/training_checkpoint.h puts them in
// a file beside the model's).
//
// An optimizer keeps its own handle on the flat parameters (nn::FlatParameters shares its
// buffers), so the caller may move or drop theirs.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "nn/module.h"

namespace tessel::optim {

// What an optimizer needs to continue where it stopped: its state tensors by name
// ("fc.weight.exp_avg") and the number of steps taken.
struct OptimizerState {
  std::map<std::string, Tensor> tensors;
  int64_t step_count = 0;
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // Applies one update from the current gradients.
  virtual Status step() = 0;
  // Sets the gradients of the parameters it updates to zero (torch.optim.Optimizer.zero_grad):
  // one fill per flat buffer.
  Status zero_grad() { return params_.zero_grad(); }
  // Virtual for optimizers made of others (parallel/: one per DDP bucket).
  virtual std::vector<std::pair<std::string, Tensor>> named_state() const;

  double lr() const { return lr_; }
  void set_lr(double lr) { lr_ = lr; }
  int64_t step_count() const { return step_count_; }
  // Bytes of state (momentum buffers, exp_avg, ...) this optimizer holds.
  int64_t state_bytes() const;
  void set_step_count(int64_t step) { step_count_ = step; }
  // The flat state buffers themselves: the suffix of each state, and state s of dtype group g
  // (f32, the group's length). What ZeRO gathers and scatters for checkpoints.
  const std::vector<std::string>& state_names() const { return state_names_; }
  const Tensor& flat_state(size_t s, size_t group) const { return state_.at(s).at(group); }

  // named_state() (views, not copies) and step_count().
  OptimizerState state_dict() const;
  // Copies `state` into named_state()'s tensors and sets the step count. Every name must be
  // there with its shape, and nothing else: otherwise an error naming them, and nothing changes.
  Status load_state_dict(const OptimizerState& state);

 protected:
  explicit Optimizer(const nn::FlatParameters& params, double lr) : params_(params), lr_(lr) {}
  // A zeroed f32 buffer per group, registered under ".<suffix>".
  Status add_state(const std::string& suffix);
  // state_[s][g]: state s of group g.
  nn::FlatParameters params_;
  double lr_;
  int64_t step_count_ = 0;
  std::vector<std::string> state_names_;
  std::vector<std::vector<Tensor>> state_;
};

struct SgdOptions {
  double lr = 0.01;
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;
};

class Sgd : public Optimizer {
 public:
  // Errors for what PyTorch rejects: negative values, nesterov without momentum or with
  // dampening.
  static Expected<std::unique_ptr<Sgd>> create(nn::FlatParameters& params, const SgdOptions& o);
  Status step() override;

 private:
  Sgd(const nn::FlatParameters& params, const SgdOptions& o)
      : Optimizer(params, o.lr), options_(o) {}
  SgdOptions options_;
};

struct AdamWOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 1e-2;
};

class AdamW : public Optimizer {
 public:
  static Expected<std::unique_ptr<AdamW>> create(nn::FlatParameters& params, const AdamWOptions& o);
  Status step() override;

 private:
  AdamW(const nn::FlatParameters& params, const AdamWOptions& o)
      : Optimizer(params, o.lr), options_(o) {}
  AdamWOptions options_;
};

}  // namespace tessel::optim
