// The training loop (see trainer.h).
#include "train/trainer.h"

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <map>
#include <new>
#include <nlohmann/json.hpp>
#include <optional>
#include <system_error>

#include "autograd/autocast.h"
#include "autograd/functional.h"
#include "data/prefetch.h"
#include "io/training_checkpoint.h"
#include "nn/conv_layers.h"
#include "nn/gpt.h"
#include "ops/kernel_cache.h"
#include "optim/clip.h"
#include "parallel/rank_shard.h"
#include "support/atomic_file.h"
#include "train/model_registry.h"
#include "train/progress.h"
#include "train/shared_settings.h"

namespace tessel::train {
namespace {

using autograd::Variable;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

Status make_parent_folder(const std::string& path) {
  std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (parent.empty()) return ok_status();
  std::error_code ec;
  std::filesystem::create_directories(parent, ec);
  if (ec) return invalid_argument("cannot create folder '{}': {}", parent.string(), ec.message());
  return ok_status();
}

// Dropout modules by name: their generators are part of a checkpoint.
std::vector<std::pair<std::string, nn::Dropout*>> dropouts(nn::Module& model) {
  std::vector<std::pair<std::string, nn::Dropout*>> out;
  for (auto& [name, m] : model.named_modules())
    if (auto* d = dynamic_cast<nn::Dropout*>(m)) out.emplace_back(name, d);
  return out;
}

Expected<double> scalar_of(const Tensor& t) {
  TESSEL_ASSIGN_OR_RETURN(std::vector<float> v, t.to_vector<float>());
  return double(v.at(0));
}

// The name of the first parameter whose values (or gradients) hold an inf or NaN, or "" when
// there is none: read on the host, only after a step went wrong.
std::string first_non_finite(const nn::FlatParameters& params, bool gradients) {
  std::map<size_t, std::vector<float>> host;  // group -> its values or gradients
  for (const nn::FlatParameters::Entry& e : params.entries()) {
    const nn::FlatParameters::Group& g = params.groups()[e.group];
    const Tensor& t = gradients ? g.grads : g.values;
    if (!t.defined()) continue;
    auto it = host.find(e.group);
    if (it == host.end()) {
      Expected<std::vector<float>> v = t.to_vector<float>();
      if (!v.ok()) continue;
      it = host.emplace(e.group, std::move(*v)).first;
    }
    for (int64_t i = e.offset; i < e.offset + e.numel && i < int64_t(it->second.size()); ++i)
      if (!std::isfinite(it->second[size_t(i)])) return e.name;
  }
  return "";
}

// The generator streams of the run's seed used here (data_source.cpp has the data's).
constexpr uint64_t kSampleStream = 6;

}  // namespace

Trainer::~Trainer() {
  if (metrics_) std::fclose(metrics_);
}

// A failed allocation deep in a library (a std::vector, a thread's stack) throws; at these two
// doors it becomes an error that says where the run was, instead of std::terminate. Tensor
// memory has its own error naming the size (CachingAllocator); this is for the rest.
Expected<std::unique_ptr<Trainer>> Trainer::create(TrainConfig config, TrainerOptions options) {
  try {
    std::unique_ptr<Trainer> trainer(new Trainer(std::move(config), options));
    TESSEL_TRY(trainer->build());
    return trainer;
  } catch (const std::bad_alloc&) {
    return resource_exhausted(
        "out of host memory while setting up the run (model, data, "
        "optimizer); a memory limit, or the machine is full");
  } catch (const std::system_error& e) {
    return resource_exhausted("setting up the run: {}", e.what());
  }
}

Status Trainer::build() {
  const TrainConfig& c = config_;
  if (c.checkpoint.encrypt) {  // a missing or malformed key fails now, not at the first save
    Expected<secure::SecretKey> key = c.checkpoint.key_file.empty()
                                          ? secure::SecretKey::from_env(c.checkpoint.key_env)
                                          : secure::SecretKey::from_file(c.checkpoint.key_file);
    if (!key.ok()) return key.status().with_context("{}: [checkpoint]", c.source);
    checkpoint_key_ = std::move(*key);
  }
  if (c.distributed.enabled) {  // join the job first: the data is cut by rank
    if (options_.process_group) {
      group_ = options_.process_group;
    } else {
      dist::ProcessGroupOptions group_options;
      TESSEL_ASSIGN_OR_RETURN(group_options.backend, dist::parse_backend(c.distributed.backend));
      Expected<std::unique_ptr<dist::ProcessGroup>> group =
          dist::ProcessGroup::from_env(group_options);
      if (!group.ok()) return group.status().with_context("{}: [distributed]", c.source);
      own_group_ = std::move(*group);
      group_ = own_group_.get();
    }
    if (rank() != 0) options_.progress = nullptr;  // rank 0 reports for the job
  }
  ops::TargetSetting setting = c.target;
  if (!c.distributed.devices.empty()) {  // each rank its own device
    if (int(c.distributed.devices.size()) != world_size())
      return invalid_argument("{}: key 'distributed.devices' lists {} devices for {} ranks",
                              c.source, c.distributed.devices.size(), world_size());
    setting.device = c.distributed.devices[size_t(rank())];
    setting.key = fmt::format("distributed.devices[{}]", rank());
  }
  TESSEL_ASSIGN_OR_RETURN(ops::TargetChoice target, ops::resolve_target(setting, ops::launches_on));
  ops::apply_target(target);
  device_ = target.device;

  // Data: training batches through a prefetch thread; evaluation batches made per evaluation.
  // In a data-parallel job every rank reads the same global batches of batch_size x ranks rows
  // and keeps its own rows (RankShard), so the job trains as one process with the global batch.
  DataConfig global_data = c.data;
  const int shards = group_ ? world_size() : options_.data_shards;
  const int shard = group_ ? rank() : options_.data_shard;
  global_data.batch_size *= shards;
  TESSEL_ASSIGN_OR_RETURN(data_, DataSource::open(global_data, c.seed, c.source));
  ModelContext context{
      .input_shape = data_->example_shape(), .classes = data_->classes(), .seed = c.seed};
  TESSEL_ASSIGN_OR_RETURN(std::unique_ptr<BatchSource> train, data_->train_batches());
  if (shards > 1 && c.distributed.uneven) {
    // The cut moves with the shares, so it comes after the read-ahead, not before it.
    auto prefetched = std::make_unique<Prefetcher>(std::move(train), /*depth=*/4);
    auto cut = std::make_unique<parallel::RankShard>(std::move(prefetched), shard, shards);
    rank_shard_ = cut.get();
    train_batches_ = std::move(cut);
  } else {
    if (shards > 1) train = std::make_unique<parallel::RankShard>(std::move(train), shard, shards);
    train_batches_ = std::make_unique<Prefetcher>(std::move(train), /*depth=*/4);
  }
  const int64_t per_epoch = data_->batches_per_epoch();
  if (c.epochs > 0 && per_epoch == 0)
    return invalid_argument("{}: key 'train.epochs': data '{}' has no epochs; use 'train.steps'",
                            c.source, c.data.name);
  total_steps_ = c.steps > 0 ? c.steps : c.epochs * per_epoch / c.grad_accum_steps;
  if (total_steps_ == 0)
    return invalid_argument(
        "{}: key 'train.grad_accum_steps': {} micro-batches per step, but the "
        "run has {} batches ({} epochs of {}): it would take no step",
        c.source, c.grad_accum_steps, c.epochs * per_epoch, c.epochs, per_epoch);
  // A prompt the vocabulary cannot encode fails now, not after the run.
  if (data_->text() && c.sample.tokens > 0) {
    Expected<std::vector<int64_t>> prompt = data_->text()->encode(c.sample.prompt);
    if (!prompt.ok()) return prompt.status().with_context("{}: key 'sample.prompt'", c.source);
  }

  // Model, parameters, optimizer, schedule.
  TESSEL_ASSIGN_OR_RETURN(model_, make_model(*c.model, context));
  Pcg32 init_rng(c.seed, 1);
  TESSEL_ASSIGN_OR_RETURN(nn::FlatParameters params,
                          nn::FlatParameters::create(*model_, device_, init_rng));
  params_ = std::make_unique<nn::FlatParameters>(std::move(params));
  if (group_ && device_->kind() != DeviceKind::kCpu) {
    if (c.privacy.enabled)
      return invalid_argument("{}: [privacy] needs every rank on the CPU (rank {} is on {})",
                              c.source, rank(), device_->id());
    // The same architecture and initial weights in host memory, for DataParallel.
    TESSEL_ASSIGN_OR_RETURN(host_model_, make_model(*c.model, context));
    Pcg32 host_rng(c.seed, 1);
    TESSEL_ASSIGN_OR_RETURN(nn::FlatParameters host,
                            nn::FlatParameters::create(*host_model_, cpu_device(), host_rng));
    host_params_ = std::make_unique<nn::FlatParameters>(std::move(host));
  }
  if (c.optimizer.name == "sgd") {
    Expected<std::unique_ptr<optim::Sgd>> sgd = optim::Sgd::create(*params_, c.optimizer.sgd);
    if (!sgd.ok()) return sgd.status().with_context("{}: [optimizer]", c.source);
    optimizer_ = std::move(*sgd);
  } else {
    Expected<std::unique_ptr<optim::AdamW>> adamw =
        optim::AdamW::create(*params_, c.optimizer.adamw);
    if (!adamw.ok()) return adamw.status().with_context("{}: [optimizer]", c.source);
    optimizer_ = std::move(*adamw);
  }
  // Before any collective that depends on them: ranks that disagree stop here, each told how.
  if (group_)
    TESSEL_TRY(
        check_shared_settings(*group_, shared_settings(c, *params_, total_steps_), c.source));
  if (group_) TESSEL_TRY(build_data_parallel());
  if (group_ && c.distributed.uneven) {
    Expected<parallel::Rebalancer> balance =
        parallel::Rebalancer::create(c.data.batch_size * world_size(), world_size(),
                                     {.hysteresis = c.distributed.rebalance_hysteresis});
    if (!balance.ok()) return balance.status().with_context("{}: [distributed]", c.source);
    rebalancer_ = std::make_unique<parallel::Rebalancer>(std::move(*balance));
  }
  if (c.privacy.enabled) {
    secure::DpSgdOptions dp;
    dp.max_grad_norm = c.privacy.max_grad_norm;
    dp.noise_multiplier = c.privacy.noise_multiplier;
    if (c.privacy.seed >= 0) {
      dp.seed.emplace();
      dp.seed->fill(0);
      for (int k = 0; k < 8; ++k)
        (*dp.seed)[size_t(k)] = uint8_t(uint64_t(c.privacy.seed) >> (8 * k));
    }
    Expected<std::unique_ptr<secure::DpSgd>> attached =
        secure::DpSgd::attach(*model_, *params_, dp);
    if (!attached.ok()) return attached.status().with_context("{}: [privacy]", c.source);
    dp_sgd_ = std::move(*attached);
    // Each step's batch is a 1 / batches_per_epoch share of the examples (with drop_last, at
    // least B / N: the accountant errs on the costly side).
    sample_rate_ = 1.0 / double(per_epoch);
  }
  if (c.precision == "fp16") grad_scaler_ = std::make_unique<optim::GradScaler>();
  if (c.fuse) fused_ = std::make_unique<graph::FusedSteps>();
  config_.schedule.total_steps = total_steps_;
  Status schedule_ok = config_.schedule.validate();
  if (!schedule_ok.ok()) return schedule_ok.with_context("{}: [schedule]", c.source);
  // A checkpoint that cannot be written fails now, not after the whole run.
  if (!c.checkpoint_path.empty() && rank() == 0) {
    Status writable = make_parent_folder(c.checkpoint_path);
    if (writable.ok()) writable = AtomicFileWriter::open(c.checkpoint_path).status();
    if (!writable.ok())
      return writable.with_context("{}: key 'train.checkpoint_path' = '{}'", c.source,
                                   c.checkpoint_path);
  }
  return ok_status();
}

Status Trainer::build_data_parallel() {
  const DistributedConfig& d = config_.distributed;
  const OptimizerConfig& o = config_.optimizer;
  auto make_optimizer =
      [o](nn::FlatParameters& part) -> Expected<std::unique_ptr<optim::Optimizer>> {
    if (o.name == "sgd") {
      TESSEL_ASSIGN_OR_RETURN(auto sgd, optim::Sgd::create(part, o.sgd));
      return std::unique_ptr<optim::Optimizer>(std::move(sgd));
    }
    TESSEL_ASSIGN_OR_RETURN(auto adamw, optim::AdamW::create(part, o.adamw));
    return std::unique_ptr<optim::Optimizer>(std::move(adamw));
  };
  parallel::DataParallelOptions options{
      .zero_stage = d.zero_stage,
      .bucket_cap_bytes = int64_t(d.bucket_cap_mb * double(1 << 20)),
      .first_bucket_bytes = int64_t(d.first_bucket_mb * double(1 << 20)),
      .overlap = d.overlap};
  Expected<std::unique_ptr<parallel::DataParallel>> dp =
      parallel::DataParallel::create(updated_params(), *group_, make_optimizer, options);
  if (!dp.ok()) return dp.status().with_context("{}: [distributed]", config_.source);
  data_parallel_ = std::move(*dp);
  TESSEL_TRY(data_parallel_->broadcast_buffers(*model_));
  if (d.sync_batchnorm) {
    // Weighted by this rank's share (set_batch_share), which the uneven split moves.
    auto sync = parallel::convert_sync_batchnorm(*model_, *group_, data_parallel_.get());
    if (!sync.ok())
      return sync.status().with_context("{}: key 'distributed.sync_batchnorm'", config_.source);
    batch_norm_sync_ = std::move(*sync);
  }
  optimizer_.reset();  // each bucket has its own; the single-process one would only hold memory
  return ok_status();
}

Status Trainer::save_checkpoint(const std::string& path) {
  // ZeRO shards parameters (stage 3) and optimizer state (1-3): every rank takes part in
  // gathering them whole, then rank 0 writes the file a single-process run would write.
  std::vector<std::pair<std::string, Tensor>> parameters, optimizer_state;
  if (data_parallel_) {
    TESSEL_ASSIGN_OR_RETURN(parameters, data_parallel_->gather_parameters());
    TESSEL_ASSIGN_OR_RETURN(optimizer_state, data_parallel_->gather_optimizer_state());
  }
  if (rank() != 0) return ok_status();  // the ranks hold the same model: rank 0 writes it
  const secure::SecretKey* key = checkpoint_key_ ? &*checkpoint_key_ : nullptr;
  StringMap metadata;
  metadata["data.train"] = train_batches_->position().to_string();
  metadata["config"] = config_.source;
  for (auto& [name, d] : dropouts(*model_))
    metadata["rng." + name] = d->rng().state_string();
  TESSEL_TRY(make_parent_folder(path));
  if (!data_parallel_)
    return save_training_checkpoint(path, *model_, optimizer(), step_, metadata, grad_scaler_.get(),
                                    key);
  TrainingState state{.model = {},
                      .optimizer = {.tensors = {}, .step_count = optimizer().step_count()},
                      .step = step_,
                      .grad_scaler = {},
                      .metadata = metadata};
  for (auto& [name, tensor] : parameters)
    state.model[name] = tensor;
  for (auto& [name, buffer] : model_->named_buffers())
    state.model[name] = buffer->tensor;
  for (auto& [name, tensor] : optimizer_state)
    state.optimizer.tensors[name] = tensor;
  if (grad_scaler_) state.grad_scaler = grad_scaler_->state();
  return save_training_state(path, state, key);
}

Status Trainer::resume(const std::string& checkpoint_path) {
  const secure::SecretKey* key = checkpoint_key_ ? &*checkpoint_key_ : nullptr;
  TrainingState state;
  if (data_parallel_) {
    // Every rank reads the whole file and keeps its shards.
    TESSEL_ASSIGN_OR_RETURN(state, load_training_state(checkpoint_path, key));
    auto take = [&](const NamedTensors& from, const std::string& name) -> Expected<Tensor> {
      auto it = from.find(name);
      if (it == from.end())
        return not_found("{}: no tensor '{}' (the checkpoint is of another model or optimizer)",
                         checkpoint_path, name);
      return it->second;
    };
    Status s = data_parallel_->load_parameters(
        [&](const std::string& name) { return take(state.model, name); });
    if (!s.ok()) return s.with_context("{}", checkpoint_path);
    for (auto& [name, buffer] : model_->named_buffers()) {
      TESSEL_ASSIGN_OR_RETURN(Tensor saved, take(state.model, name));
      s = buffer->tensor.copy_from(saved);
      if (!s.ok()) return s.with_context("{}: tensor '{}'", checkpoint_path, name);
    }
    const size_t expected = params_->entries().size() + model_->named_buffers().size();
    if (state.model.size() != expected)
      return invalid_argument("{}: holds {} model tensors, this model has {}", checkpoint_path,
                              state.model.size(), expected);
    s = data_parallel_->load_optimizer_state(
        [&](const std::string& name) { return take(state.optimizer.tensors, name); });
    if (!s.ok()) return s.with_context("{}: optimizer state", checkpoint_path);
    mutable_optimizer().set_step_count(state.optimizer.step_count);
    if (grad_scaler_) {
      s = grad_scaler_->restore(state.grad_scaler);
      if (!s.ok()) return s.with_context("{}", checkpoint_path);
    }
  } else {
    TESSEL_ASSIGN_OR_RETURN(state,
                            load_training_checkpoint(checkpoint_path, *model_, mutable_optimizer(),
                                                     grad_scaler_.get(), key));
  }
  // A step past the run's end, or more optimizer steps than steps (one per step, less those the
  // loss scaler skipped), is a damaged or foreign file; said in checkpoint.h's get_int words.
  if (state.step < 0 || state.step > total_steps_)
    return out_of_range("checkpoint {}: metadata 'step' is {}, expected a value in [0, {}]",
                        checkpoint_path, state.step, total_steps_);
  if (state.optimizer.step_count > state.step)
    return out_of_range(
        "checkpoint {}: metadata 'optimizer.step_count' is {}, expected a value in [0, {}]",
        checkpoint_path, state.optimizer.step_count, state.step);
  step_ = state.step;
  auto get = [&](const std::string& key) -> Expected<std::string> {
    auto it = state.metadata.find(key);
    if (it == state.metadata.end())
      return not_found("{}: no metadata key '{}'", checkpoint_path, key);
    return it->second;
  };
  TESSEL_ASSIGN_OR_RETURN(std::string position_text, get("data.train"));
  TESSEL_ASSIGN_OR_RETURN(DataPosition position, DataPosition::parse(position_text));
  TESSEL_TRY(train_batches_->restore(position));
  for (auto& [name, d] : dropouts(*model_)) {
    TESSEL_ASSIGN_OR_RETURN(std::string rng_state, get("rng." + name));
    TESSEL_ASSIGN_OR_RETURN(d->rng(), Pcg32::from_state_string(rng_state));
  }
  // The steps already taken spent privacy (with this config's sigma and sampling rate).
  if (dp_sgd_ && step_ > 0) accountant_.step(config_.privacy.noise_multiplier, sample_rate_, step_);
  resumed_ = true;
  return ok_status();
}

Status Trainer::write_metrics(const std::string& json_line) {
  if (config_.metrics_path.empty() || rank() != 0) return ok_status();
  if (!metrics_) {
    TESSEL_TRY(make_parent_folder(config_.metrics_path));
    metrics_ = std::fopen(config_.metrics_path.c_str(), resumed_ ? "a" : "w");
    if (!metrics_)
      return errno_error(fmt::format("opening metrics file '{}'", config_.metrics_path));
  }
  fmt::print(metrics_, "{}\n", json_line);
  std::fflush(metrics_);
  return ok_status();
}

double Evaluation::perplexity() const {
  return std::exp(loss);
}

Expected<bool> Trainer::any_rank_found_inf(bool found_inf_here) {
  if (!group_) return found_inf_here;
  double flag = found_inf_here ? 1.0 : 0.0;
  TESSEL_ASSIGN_OR_RETURN(
      dist::Work w, group_->all_reduce(&flag, 1, dist::DataType::kFloat64, dist::RedOp::kMax));
  TESSEL_TRY(w.wait());
  return flag > 0.0;
}

Status Trainer::check_finite(double loss) {
  const bool whole_gradients = !data_parallel_;  // ZeRO keeps shards, DDP averages in flight
  std::string bad;
  if (!std::isfinite(loss)) {
    bad = fmt::format("the loss is {}", loss);
  } else if (whole_gradients) {
    TESSEL_ASSIGN_OR_RETURN(double norm, optim::global_grad_norm(*params_));
    if (std::isfinite(norm)) return ok_status();
    std::string name = first_non_finite(*params_, /*gradients=*/true);
    bad = fmt::format("the gradient of '{}' is not finite", name.empty() ? "?" : name);
  } else {
    return ok_status();
  }
  if (whole_gradients || config_.distributed.zero_stage < 3) {
    std::string name = first_non_finite(updated_params(), /*gradients=*/false);
    if (!name.empty()) bad += fmt::format(" (parameter '{}' holds inf or NaN)", name);
  }
  return failed_precondition(
      "{}: step {}: {}; stopping the run{}", config_.source, step_ + 1, bad,
      config_.checkpoint_path.empty()
          ? ""
          : fmt::format(" (the last checkpoint written, if any, is kept: {})",
                        config_.checkpoint_path));
}

const nn::FlatParameters& Trainer::local_gradients() {
  if (!data_parallel_ || config_.distributed.zero_stage == 0) return updated_params();
  // ZeRO: this rank's shards of the averaged gradients, as flat groups without values.
  std::vector<nn::FlatParameters::Group> groups;
  for (const Tensor& g : data_parallel_->local_gradients())
    groups.push_back({g.dtype(), Tensor(), g});
  gradient_shards_ =
      std::make_unique<nn::FlatParameters>(nn::FlatParameters::over(device_, std::move(groups)));
  return *gradient_shards_;
}

Status Trainer::refresh_device_copy() {
  return host_params_ ? data_parallel_->copy_values_to(*params_) : ok_status();
}

Expected<Evaluation> Trainer::evaluate() {
  TESSEL_TRY(refresh_device_copy());
  autograd::NoGrad no_grad;
  autograd::Autocast autocast(config_.compute_dtype());
  model_->eval();
  TESSEL_ASSIGN_OR_RETURN(std::unique_ptr<BatchSource> batches, data_->eval_batches());
  Evaluation e;
  e.classification = data_->task() == DataTask::kClassification;
  double loss_sum = 0.0;
  for (int64_t b = 0; b < data_->eval_batch_count(); ++b) {
    TESSEL_ASSIGN_OR_RETURN(Batch batch, batches->next());
    TESSEL_ASSIGN_OR_RETURN(Tensor x, batch.inputs.to(device_));
    TESSEL_ASSIGN_OR_RETURN(Tensor y, batch.targets.to(device_));
    TESSEL_ASSIGN_OR_RETURN(Variable logits, (*model_)(Variable(x)));
    TESSEL_ASSIGN_OR_RETURN(Variable loss, training_loss(logits, Variable(y)));
    TESSEL_ASSIGN_OR_RETURN(double mean_loss, scalar_of(loss.data()));
    const int64_t n = batch.targets.numel();
    loss_sum += mean_loss * double(n);
    e.total += n;
    if (!e.classification) continue;
    const int64_t classes = logits.shape().back();
    TESSEL_ASSIGN_OR_RETURN(std::vector<float> scores, logits.data().to_vector<float>());
    TESSEL_ASSIGN_OR_RETURN(std::vector<int64_t> labels, batch.targets.to_vector<int64_t>());
    for (int64_t i = 0; i < n; ++i) {
      const float* row = scores.data() + i * classes;
      int64_t best = 0;
      for (int64_t k = 1; k < classes; ++k)
        if (row[k] > row[best]) best = k;
      e.correct += best == labels[i];
    }
  }
  model_->train();
  e.loss = e.total > 0 ? loss_sum / double(e.total) : 0.0;
  e.accuracy = e.total > 0 ? double(e.correct) / double(e.total) : 0.0;
  return e;
}

Expected<std::string> Trainer::sample(const SampleConfig& options) {
  const CharDataset* text = data_->text();
  auto* gpt = dynamic_cast<nn::GPT*>(model_.get());
  if (!text || !gpt)
    return failed_precondition("{}: a sample needs a language model (gpt) on text data",
                               config_.source);
  Expected<std::vector<int64_t>> prompt = text->encode(options.prompt);
  if (!prompt.ok()) return prompt.status().with_context("{}: key 'sample.prompt'", config_.source);
  TESSEL_TRY(refresh_device_copy());
  Pcg32 rng(config_.seed, kSampleStream);
  model_->eval();
  Expected<std::vector<int64_t>> tokens = gpt->generate(std::move(*prompt),
                                                        {.max_new_tokens = options.tokens,
                                                         .temperature = options.temperature,
                                                         .top_k = options.top_k},
                                                        rng);
  model_->train();
  if (!tokens.ok()) return tokens.status();
  return text->decode(*tokens);
}

Expected<RunSummary> Trainer::run(int64_t stop_at) {
  try {
    return run_steps(stop_at);
  } catch (const std::bad_alloc&) {
    return resource_exhausted(
        "out of host memory after step {} of {} (a memory limit, or the machine is full); the "
        "last checkpoint written is intact",
        step_, total_steps_);
  } catch (const std::system_error& e) {
    return resource_exhausted("after step {} of {}: {}", step_, total_steps_, e.what());
  }
}

Expected<RunSummary> Trainer::run_steps(int64_t stop_at) {
  const TrainConfig& c = config_;
  const int64_t end = stop_at >= 0 ? std::min(stop_at, total_steps_) : total_steps_;
  RunSummary summary;
  summary.first_step = step_;
  std::unique_ptr<Progress> progress;
  if (options_.progress)
    progress = std::make_unique<Progress>(options_.progress, total_steps_, step_,
                                          options_.interactive, data_->throughput_unit());
  auto say = [&](const std::string& line) {
    if (progress) progress->message(line);
  };
  auto run_eval = [&]() -> Expected<Evaluation> {
    TESSEL_ASSIGN_OR_RETURN(Evaluation e, evaluate());
    nlohmann::json j = {{"step", step_}, {"eval_loss", e.loss}};
    if (dp_sgd_)
      say(fmt::format(
          "step {}: privacy spent epsilon {:.4f} at delta {} (sigma {}, C {}, q {:.6f})", step_,
          accountant_.epsilon(c.privacy.delta), c.privacy.delta, c.privacy.noise_multiplier,
          c.privacy.max_grad_norm, sample_rate_));
    if (e.classification) {
      say(fmt::format("step {}: test accuracy {:.2f}% ({}/{}), test loss {:.4f}", step_,
                      100.0 * e.accuracy, e.correct, e.total, e.loss));
      j["eval_accuracy"] = e.accuracy;
    } else {
      say(fmt::format("step {}: validation loss {:.4f}, perplexity {:.2f} ({} tokens)", step_,
                      e.loss, e.perplexity(), e.total));
      j["eval_perplexity"] = e.perplexity();
    }
    TESSEL_TRY(write_metrics(j.dump()));
    return e;
  };

  model_->train();
  const Clock::time_point start = Clock::now();
  Clock::time_point window_start = start;
  int64_t window_steps = 0;
  double window_loss = 0.0;
  while (step_ < end) {
    if (dp_sgd_ && c.privacy.target_epsilon > 0) {  // would this step pass the budget?
      secure::RdpAccountant next = accountant_;
      next.step(c.privacy.noise_multiplier, sample_rate_);
      if (next.epsilon(c.privacy.delta) > c.privacy.target_epsilon) {
        say(fmt::format(
            "privacy budget: step {} would spend epsilon {:.4f} > target {} at delta "
            "{}; stopping",
            step_ + 1, next.epsilon(c.privacy.delta), c.privacy.target_epsilon, c.privacy.delta));
        summary.budget_reached = true;
        break;
      }
    }
    const double lr = c.schedule.lr_at(step_);
    double loss_value = 0.0;
    // Uneven split: this step's rows per rank, and the time this rank computes them.
    int64_t rows = 0;
    double compute_s = 0.0;
    if (rebalancer_) {
      const std::vector<int64_t>& shares = rebalancer_->shares();
      rows = shares[size_t(rank())];
      TESSEL_TRY(rank_shard_->set_shares(shares));
      TESSEL_TRY(data_parallel_->set_batch_share(rows, rebalancer_->global_rows()));
    }
    if (host_params_) {  // this rank's device computes on a copy of the values: part of its work
      const Clock::time_point copy_start = Clock::now();
      TESSEL_TRY(refresh_device_copy());
      compute_s += seconds_since(copy_start);
    }
    // The loss of the whole global batch is the mean of the ranks'; queued behind the gradient
    // buckets, it is waited for after the optimizer step so that it delays nothing.
    std::optional<dist::Work> loss_reduction;
    // Forward, backward and the update: with [train] fuse, captured at the first step and
    // replayed with fused kernels after (graph/replay.h).
    auto compute_step = [&]() -> Status {
      for (int64_t micro = 0; micro < c.grad_accum_steps; ++micro) {
        // Inner micro-steps only accumulate gradients; the last one synchronises the ranks.
        if (data_parallel_) data_parallel_->set_sync(micro + 1 == c.grad_accum_steps);
        TESSEL_ASSIGN_OR_RETURN(Batch batch, train_batches_->next());
        const Clock::time_point compute_start = Clock::now();
        TESSEL_ASSIGN_OR_RETURN(Tensor x, batch.inputs.to(device_));
        TESSEL_ASSIGN_OR_RETURN(Tensor y, batch.targets.to(device_));
        // Mixed precision: the gemm ops compute in 16 bits, the rest in f32 (autocast.h).
        autograd::Autocast autocast(c.compute_dtype());
        TESSEL_ASSIGN_OR_RETURN(Variable logits, (*model_)(Variable(x)));
        TESSEL_ASSIGN_OR_RETURN(Variable loss, training_loss(logits, Variable(y)));
        // The step's gradient is the mean over its micro-batches; fp16 backward starts from
        // scale * loss.
        const double seed_value =
            (grad_scaler_ ? grad_scaler_->scale() : 1.0) / double(c.grad_accum_steps);
        TESSEL_ASSIGN_OR_RETURN(Tensor seed,
                                Tensor::full(loss.shape(), seed_value, DType::kF32, device_));
        TESSEL_TRY(loss.backward(seed));
        compute_s += seconds_since(compute_start);
        // Synchronised batch norm waits for the slowest rank at every layer: not this rank's work.
        if (batch_norm_sync_) compute_s -= batch_norm_sync_->take_waited_s();
        if (host_params_) {
          TESSEL_TRY(data_parallel_->finish_backward_from(*params_));
        } else if (data_parallel_) {
          TESSEL_TRY(data_parallel_->finish_backward());
        }
        TESSEL_ASSIGN_OR_RETURN(double micro_loss, scalar_of(loss.data()));
        loss_value += micro_loss / double(c.grad_accum_steps);
      }
      // Uneven shares: a rank's mean loss counts by its rows (gradient_weight is 1 when even).
      if (data_parallel_) loss_value *= data_parallel_->gradient_weight();
      if (group_) {
        TESSEL_ASSIGN_OR_RETURN(
            loss_reduction,
            group_->all_reduce(&loss_value, 1, dist::DataType::kFloat64, dist::RedOp::kAvg));
      }
      // Whatever reads the gradients before the optimizer needs the ranks' averages in place.
      if (data_parallel_ && (after_backward_ || grad_scaler_ || c.clip_grad_norm > 0))
        TESSEL_TRY(data_parallel_->wait_gradients());
      if (dp_sgd_) {  // the gradients become the clipped, noised average (secure/dp_sgd.h)
        TESSEL_TRY(dp_sgd_->privatise(c.data.batch_size));
        accountant_.step(c.privacy.noise_multiplier, sample_rate_);
      }
      if (after_backward_) TESSEL_TRY(after_backward_(*params_, step_));
      bool skip_step = false;
      if (grad_scaler_) {
        TESSEL_ASSIGN_OR_RETURN(bool found_inf_here, grad_scaler_->unscale(local_gradients()));
        TESSEL_ASSIGN_OR_RETURN(skip_step, any_rank_found_inf(found_inf_here));
      }
      // A bad number stops the run before it reaches the weights (under the loss scaler, an inf or
      // NaN gradient skips the step instead): the last checkpoint stays the last good one. In a
      // data-parallel job the check waits for the ranks' mean loss (below), so that every rank
      // stops at the same step.
      if (!grad_scaler_ && !group_) TESSEL_TRY(check_finite(loss_value));
      if (!skip_step) {
        if (c.clip_grad_norm > 0 && data_parallel_) {
          TESSEL_TRY(data_parallel_->clip_grad_norm(c.clip_grad_norm));
        } else if (c.clip_grad_norm > 0) {
          TESSEL_TRY(optim::clip_grad_norm(*params_, c.clip_grad_norm));
        }
        mutable_optimizer().set_lr(lr);
        TESSEL_TRY(mutable_optimizer().step());
      } else if (data_parallel_) {
        TESSEL_TRY(data_parallel_->skip_step());
      }
      if (grad_scaler_) grad_scaler_->update(skip_step);
      return ok_status();
    };
    if (fused_) {
      const bool first = fused_->graph() == nullptr;
      TESSEL_TRY(fused_->run(compute_step));
      if (first && options_.dump_graph) {
        std::fprintf(options_.dump_graph, "--- the step's graph (before fusion) ---\n%s%s",
                     graph::profile_string(*fused_->graph()).c_str(),
                     graph::to_string(*fused_->graph()).c_str());
        std::fprintf(options_.dump_graph, "--- after fusion: %zu groups ---\n%s",
                     fused_->plan()->groups.size(),
                     graph::to_string(*fused_->graph(), &fused_->plan()->group_of).c_str());
        for (size_t g = 0; g < fused_->plan()->groups.size(); ++g)
          std::fprintf(options_.dump_graph, "group g%zu:\n%s", g,
                       fused_->plan()->groups[g].source.c_str());
      }
    } else {
      TESSEL_TRY(compute_step());
    }
    if (loss_reduction) TESSEL_TRY(loss_reduction->wait());
    if (!grad_scaler_ && group_) TESSEL_TRY(check_finite(loss_value));
    summary.losses.push_back(loss_value);
    window_loss += loss_value;
    TESSEL_TRY(params_->zero_grad());
    if (host_params_) TESSEL_TRY(host_params_->zero_grad());
    ++step_;
    ++window_steps;
    if (rebalancer_ && step_ % c.distributed.rebalance_every == 0)
      TESSEL_TRY(rebalancer_->exchange(*group_, rows * c.grad_accum_steps, compute_s).status());

    if (step_ % c.log_interval == 0 || step_ == end) {
      const double seconds = seconds_since(window_start);
      // Batches of the whole job (data_ reads global batches): every micro-step's, every rank's.
      const double per_step =
          seconds > 0 ? double(window_steps * c.grad_accum_steps) / seconds : 0.0;
      const double mean_loss = window_loss / double(window_steps);
      if (progress)
        progress->update(step_, mean_loss, lr, per_step * double(data_->throughput_per_batch()));
      nlohmann::json j = {{"step", step_},
                          {"loss", mean_loss},
                          {"lr", lr},
                          {"samples_per_s", per_step * double(c.data.batch_size * world_size())}};
      if (data_->throughput_unit() == "tokens")
        j["tokens_per_s"] = per_step * double(data_->throughput_per_batch());
      if (dp_sgd_) j["epsilon"] = accountant_.epsilon(c.privacy.delta);
      if (rebalancer_) j["shares"] = rebalancer_->shares();  // rows per rank, uneven split
      TESSEL_TRY(write_metrics(j.dump()));
      window_start = Clock::now();
      window_steps = 0;
      window_loss = 0.0;
    }
    if (c.eval_interval > 0 && step_ % c.eval_interval == 0 && step_ < end) {
      TESSEL_TRY(run_eval());
      window_start = Clock::now();  // throughput counts training only
    }
    if (!c.checkpoint_path.empty() && c.checkpoint_interval > 0 &&
        step_ % c.checkpoint_interval == 0 && step_ < end) {
      TESSEL_TRY(save_checkpoint(c.checkpoint_path));
      window_start = Clock::now();
    }
  }
  // The checkpoint first: an evaluation that fails (out of memory, a bad batch) loses no training.
  if (!c.checkpoint_path.empty()) {
    TESSEL_TRY(save_checkpoint(c.checkpoint_path));
    say(fmt::format("checkpoint: {} (step {})", c.checkpoint_path, step_));
  }
  if (options_.evaluate_at_end) {
    TESSEL_ASSIGN_OR_RETURN(summary.final_eval, run_eval());
  }
  if (progress) progress->finish();
  if (data_->text() && c.sample.tokens > 0 && dynamic_cast<nn::GPT*>(model_.get())) {
    TESSEL_ASSIGN_OR_RETURN(summary.sample, sample(c.sample));
    if (options_.progress) {
      fmt::print(options_.progress, "sample ({} tokens, temperature {}, top_k {}):\n{}\n",
                 c.sample.tokens, c.sample.temperature, c.sample.top_k, summary.sample);
      std::fflush(options_.progress);
    }
  }
  summary.last_step = step_;
  summary.seconds = seconds_since(start);
  if (dp_sgd_) summary.epsilon = accountant_.epsilon(c.privacy.delta);
  return summary;
}

Expected<autograd::Variable> training_loss(const autograd::Variable& logits,
                                           const autograd::Variable& targets) {
  const Shape& s = logits.shape();
  if (s.size() == 2) return autograd::cross_entropy(logits, targets);
  const int64_t rows = shape_numel(targets.shape());
  TESSEL_ASSIGN_OR_RETURN(autograd::Variable flat_logits,
                          autograd::reshape(logits, {rows, s.back()}));
  TESSEL_ASSIGN_OR_RETURN(autograd::Variable flat_targets, autograd::reshape(targets, {rows}));
  return autograd::cross_entropy(flat_logits, flat_targets);
}

}  // namespace tessel::train
