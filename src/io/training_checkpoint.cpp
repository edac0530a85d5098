// Training state over the checkpoint bundle (see training_checkpoint.h).
#include "io/training_checkpoint.h"

#include <limits>

namespace tessel {
namespace {

constexpr const char* kStepKey = "step";
constexpr const char* kOptimizerStepKey = "optimizer.step_count";
constexpr const char* kGradScalerPrefix = "grad_scaler.";

bool reserved(const std::string& key) {
  return key == kStepKey || key == kOptimizerStepKey || key.starts_with(kGradScalerPrefix);
}

}  // namespace

Status save_training_state(const std::string& path, const TrainingState& state,
                           const secure::SecretKey* key) {
  Checkpoint ckpt;
  ckpt.model = state.model;
  ckpt.optimizer = state.optimizer.tensors;
  for (const auto& [name, value] : state.metadata) {
    if (reserved(name))
      return invalid_argument("save checkpoint {}: metadata key '{}' is the checkpoint's own", path,
                              name);
    ckpt.metadata[name] = value;
  }
  ckpt.metadata[kStepKey] = std::to_string(state.step);
  ckpt.metadata[kOptimizerStepKey] = std::to_string(state.optimizer.step_count);
  for (const auto& [name, value] : state.grad_scaler)
    ckpt.metadata[kGradScalerPrefix + name] = value;
  return save_checkpoint(path, ckpt, key);
}

Expected<TrainingState> load_training_state(const std::string& path, const secure::SecretKey* key) {
  TESSEL_ASSIGN_OR_RETURN(Checkpoint ckpt, load_checkpoint(path, key));
  TrainingState state;
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  TESSEL_ASSIGN_OR_RETURN(state.step, ckpt.get_int(kStepKey, 0, kMax));
  TESSEL_ASSIGN_OR_RETURN(state.optimizer.step_count, ckpt.get_int(kOptimizerStepKey, 0, kMax));
  for (auto& [name, value] : ckpt.metadata) {
    if (name.starts_with(kGradScalerPrefix))
      state.grad_scaler[name.substr(std::string_view(kGradScalerPrefix).size())] = value;
    else if (!reserved(name))
      state.metadata[name] = value;
  }
  state.model = std::move(ckpt.model);
  state.optimizer.tensors = std::move(ckpt.optimizer);
  return state;
}

Status save_training_checkpoint(const std::string& path, nn::Module& model,
                                const optim::Optimizer& optimizer, int64_t step,
                                const StringMap& metadata, const optim::GradScaler* grad_scaler,
                                const secure::SecretKey* key) {
  TrainingState state{.model = model.state_dict(),
                      .optimizer = optimizer.state_dict(),
                      .step = step,
                      .grad_scaler = {},
                      .metadata = metadata};
  if (grad_scaler) state.grad_scaler = grad_scaler->state();
  return save_training_state(path, state, key);
}

Expected<TrainingState> load_training_checkpoint(const std::string& path, nn::Module& model,
                                                 optim::Optimizer& optimizer,
                                                 optim::GradScaler* grad_scaler,
                                                 const secure::SecretKey* key) {
  TESSEL_ASSIGN_OR_RETURN(TrainingState state, load_training_state(path, key));
  Expected<nn::IncompatibleKeys> loaded = model.load_state_dict(state.model, /*strict=*/true);
  if (!loaded.ok()) return loaded.status().with_context("{}", path);
  Status s = optimizer.load_state_dict(state.optimizer);
  if (!s.ok()) return s.with_context("{}", path);
  if (grad_scaler) {
    if (state.grad_scaler.empty())
      return not_found("{}: no loss scaler state (grad_scaler.*) to restore", path);
    s = grad_scaler->restore(state.grad_scaler);
    if (!s.ok()) return s.with_context("{}", path);
  }
  return state;
}

}  // namespace tessel
