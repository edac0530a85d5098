// The parts of `tessel plan` (cmd_plan.cpp): its arguments, and one section per projection, each
// in a file of its own (cmd_plan_<name>.cpp) that prints text or gives one JSON object.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "support/status.h"
#include "train/train_config.h"

namespace tessel::cli {

struct PlanArgs {
  std::string config_path;
  int ranks = 128;
  std::string link = "25GB/s,5us";
  std::string algorithm = "auto";
  int ranks_per_machine = 8;
  std::string local_link = "20GB/s,2us";
  double speedup = 1.0;
  int steps = 3;
  bool json = false;
  std::string only;  // a section's name: that one alone; empty: all
};

// One part of `tessel plan`'s output: text for people, or a JSON object.
struct PlanSection {
  std::string name;
  std::function<Expected<nlohmann::json>(const train::TrainConfig&, const PlanArgs&)> run;
  std::function<void(const nlohmann::json&)> print;
};

// cmd_plan_memory.cpp: the static memory plan (plan/memory_plan.h).
PlanSection memory_plan_section();
// `tessel train`'s check before anything is built, when [train] memory_limit is set: 0 when the
// plan's predicted peak fits (or there is no limit), else 1 after printing the breakdown.
int check_memory_limit(const train::TrainConfig& config);

}  // namespace tessel::cli
