// SGD and AdamW (see optimizer.h): checks, the host-side scalars, one kernel launch per group.
#include "optim/optimizer.h"

#include <cmath>

#include "ops/kernel_cache.h"

namespace tessel::optim {

std::vector<std::pair<std::string, Tensor>> Optimizer::named_state() const {
  std::vector<std::pair<std::string, Tensor>> out;
  for (const auto& e : params_.entries())
    for (size_t s = 0; s < state_names_.size(); ++s) {
      Tensor flat = state_[s][e.group];
      Tensor view = flat.slice(0, e.offset, e.offset + e.numel).value();
      out.emplace_back(e.name + "." + state_names_[s], view.reshape(e.parameter->shape).value());
    }
  return out;
}

OptimizerState Optimizer::state_dict() const {
  OptimizerState out;
  for (auto& [name, tensor] : named_state())
    out.tensors[name] = tensor;
  out.step_count = step_count_;
  return out;
}

Status Optimizer::load_state_dict(const OptimizerState& state) {
  std::vector<std::pair<std::string, Tensor>> targets = named_state();
  std::vector<std::string> problems;
  std::map<std::string, bool> known;
  for (auto& [name, target] : targets) {
    known[name] = true;
    auto it = state.tensors.find(name);
    if (it == state.tensors.end())
      problems.push_back(fmt::format("missing '{}'", name));
    else if (it->second.shape() != target.shape())
      problems.push_back(fmt::format("'{}' has shape {}, the optimizer's is {}", name,
                                     shape_string(it->second.shape()),
                                     shape_string(target.shape())));
  }
  for (const auto& [name, tensor] : state.tensors)
    if (!known.contains(name)) problems.push_back(fmt::format("unexpected '{}'", name));
  if (state.step_count < 0)
    problems.push_back(fmt::format("step count {} is negative", state.step_count));
  if (!problems.empty()) {
    std::string message;
    for (const std::string& p : problems)
      message += (message.empty() ? "" : "; ") + p;
    return invalid_argument("optimizer load_state_dict: {}", message);
  }
  for (auto& [name, target] : targets) {
    Status s = target.copy_from(state.tensors.at(name));
    if (!s.ok()) return s.with_context("optimizer load_state_dict: '{}'", name);
  }
  step_count_ = state.step_count;
  return ok_status();
}

int64_t Optimizer::state_bytes() const {
  int64_t bytes = 0;
  for (const auto& buffers : state_)
    for (const Tensor& t : buffers)
      bytes += int64_t(t.nbytes());
  return bytes;
}

Status Optimizer::add_state(const std::string& suffix) {
  std::vector<Tensor> buffers;
  for (const auto& g : params_.groups()) {
    TESSEL_ASSIGN_OR_RETURN(Tensor t,
                            Tensor::zeros(g.values.shape(), DType::kF32, params_.device()));
    buffers.push_back(std::move(t));
  }
  state_names_.push_back(suffix);
  state_.push_back(std::move(buffers));
  return ok_status();
}

Expected<std::unique_ptr<Sgd>> Sgd::create(nn::FlatParameters& params, const SgdOptions& o) {
  if (o.lr < 0) return invalid_argument("SGD: lr must be >= 0, got {}", o.lr);
  if (o.momentum < 0) return invalid_argument("SGD: momentum must be >= 0, got {}", o.momentum);
  if (o.weight_decay < 0)
    return invalid_argument("SGD: weight_decay must be >= 0, got {}", o.weight_decay);
  if (o.nesterov && (o.momentum <= 0 || o.dampening != 0))
    return invalid_argument("SGD: nesterov needs momentum > 0 and dampening 0 (got {} and {})",
                            o.momentum, o.dampening);
  std::unique_ptr<Sgd> sgd(new Sgd(params, o));
  if (o.momentum != 0) TESSEL_TRY(sgd->add_state("momentum_buffer"));
  return sgd;
}

Status Sgd::step() {
  const bool momentum = options_.momentum != 0;
  ops::KernelParams kp{{"MOMENTUM", momentum ? "1" : "0"},
                       {"NESTEROV", options_.nesterov ? "1" : "0"}};
  for (size_t g = 0; g < params_.groups().size(); ++g) {
    const auto& group = params_.groups()[g];
    Tensor buffer;
    if (momentum) {
      buffer = state_[0][g];
    } else {  // not read or written; the kernel still takes a tensor
      TESSEL_ASSIGN_OR_RETURN(buffer, Tensor::zeros({1}, DType::kF32, params_.device()));
    }
    TESSEL_TRY(ops::launch_kernel(
        "sgd", kp,
        {group.values, group.grads, buffer, lr_, options_.momentum, options_.dampening,
         options_.weight_decay, static_cast<int64_t>(step_count_ == 0 ? 1 : 0)}));
  }
  ++step_count_;
  return ok_status();
}

Expected<std::unique_ptr<AdamW>> AdamW::create(nn::FlatParameters& params, const AdamWOptions& o) {
  if (o.lr < 0) return invalid_argument("AdamW: lr must be >= 0, got {}", o.lr);
  if (o.eps < 0) return invalid_argument("AdamW: eps must be >= 0, got {}", o.eps);
  if (o.beta1 < 0 || o.beta1 >= 1 || o.beta2 < 0 || o.beta2 >= 1)
    return invalid_argument("AdamW: betas must be in [0, 1), got ({}, {})", o.beta1, o.beta2);
  if (o.weight_decay < 0)
    return invalid_argument("AdamW: weight_decay must be >= 0, got {}", o.weight_decay);
  std::unique_ptr<AdamW> adamw(new AdamW(params, o));
  TESSEL_TRY(adamw->add_state("exp_avg"));
  TESSEL_TRY(adamw->add_state("exp_avg_sq"));
  return adamw;
}

Status AdamW::step() {
  const double t = static_cast<double>(step_count_ + 1);
  const double step_size = lr_ / (1.0 - std::pow(options_.beta1, t));
  const double bias_correction2_sqrt = std::sqrt(1.0 - std::pow(options_.beta2, t));
  for (size_t g = 0; g < params_.groups().size(); ++g) {
    const auto& group = params_.groups()[g];
    TESSEL_TRY(ops::launch_kernel(
        "adamw", {},
        {group.values, group.grads, state_[0][g], state_[1][g], lr_, options_.beta1, options_.beta2,
         options_.eps, options_.weight_decay, step_size, bias_correction2_sqrt}));
  }
  ++step_count_;
  return ok_status();
}

}  // namespace tessel::optim
