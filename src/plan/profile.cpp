// Timing one rank's step and its buckets' readiness (profile.h).
#include "plan/profile.h"

#include <algorithm>
#include <chrono>

#include "autograd/functional.h"
#include "optim/optimizer.h"
#include "train/data_source.h"
#include "train/model_registry.h"
#include "train/trainer.h"

namespace tessel::plan {

namespace {

using Clock = std::chrono::steady_clock;
using autograd::Variable;

double seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

struct ProfiledRun::State {
  std::unique_ptr<train::DataSource> data;
  std::unique_ptr<nn::Module> model;
  std::unique_ptr<nn::FlatParameters> params;
  std::unique_ptr<parallel::DataParallel> dp;
  Tensor inputs, targets;
  std::vector<double> bytes;  // per bucket
  // Written by the gradient hooks during backward.
  Clock::time_point backward_start;
  std::vector<double> ready;
};

ProfiledRun::ProfiledRun(std::unique_ptr<State> state)
    : state_(std::move(state)), dp_(state_->dp.get()) {}
ProfiledRun::~ProfiledRun() = default;

Expected<std::unique_ptr<ProfiledRun>> ProfiledRun::create(const train::TrainConfig& config,
                                                           dist::ProcessGroup& group) {
  if (!config.model) return invalid_argument("{}: the config has no [model] table", config.source);
  auto s = std::make_unique<State>();
  TESSEL_ASSIGN_OR_RETURN(s->data,
                          train::DataSource::open(config.data, config.seed, config.source));
  train::ModelContext context{
      .input_shape = s->data->example_shape(), .classes = s->data->classes(), .seed = config.seed};
  TESSEL_ASSIGN_OR_RETURN(s->model, train::make_model(*config.model, context));
  Pcg32 rng(config.seed, 1);
  TESSEL_ASSIGN_OR_RETURN(nn::FlatParameters params,
                          nn::FlatParameters::create(*s->model, cpu_device(), rng));
  s->params = std::make_unique<nn::FlatParameters>(std::move(params));
  if (s->params->groups().size() != 1)
    return invalid_argument("{}: the step profile handles models of one parameter dtype",
                            config.source);
  auto make_adamw = [](nn::FlatParameters& p) -> Expected<std::unique_ptr<optim::Optimizer>> {
    TESSEL_ASSIGN_OR_RETURN(auto opt, optim::AdamW::create(p, {.lr = 1e-3}));
    return std::unique_ptr<optim::Optimizer>(std::move(opt));
  };
  const train::DistributedConfig& d = config.distributed;
  TESSEL_ASSIGN_OR_RETURN(s->dp,
                          parallel::DataParallel::create(
                              *s->params, group, make_adamw,
                              {.zero_stage = 0,
                               .bucket_cap_bytes = int64_t(d.bucket_cap_mb * (1 << 20)),
                               .first_bucket_bytes = int64_t(d.first_bucket_mb * (1 << 20))}));
  TESSEL_ASSIGN_OR_RETURN(auto batches, s->data->train_batches());
  TESSEL_ASSIGN_OR_RETURN(Batch batch, batches->next());
  s->inputs = batch.inputs;
  s->targets = batch.targets;

  // Each parameter's gradient hook (DataParallel's) gets a timer in front: the bucket is
  // complete when the last of its parameters' hooks has run.
  const auto ranges = s->dp->bucket_ranges();
  const size_t element = dtype_size(s->params->groups().front().dtype);
  for (const auto& [begin, end] : ranges)
    s->bytes.push_back(double(end - begin) * double(element));
  s->ready.assign(ranges.size(), 0.0);
  State* state = s.get();
  for (const nn::FlatParameters::Entry& e : s->params->entries()) {
    size_t bucket = ranges.size();
    for (size_t b = 0; b < ranges.size(); ++b)
      if (e.offset >= ranges[b].first && e.offset < ranges[b].second) bucket = b;
    if (bucket == ranges.size()) continue;
    auto& hook = e.parameter->variable.state()->on_grad_ready;
    hook = [state, bucket, inner = hook](autograd::VariableState& leaf) -> Status {
      state->ready[bucket] =
          std::max(state->ready[bucket], seconds(state->backward_start, Clock::now()));
      return inner ? inner(leaf) : ok_status();
    };
  }
  return std::unique_ptr<ProfiledRun>(new ProfiledRun(std::move(s)));
}

std::vector<double> ProfiledRun::bucket_bytes() const {
  return state_->bytes;
}

Expected<StepTimes> ProfiledRun::step(bool overlap) {
  State& s = *state_;
  s.dp->set_overlap(overlap);
  StepTimes t;
  const Clock::time_point start = Clock::now();
  TESSEL_ASSIGN_OR_RETURN(Variable logits, s.model->forward(Variable(s.inputs)));
  TESSEL_ASSIGN_OR_RETURN(Variable loss, train::training_loss(logits, Variable(s.targets)));
  s.backward_start = Clock::now();
  std::fill(s.ready.begin(), s.ready.end(), 0.0);
  TESSEL_TRY(loss.backward());
  const Clock::time_point backward_end = Clock::now();
  TESSEL_TRY(s.dp->finish_backward());
  TESSEL_TRY(s.dp->optimizer().step());
  TESSEL_TRY(s.params->zero_grad());
  const Clock::time_point end = Clock::now();
  t.forward_s = seconds(start, s.backward_start);
  t.backward_s = seconds(s.backward_start, backward_end);
  t.step_s = seconds(start, end);
  t.exposed_s = s.dp->last_stats().exposed_comm_ms / 1e3;
  // Without overlap the collectives are waited for in finish_backward and in the bucketed
  // optimizer's step (bucket by bucket): what is left after backward, less those waits, is the
  // optimizer's compute.
  t.optimizer_s = std::max(0.0, seconds(backward_end, end) - t.exposed_s);
  t.ready_s = s.ready;
  return t;
}

ComputeProfile median_profile(const std::vector<StepTimes>& steps,
                              const std::vector<double>& bucket_bytes) {
  ComputeProfile p;
  auto field = [&](auto get) {
    std::vector<double> v;
    for (const StepTimes& t : steps)
      v.push_back(get(t));
    return median(v);
  };
  p.forward_s = field([](const StepTimes& t) { return t.forward_s; });
  p.backward_s = field([](const StepTimes& t) { return t.backward_s; });
  p.optimizer_s = field([](const StepTimes& t) { return t.optimizer_s; });
  for (size_t b = 0; b < bucket_bytes.size(); ++b)
    p.buckets.push_back({bucket_bytes[b], field([b](const StepTimes& t) {
                           return b < t.ready_s.size() ? t.ready_s[b] : 0.0;
                         })});
  return p;
}

Expected<ComputeProfile> profile_config(const train::TrainConfig& config, int warmup, int steps) {
  TESSEL_ASSIGN_OR_RETURN(auto groups, dist::ProcessGroup::in_process(1));
  TESSEL_ASSIGN_OR_RETURN(auto run, ProfiledRun::create(config, *groups.front()));
  std::vector<StepTimes> timed;
  for (int i = 0; i < warmup + steps; ++i) {
    TESSEL_ASSIGN_OR_RETURN(StepTimes t, run->step(/*overlap=*/false));
    if (i >= warmup) timed.push_back(t);
  }
  return median_profile(timed, run->bucket_bytes());
}

}  // namespace tessel::plan
