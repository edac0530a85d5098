// Tuning one algorithm choice (ops/algorithm_choice.h): every algorithm that applies to the launch
// runs in turns, round after round, in this process (an algorithm is op code over kernels that
// are already correct, so there is no child process and no result check here: the op tests
// compare every algorithm with the reference). An alternative replaces the op's rule only when its
// median time ratio to the rule over the rounds is at most 0.97 and it is faster in at least four
// rounds of five, so noise on a shared machine does not move a layer off its rule.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "ops/algorithm_choice.h"
#include "support/status.h"
#include "tune/tune_db.h"

namespace tessel::cli {

struct AlgorithmTiming {
  std::string algorithm;
  double median_seconds = 0;  // per run, over the rounds
  double median_ratio = 1;    // to the rule's run in the same round
  double faster_share = 0;    // of the rounds where it beat the rule
  std::string error;          // when it could not run (then not timed)
};

struct AlgorithmOutcome {
  ops::AlgorithmLaunch launch;
  tune::TuneKey key;
  std::string rule, chosen;
  int rounds = 0;
  std::vector<AlgorithmTiming> timings;  // rule first
};

// Times the launch's algorithms, records a trial per algorithm and the choice in `db` (may be
// null) and prints one progress line to `progress` (may be null).
Expected<AlgorithmOutcome> tune_algorithm(const ops::AlgorithmLaunch& launch, tune::TuneDb* db,
                                          std::FILE* progress);

// "N=32 C=64 H=56 W=56 O=64 KH=3 ..." for messages.
std::string algorithm_sizes_text(const ops::AlgorithmLaunch& launch);

}  // namespace tessel::cli
