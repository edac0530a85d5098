// Measuring what the step-time model (step_model.h) takes as input: one rank's forward, backward
// and optimizer time for a training config's model and batch, and when, during backward, each
// gradient bucket of data-parallel training is complete (its last gradient's hook ran), i.e. the
// compute per layer as the buckets see it.
//
//   TESSEL_ASSIGN_OR_RETURN(auto run, ProfiledRun::create(config, *group));
//   TESSEL_ASSIGN_OR_RETURN(StepTimes t, run->step(/*overlap=*/false));
//
// The model and one batch of data.batch_size rows come from the config ([model], [data]); the
// buckets from [distributed] (bucket_cap_mb, first_bucket_mb; defaults without the table); the
// optimizer is AdamW. The same batch is used every step: data loading is not timed.
#pragma once

#include <memory>
#include <vector>

#include "dist/process_group.h"
#include "parallel/data_parallel.h"
#include "plan/step_model.h"
#include "train/train_config.h"

namespace tessel::plan {

struct StepTimes {
  double forward_s = 0, backward_s = 0, optimizer_s = 0;
  double step_s = 0;            // all of it, with the communication it waited for
  double exposed_s = 0;         // this rank's wait for collectives (DataParallel's StepStats)
  std::vector<double> ready_s;  // per bucket, after backward started
};

class ProfiledRun {
 public:
  // `group` (one rank: ProcessGroup::in_process(1)) must outlive the run.
  static Expected<std::unique_ptr<ProfiledRun>> create(const train::TrainConfig& config,
                                                       dist::ProcessGroup& group);
  ~ProfiledRun();
  Expected<StepTimes> step(bool overlap);
  std::vector<double> bucket_bytes() const;
  parallel::DataParallel& data_parallel() { return *dp_; }

 private:
  struct State;
  explicit ProfiledRun(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
  parallel::DataParallel* dp_ = nullptr;
};

// The median of `steps` timed steps after `warmup`, without overlap (compute alone), in one
// process: the ComputeProfile of the config's model.
Expected<ComputeProfile> profile_config(const train::TrainConfig& config, int warmup = 1,
                                        int steps = 3);

// The median of each field over steps (buckets' ready times element by element).
ComputeProfile median_profile(const std::vector<StepTimes>& steps,
                              const std::vector<double>& bucket_bytes);

}  // namespace tessel::plan
