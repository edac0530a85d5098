// A training run's state in one checkpoint file (checkpoint.h's format): the model's state_dict,
// the optimizer's state and step count, the step, the fp16 loss scaler's state, and whatever
// else the caller keeps. The keys in the file:
//
//   <name>                          model parameters and buffers ("fc.weight", "bn.running_mean")
//   optimizer.<param>.<state>       optimizer tensors ("optimizer.fc.weight.exp_avg")
//   metadata "step", "optimizer.step_count", "grad_scaler.scale", "grad_scaler.clean_steps",
//            and the caller's own keys
//
//   TESSEL_TRY(save_training_checkpoint("run/ckpt.safetensors", model, *optimizer, step));
//   ... in a new process, after building the same model, parameters and optimizer:
//   TESSEL_ASSIGN_OR_RETURN(TrainingState state,
//                           load_training_checkpoint("run/ckpt.safetensors", model, *optimizer));
//   int64_t step = state.step;            // the weights and optimizer state are restored
//
// Loading is strict (Module::load_state_dict, Optimizer::load_state_dict): a file of another
// model or optimizer is an error that lists what is missing and what is extra.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "io/checkpoint.h"
#include "nn/module.h"
#include "optim/grad_scaler.h"
#include "optim/optimizer.h"

namespace tessel {

struct TrainingState {
  nn::StateDict model;
  optim::OptimizerState optimizer;
  int64_t step = 0;
  std::map<std::string, std::string> grad_scaler;  // GradScaler::state(); empty: none
  StringMap metadata;  // the caller's other keys (data position, generator states, ...)
};

// The state as a file and back. A caller metadata key that the format uses itself ("step",
// "optimizer.step_count", "grad_scaler.*") is an error.
// With a key the file is encrypted (checkpoint.h, safetensors.h).
Status save_training_state(const std::string& path, const TrainingState& state,
                           const secure::SecretKey* key = nullptr);
Expected<TrainingState> load_training_state(const std::string& path,
                                            const secure::SecretKey* key = nullptr);

// One call: the model's state_dict, the optimizer's state_dict, `step` (and the scaler's state
// when one is given) into `path`.
Status save_training_checkpoint(const std::string& path, nn::Module& model,
                                const optim::Optimizer& optimizer, int64_t step,
                                const StringMap& metadata = {},
                                const optim::GradScaler* grad_scaler = nullptr,
                                const secure::SecretKey* key = nullptr);
// One call back: loads `path` into the model and the optimizer (and the scaler when one is
// given), strictly, and returns the whole state (step, metadata) for the rest.
Expected<TrainingState> load_training_checkpoint(const std::string& path, nn::Module& model,
                                                 optim::Optimizer& optimizer,
                                                 optim::GradScaler* grad_scaler = nullptr,
                                                 const secure::SecretKey* key = nullptr);

}  // namespace tessel
