// Tuning one kernel launch (kernel, device, dtype, untuned parameters, sizes): the model-guided
// search of tune/search.h over the kernel's space, each trial measured in a child process
// (tune_trial.h) and recorded in the tuning database, with a progress line per trial.
#pragma once

#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "cli/tune_trial.h"
#include "support/status.h"
#include "tune/space_points.h"
#include "tune/tune_db.h"

namespace tessel::cli {

struct TuneTarget {
  std::string kernel;
  std::string device = "cpu";
  std::map<std::string, std::string> fixed;  // T and the untuned parameters
  std::map<std::string, int64_t> sizes;
  // The tuned parameters the op passed at this launch (--model, --workload): the search's
  // baseline instead of the kernel's defaults (tune/space_points.h).
  std::map<std::string, std::string> baseline = {};
};

struct TuneLimits {
  int budget = 32;     // trials
  double seconds = 0;  // wall time, 0: none
  uint64_t seed = 1;
  int patience = 12;  // 0: no early stop
  // The confirmation (tune_target): child processes that time the search's best and the
  // defaults launch by launch in turns, for confirm_seconds each; 0 rounds: none (nothing chosen).
  int confirm_rounds = 3;
  double confirm_seconds = 0.5;
  // The best replaces the defaults only when its median time ratio over the rounds is at most
  // 1 - margin and no round has it slower.
  double confirm_margin = 0.03;
};

struct TuneOutcome {
  TuneTarget target;
  tune::TuneKey key;
  int trials = 0, failed = 0;
  std::string best_params;  // "" when no trial succeeded
  double best_seconds = 0;
  double default_seconds = 0;  // the kernel's defaults, when they are a point of the space
  std::string default_params;
  // The confirmation: each round's (best / defaults) time ratio, and what went into the
  // database as the choice (best_params, or default_params when the best was not confirmed);
  // default_seconds and best_seconds are then the confirmation's medians (measured in turns).
  std::vector<double> confirm_ratios;
  std::string chosen_params;
};

// The concrete space and the database key of a target.
struct PreparedTarget {
  tune::SpacePoints space;
  tune::TuneKey key;
  std::string space_loc;
};
Expected<PreparedTarget> prepare_target(const TuneTarget& target);

// A search trial's cost. Every trial is timed against the kernel's defaults, batch by batch in
// turns (TrialRequest::versus_defaults), and costs its median time ratio times one reference:
// the defaults' time in the first trial, which the call records in *reference_seconds. On a
// shared machine a neighbour slows the candidate and the defaults alike within a round, so the
// ratios of trials taken minutes apart compare the specialisations, where their own times
// compared the neighbour's load (a gemm point on PoCL, under a compile beside it: 0.6-1.6 ms in
// three trials alone, its ratio to the defaults 0.74-0.77).
double paired_cost(const TrialResult& r, double* reference_seconds);

// Runs the search, confirms its best against the kernel's defaults and records the choice (the
// best only when confirmed faster, else the defaults, so a tuned launch is never slower than an
// untuned one beyond noise); `db` may be null (nothing recorded); progress lines go to
// `progress`.
Expected<TuneOutcome> tune_target(const TuneTarget& target, const TuneLimits& limits,
                                  tune::TuneDb* db, std::FILE* progress);

// Sizes from "M=2048,K=384,N=1152" or "2048x384x1152" (the kernel's sizes in order).
Expected<std::map<std::string, int64_t>> parse_sizes_for(const std::string& kernel,
                                                         const std::string& text);
// "M=2048 K=384 N=1152" in the kernel's order.
std::string sizes_text(const std::string& kernel, const std::map<std::string, int64_t>& sizes);
// Floating-point work of one launch when known (gemm family: 2 M N K Z), else 0.
double launch_flops(const std::string& kernel, const std::map<std::string, int64_t>& sizes);

}  // namespace tessel::cli
