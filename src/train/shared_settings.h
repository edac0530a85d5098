// The settings every rank of a data-parallel job must share, compared once at start-up. Ranks
// that differ in batch size or model would otherwise train side by side for minutes (their
// collectives have the same sizes) and fail, if at all, with a misleading error; this makes the
// difference an error before the first step, naming the setting and each rank's value:
//
//   ddp.toml: the ranks of this job differ in 'data.batch_size': rank 0: 8; rank 1: 16
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "dist/process_group.h"
#include "nn/module.h"
#include "train/train_config.h"

namespace tessel::train {

using Settings = std::vector<std::pair<std::string, std::string>>;  // key -> value as text

// What must agree: batch size, micro-steps, run length, model (name, parameter count and shapes),
// optimizer and learning rate, precision, ZeRO stage, seed, data.
Settings shared_settings(const TrainConfig& config, const nn::FlatParameters& params,
                         int64_t total_steps);

// Gathers every rank's settings (one all-gather) and compares them.
Status check_shared_settings(dist::ProcessGroup& group, const Settings& settings,
                             const std::string& source);

}  // namespace tessel::train
