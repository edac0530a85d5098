// Reading a training config (see train_config.h).
#include "train/train_config.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <optional>
#include <regex>

#include "data/mnist.h"
#include "ops/kernel_cache.h"
#include "train/config_keys.h"

namespace tessel::train {
namespace {

Expected<Config> optional_table(const Config& config, const std::string& key) {
  if (!config.has(key)) return Config::parse("", config.source());
  return config.table(key);
}

Status parse_optimizer(const Config& cfg, OptimizerConfig& out) {
  TESSEL_ASSIGN_OR_RETURN(Config t, optional_table(cfg, "optimizer"));
  TESSEL_ASSIGN_OR_RETURN(out.name, get_choice(t, "name", {"adamw", "sgd"}, "adamw"));
  if (out.name == "adamw") {
    TESSEL_TRY(t.check_keys({"name", "lr", "betas", "eps", "weight_decay"}));
    auto& o = out.adamw;
    TESSEL_ASSIGN_OR_RETURN(o.lr, get_at_least(t, "lr", o.lr, 0.0));
    TESSEL_ASSIGN_OR_RETURN(o.eps, get_at_least(t, "eps", o.eps, 0.0));
    TESSEL_ASSIGN_OR_RETURN(o.weight_decay, get_at_least(t, "weight_decay", o.weight_decay, 0.0));
    TESSEL_ASSIGN_OR_RETURN(std::vector<double> betas,
                            t.get_or<std::vector<double>>("betas", {o.beta1, o.beta2}));
    if (betas.size() != 2 || !(betas[0] >= 0 && betas[0] < 1) || !(betas[1] >= 0 && betas[1] < 1))
      return invalid_argument("{}: key 'optimizer.betas': expected two numbers in [0, 1)",
                              t.source());
    o.beta1 = betas[0];
    o.beta2 = betas[1];
  } else {
    TESSEL_TRY(t.check_keys({"name", "lr", "momentum", "dampening", "nesterov", "weight_decay"}));
    auto& o = out.sgd;
    TESSEL_ASSIGN_OR_RETURN(o.lr, get_at_least(t, "lr", o.lr, 0.0));
    TESSEL_ASSIGN_OR_RETURN(o.momentum, get_at_least(t, "momentum", o.momentum, 0.0));
    TESSEL_ASSIGN_OR_RETURN(o.dampening, get_at_least(t, "dampening", o.dampening, 0.0));
    TESSEL_ASSIGN_OR_RETURN(o.weight_decay, get_at_least(t, "weight_decay", o.weight_decay, 0.0));
    TESSEL_ASSIGN_OR_RETURN(o.nesterov, t.get_or<bool>("nesterov", o.nesterov));
  }
  return ok_status();
}

Status parse_schedule(const Config& cfg, double lr, optim::Schedule& out) {
  TESSEL_ASSIGN_OR_RETURN(Config t, optional_table(cfg, "schedule"));
  TESSEL_TRY(t.check_keys({"name", "warmup_steps", "min_lr"}));
  TESSEL_ASSIGN_OR_RETURN(
      std::string name,
      get_choice(t, "name", {"constant", "cosine", "warmup_constant", "warmup_cosine"},
                 "constant"));
  TESSEL_ASSIGN_OR_RETURN(out.kind, optim::parse_schedule_kind(name));
  out.base_lr = lr;
  TESSEL_ASSIGN_OR_RETURN(out.min_lr, get_at_least(t, "min_lr", 0.0, 0.0));
  if (out.min_lr > lr)
    return invalid_argument("{}: key 'schedule.min_lr': must be <= the optimizer's lr ({}), got {}",
                            t.source(), lr, out.min_lr);
  const bool warmup = out.kind == optim::ScheduleKind::kWarmupConstant ||
                      out.kind == optim::ScheduleKind::kWarmupCosine;
  if (!warmup && t.has("warmup_steps"))
    return invalid_argument(
        "{}: key 'schedule.warmup_steps' needs name = 'warmup_constant' or "
        "'warmup_cosine', not '{}'",
        t.source(), name);
  TESSEL_ASSIGN_OR_RETURN(
      out.warmup_steps, get_at_least<int64_t>(t, "warmup_steps", warmup ? 100 : 0, warmup ? 1 : 0));
  return ok_status();
}

Status parse_distributed(const Config& cfg, TrainConfig& out) {
  DistributedConfig& d = out.distributed;
  d.enabled = cfg.has("distributed");
  if (!d.enabled) return ok_status();
  TESSEL_ASSIGN_OR_RETURN(Config t, cfg.table("distributed"));
  TESSEL_TRY(
      t.check_keys({"backend", "zero_stage", "bucket_cap_mb", "first_bucket_mb", "overlap", "split",
                    "rebalance_every", "rebalance_hysteresis", "sync_batchnorm", "devices"}));
  TESSEL_ASSIGN_OR_RETURN(d.backend, get_choice(t, "backend", {"shm", "mpi", "nccl"}, "shm"));
  TESSEL_ASSIGN_OR_RETURN(int64_t stage, get_at_least<int64_t>(t, "zero_stage", 0, 0));
  if (stage > 3)
    return invalid_argument("{}: key 'distributed.zero_stage': must be 0 (DDP), 1, 2 or 3, got {}",
                            t.source(), stage);
  d.zero_stage = int(stage);
  TESSEL_ASSIGN_OR_RETURN(d.bucket_cap_mb,
                          get_at_least(t, "bucket_cap_mb", d.bucket_cap_mb, 0.001));
  TESSEL_ASSIGN_OR_RETURN(d.first_bucket_mb,
                          get_at_least(t, "first_bucket_mb", d.first_bucket_mb, 0.001));
  TESSEL_ASSIGN_OR_RETURN(d.overlap, t.get_or<bool>("overlap", d.overlap));
  TESSEL_ASSIGN_OR_RETURN(d.sync_batchnorm, t.get_or<bool>("sync_batchnorm", d.sync_batchnorm));
  TESSEL_ASSIGN_OR_RETURN(std::string split, get_choice(t, "split", {"even", "uneven"}, "even"));
  d.uneven = split == "uneven";
  for (const char* key : {"rebalance_every", "rebalance_hysteresis"})
    if (!d.uneven && t.has(key))
      return invalid_argument("{}: key 'distributed.{}' needs split = 'uneven'", t.source(), key);
  TESSEL_ASSIGN_OR_RETURN(d.rebalance_every,
                          get_at_least<int64_t>(t, "rebalance_every", d.rebalance_every, 1));
  TESSEL_ASSIGN_OR_RETURN(d.rebalance_hysteresis,
                          get_at_least(t, "rebalance_hysteresis", d.rebalance_hysteresis, 0.0));
  if (d.rebalance_hysteresis >= 1.0)
    return invalid_argument("{}: key 'distributed.rebalance_hysteresis': must be below 1, got {}",
                            t.source(), d.rebalance_hysteresis);
  TESSEL_ASSIGN_OR_RETURN(d.devices, t.get_or<std::vector<std::string>>("devices", {}));
  if (d.devices.empty()) return ok_status();
  // Where each rank computes is said once: the per-rank list replaces [target]'s device.
  if (out.target.device != "auto")
    return invalid_argument(
        "{}: key 'distributed.devices' gives each rank its device; remove '{}' = '{}' (the "
        "[target.<kind>] options still apply)",
        t.source(), out.target.key, out.target.device);
  // Under ZeRO-3 the copy a device rank takes before forward, evaluation and sampling is a
  // gather, a collective the other ranks would have to meet at the same points: not wired yet.
  if (d.zero_stage == 3)
    return invalid_argument(
        "{}: key 'distributed.devices' works with zero_stage 0, 1 or 2, not 3 (the library's "
        "DataParallel::copy_values_to does; the trainer does not yet)",
        t.source());
  return ok_status();
}

Status parse_sample(const Config& cfg, TrainConfig& out) {
  if (!cfg.has("sample")) return ok_status();
  if (out.data.name != "text")
    return invalid_argument("{}: table [sample] needs text data (data.name = 'text'), not '{}'",
                            out.source, out.data.name);
  TESSEL_ASSIGN_OR_RETURN(Config t, cfg.table("sample"));
  TESSEL_TRY(t.check_keys({"tokens", "temperature", "top_k", "prompt"}));
  SampleConfig& s = out.sample;
  TESSEL_ASSIGN_OR_RETURN(s.tokens, get_at_least<int64_t>(t, "tokens", s.tokens, 0));
  TESSEL_ASSIGN_OR_RETURN(s.top_k, get_at_least<int64_t>(t, "top_k", s.top_k, 0));
  TESSEL_ASSIGN_OR_RETURN(s.temperature, t.get_or<double>("temperature", s.temperature));
  if (!(s.temperature > 0.0))
    return invalid_argument("{}: key 'sample.temperature': must be > 0, got {}", t.source(),
                            s.temperature);
  TESSEL_ASSIGN_OR_RETURN(s.prompt, t.get_or<std::string>("prompt", s.prompt));
  if (s.prompt.empty())
    return invalid_argument("{}: key 'sample.prompt': must not be empty (\"\\n\" starts a line)",
                            t.source());
  return ok_status();
}

Status parse_checkpoint(const Config& cfg, CheckpointConfig& out) {
  if (!cfg.has("checkpoint")) return ok_status();
  TESSEL_ASSIGN_OR_RETURN(Config t, cfg.table("checkpoint"));
  TESSEL_TRY(t.check_keys({"encrypt", "key_file", "key_env"}));
  TESSEL_ASSIGN_OR_RETURN(out.encrypt, t.get_or<bool>("encrypt", false));
  TESSEL_ASSIGN_OR_RETURN(out.key_file, t.get_or<std::string>("key_file", ""));
  TESSEL_ASSIGN_OR_RETURN(out.key_env, t.get_or<std::string>("key_env", ""));
  if (out.encrypt && out.key_file.empty() == out.key_env.empty())
    return invalid_argument(
        "{}: key 'checkpoint.encrypt' = true needs exactly one of 'checkpoint.key_file' (a file "
        "holding the key) and 'checkpoint.key_env' (an environment variable holding it)",
        t.source());
  if (!out.encrypt && (!out.key_file.empty() || !out.key_env.empty()))
    return invalid_argument("{}: a checkpoint key is given but 'checkpoint.encrypt' is not true",
                            t.source());
  return ok_status();
}

Status parse_privacy(const Config& cfg, TrainConfig& out) {
  PrivacyConfig& p = out.privacy;
  p.enabled = cfg.has("privacy");
  if (!p.enabled) return ok_status();
  TESSEL_ASSIGN_OR_RETURN(Config t, cfg.table("privacy"));
  TESSEL_TRY(
      t.check_keys({"noise_multiplier", "max_grad_norm", "delta", "target_epsilon", "seed"}));
  TESSEL_ASSIGN_OR_RETURN(p.noise_multiplier, t.get<double>("noise_multiplier"));
  if (!(p.noise_multiplier > 0))
    return invalid_argument("{}: key 'privacy.noise_multiplier': must be > 0, got {}", t.source(),
                            p.noise_multiplier);
  TESSEL_ASSIGN_OR_RETURN(p.max_grad_norm, t.get_or<double>("max_grad_norm", p.max_grad_norm));
  if (!(p.max_grad_norm > 0))
    return invalid_argument("{}: key 'privacy.max_grad_norm': must be > 0, got {}", t.source(),
                            p.max_grad_norm);
  TESSEL_ASSIGN_OR_RETURN(p.delta, t.get_or<double>("delta", p.delta));
  if (!(p.delta > 0 && p.delta < 1))
    return invalid_argument("{}: key 'privacy.delta': must be in (0, 1), got {}", t.source(),
                            p.delta);
  TESSEL_ASSIGN_OR_RETURN(p.target_epsilon, get_at_least(t, "target_epsilon", 0.0, 0.0));
  TESSEL_ASSIGN_OR_RETURN(p.seed, get_at_least<int64_t>(t, "seed", -1, -1));
  const char* conflict = cfg.has("distributed")      ? "[distributed]"
                         : out.precision != "fp32"   ? "train.precision other than fp32"
                         : out.grad_accum_steps != 1 ? "train.grad_accum_steps > 1"
                         : out.clip_grad_norm > 0
                             ? "train.clip_grad_norm (DP-SGD clips each example)"
                         : out.data.name == "text" ? "text data (no epochs to sample from)"
                                                   : nullptr;
  if (conflict) return invalid_argument("{}: [privacy] does not go with {}", t.source(), conflict);
  return ok_status();
}

Status parse_federated(const Config& cfg, TrainConfig& out) {
  FederatedConfig& f = out.federated;
  f.enabled = cfg.has("federated");
  if (!f.enabled) return ok_status();
  TESSEL_ASSIGN_OR_RETURN(Config t, cfg.table("federated"));
  TESSEL_TRY(
      t.check_keys({"local_steps", "secure", "key_file", "key_env", "modulus_bits", "backend"}));
  TESSEL_ASSIGN_OR_RETURN(f.local_steps, get_at_least<int64_t>(t, "local_steps", 50, 1));
  TESSEL_ASSIGN_OR_RETURN(f.secure, t.get_or<bool>("secure", true));
  TESSEL_ASSIGN_OR_RETURN(f.key_file, t.get_or<std::string>("key_file", ""));
  TESSEL_ASSIGN_OR_RETURN(f.key_env, t.get_or<std::string>("key_env", ""));
  TESSEL_ASSIGN_OR_RETURN(f.modulus_bits, get_at_least<int64_t>(t, "modulus_bits", 2048, 2048));
  if (f.modulus_bits % 64 != 0 || f.modulus_bits > 8192)
    return invalid_argument(
        "{}: key 'federated.modulus_bits': a multiple of 64 in [2048, 8192], "
        "got {}",
        t.source(), f.modulus_bits);
  TESSEL_ASSIGN_OR_RETURN(f.backend, get_choice(t, "backend", {"shm", "mpi"}, "shm"));
  if (f.secure && f.key_file.empty() == f.key_env.empty())
    return invalid_argument(
        "{}: [federated] secure = true needs exactly one of 'federated.key_file' and "
        "'federated.key_env' (the owners' shared secret)",
        t.source());
  if (out.steps == 0 || out.steps % f.local_steps != 0)
    return invalid_argument(
        "{}: [federated] needs 'train.steps', a multiple of "
        "'federated.local_steps' ({})",
        t.source(), f.local_steps);
  if (cfg.has("distributed"))
    return invalid_argument("{}: [federated] and [distributed] do not go together", t.source());
  return ok_status();
}

}  // namespace

Expected<ops::TargetChoice> resolve_train_target(const TrainConfig& config) {
  return ops::resolve_target(config.target, ops::launches_on);
}

Expected<TrainConfig> parse_train_config(const Config& cfg) {
  TrainConfig out;
  out.source = cfg.source();
  TESSEL_TRY(
      cfg.check_keys({"seed", "device", "target", "model", "data", "optimizer", "schedule", "train",
                      "sample", "distributed", "checkpoint", "federated", "privacy"}));
  TESSEL_ASSIGN_OR_RETURN(int64_t seed, get_at_least<int64_t>(cfg, "seed", 0, 0));
  out.seed = static_cast<uint64_t>(seed);
  TESSEL_ASSIGN_OR_RETURN(out.target, ops::parse_target_setting(cfg));

  if (!cfg.has("model")) return invalid_argument("{}: missing table [model]", out.source);
  TESSEL_ASSIGN_OR_RETURN(out.model, cfg.table("model"));
  TESSEL_TRY(out.model->get<std::string>("name"));

  if (!cfg.has("data")) return invalid_argument("{}: missing table [data]", out.source);
  TESSEL_ASSIGN_OR_RETURN(Config data, cfg.table("data"));
  TESSEL_ASSIGN_OR_RETURN(out.data, parse_data_config(data));

  TESSEL_TRY(parse_optimizer(cfg, out.optimizer));
  TESSEL_TRY(parse_schedule(cfg, out.optimizer.lr(), out.schedule));

  TESSEL_ASSIGN_OR_RETURN(Config t, optional_table(cfg, "train"));
  TESSEL_TRY(t.check_keys({"steps", "epochs", "clip_grad_norm", "log_interval", "eval_interval",
                           "checkpoint_interval", "checkpoint_path", "metrics_path",
                           "grad_accum_steps", "precision", "memory_limit", "fuse"}));
  TESSEL_ASSIGN_OR_RETURN(out.steps, get_at_least<int64_t>(t, "steps", 0, 1));
  TESSEL_ASSIGN_OR_RETURN(out.epochs, get_at_least<int64_t>(t, "epochs", 0, 1));
  if (t.has("steps") == t.has("epochs"))
    return invalid_argument("{}: [train] needs exactly one of 'train.steps' and 'train.epochs'",
                            out.source);
  if (out.epochs > 0 && out.data.name == "text")
    return invalid_argument(
        "{}: key 'train.epochs': text data is drawn as random windows and has "
        "no epochs; use 'train.steps'",
        out.source);
  TESSEL_ASSIGN_OR_RETURN(out.clip_grad_norm, get_at_least(t, "clip_grad_norm", 0.0, 0.0));
  TESSEL_ASSIGN_OR_RETURN(out.log_interval, get_at_least<int64_t>(t, "log_interval", 50, 1));
  TESSEL_ASSIGN_OR_RETURN(out.eval_interval, get_at_least<int64_t>(t, "eval_interval", 0, 0));
  TESSEL_ASSIGN_OR_RETURN(out.checkpoint_interval,
                          get_at_least<int64_t>(t, "checkpoint_interval", 0, 0));
  TESSEL_ASSIGN_OR_RETURN(out.checkpoint_path, t.get_or<std::string>("checkpoint_path", ""));
  TESSEL_ASSIGN_OR_RETURN(out.metrics_path, t.get_or<std::string>("metrics_path", ""));
  TESSEL_ASSIGN_OR_RETURN(out.grad_accum_steps, get_at_least<int64_t>(t, "grad_accum_steps", 1, 1));
  TESSEL_ASSIGN_OR_RETURN(out.precision,
                          get_choice(t, "precision", {"fp32", "bf16", "fp16"}, "fp32"));
  TESSEL_ASSIGN_OR_RETURN(std::string limit, t.get_or<std::string>("memory_limit", ""));
  if (limit == "cgroup") {
    out.memory_limit = -1;
  } else if (!limit.empty()) {
    Expected<int64_t> bytes = parse_byte_size(limit);
    if (!bytes.ok())
      return invalid_argument("{}: key 'train.memory_limit': {}", t.source(),
                              bytes.status().message());
    out.memory_limit = *bytes;
  }
  TESSEL_ASSIGN_OR_RETURN(out.fuse, t.get_or<bool>("fuse", false));
  TESSEL_TRY(parse_sample(cfg, out));
  TESSEL_TRY(parse_distributed(cfg, out));
  TESSEL_TRY(parse_checkpoint(cfg, out.checkpoint));
  TESSEL_TRY(parse_federated(cfg, out));
  TESSEL_TRY(parse_privacy(cfg, out));
  TESSEL_TRY(check_fuse(out));
  return out;
}

Status check_fuse(const TrainConfig& c) {
  if (!c.fuse) return ok_status();
  // A fused step's replay sees kernel launches only: the gradient all-reduce writes the
  // buckets from the communication thread while backward runs, and DP-SGD clips and noises
  // gradients outside them, so neither goes with it yet.
  const char* conflict = c.distributed.enabled ? "[distributed]"
                         : c.privacy.enabled   ? "[privacy]"
                                               : nullptr;
  if (!conflict) return ok_status();
  return invalid_argument(
      "{}: key 'train.fuse' (or --fuse): not yet with {}: its replay sees kernel launches only, "
      "and {} writes gradients outside them",
      c.source, conflict, conflict);
}

Expected<int64_t> parse_byte_size(const std::string& text) {
  size_t used = 0;
  double number = 0;
  try {
    number = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  std::string unit = text.substr(used);
  unit.erase(0, unit.find_first_not_of(' '));
  static const std::pair<const char*, double> kUnits[] = {{"", 1},
                                                          {"B", 1},
                                                          {"KB", 1e3},
                                                          {"MB", 1e6},
                                                          {"GB", 1e9},
                                                          {"TB", 1e12},
                                                          {"KiB", 1024.0},
                                                          {"MiB", 1048576.0},
                                                          {"GiB", 1073741824.0},
                                                          {"TiB", 1099511627776.0}};
  for (const auto& [name, scale] : kUnits)
    if (used > 0 && unit == name && number > 0 && std::isfinite(number) && number * scale < 9e18)
      return int64_t(number * scale);
  return invalid_argument(
      "'{}' is not a size: a positive number of bytes, or one with B, KB, MB, GB, TB, KiB, MiB, "
      "GiB or TiB (\"6GiB\"), or \"cgroup\" (the cgroup's memory limit)",
      text);
}

DType TrainConfig::compute_dtype() const {
  if (precision == "bf16") return DType::kBF16;
  if (precision == "fp16") return DType::kF16;
  return DType::kF32;
}

Expected<TrainConfig> load_train_config(const std::string& path) {
  TESSEL_ASSIGN_OR_RETURN(Config cfg, Config::load(path));
  return parse_train_config(cfg);
}

}  // namespace tessel::train
