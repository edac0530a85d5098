// A training run as a TOML file describes it, read and checked in one place: every unknown key
// and every wrong value is an error naming the file, the key and what is allowed.
//
//   seed = 1
//   [target]    device = "auto"   # "auto" | "cpu" | "opencl:N" | "cuda:N", with per-kind options
//               [target.opencl] threads = 64 ... (ops/target_config.h; the top-level `device`
//               key of older configs is the same setting)
//   [model]     name = "cnn"          # model_registry.h: "mlp" (hidden = [...]) | "cnn" | ...
//   [data]      name = "fashion_mnist"   path = "/usr/share/datasets/fashion-mnist"
//               batch_size = 128   eval_batch_size = 1000   (text, synthetic: data_source.h)
//   [optimizer] name = "adamw"  lr = 2e-3  weight_decay = 0.01  betas = [0.9, 0.999]  eps = 1e-8
//               (sgd: lr, momentum, dampening, nesterov, weight_decay)
//   [schedule]  name = "cosine"   # constant | cosine | warmup_constant | warmup_cosine
//               warmup_steps = 100   min_lr = 0.0
//   [train]     epochs = 2  (or steps = N)   clip_grad_norm = 1.0 (0: off)   log_interval = 50
//               eval_interval = 0 (0: at the end only)   checkpoint_interval = 0 (0: at the end)
//               checkpoint_path = "runs/x/checkpoint.safetensors" ("" : none)
//               metrics_path = "runs/x/metrics.jsonl" ("": none)
//               grad_accum_steps = 1   (micro-batches of batch_size per optimizer step)
//               memory_limit = "" | "6GiB" | "cgroup"  (checked before the first step against
//               the memory plan's predicted peak: a run that will not fit fails at start with
//               the plan's breakdown; plan/memory_plan.h)
//               precision = "fp32" | "bf16" | "fp16"  (matmul/linear/conv in 16 bits, everything
//               else and the master weights and optimizer state in f32; fp16 adds dynamic loss
//               scaling; docs/DESIGN.md, "Mixed precision")
//               fuse = false  (true: the first step is captured as a graph of launches and later
//               steps replay it with element-wise chains fused into generated kernels;
//               docs/DESIGN.md, "Graph capture and fusion")
//   [sample]    tokens = 300  temperature = 0.8  top_k = 0 (0: all)  prompt = "\n"
//               (text data only: the text a language model writes at the end of the run)
//   [distributed] backend = "shm"     # shm | mpi | nccl; ranks from `tessel launch` or mpirun
//               zero_stage = 0  (0: DDP; 1, 2, 3: ZeRO)   bucket_cap_mb = 25.0
//               first_bucket_mb = 1.0   overlap = true
//               split = "even" | "uneven"   (uneven: each rank's rows of the global batch follow
//               its measured throughput, parallel/rebalance.h)   rebalance_every = 10 (steps
//               between measurements)   rebalance_hysteresis = 0.05 (a move must shorten the
//               predicted step by more than this fraction)   sync_batchnorm = false (true:
//               BatchNorm2d layers normalise with the whole global batch's statistics, as
//               torch.nn.SyncBatchNorm.convert_sync_batchnorm; parallel/sync_batch_norm.h)
//               (batch_size is per rank: a step takes batch_size x ranks x grad_accum_steps;
//               clip_grad_norm and checkpoints work in every mode: the norm is of the whole
//               gradient, the checkpoint is the single-process file, gathered from the shards)
//   [checkpoint] encrypt = false   key_file = "run.key" | key_env = "TESSEL_CHECKPOINT_KEY"
//               (encrypt = true: checkpoints are written and read encrypted and authenticated,
//               secure/encrypted_file.h; the key comes from a file or an environment variable
//               named here, exactly one of them, never from the config itself)
//   [privacy]   noise_multiplier = 1.0   max_grad_norm = 1.0   delta = 1e-5
//               target_epsilon = 0 (0: none)   seed = -1 (-1: fresh noise)   (DP-SGD: image
//               data, fp32, one process, grad_accum_steps = 1, no clip_grad_norm; secure/dp_sgd.h)
//   [federated] local_steps = 50  secure = true  key_file = "owners.key" | key_env = "..."
//               modulus_bits = 2048  backend = "shm"   (train/federated.h)
//
// Only [model] and [data] are required; everything else has the defaults shown.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "ops/target_config.h"
#include "optim/optimizer.h"
#include "optim/schedule.h"
#include "support/config.h"
#include "train/data_source.h"

namespace tessel::train {

// Text sampled from a language model at the end of a run (see Trainer::sample).
struct SampleConfig {
  int64_t tokens = 300;      // 0: no sample
  double temperature = 0.8;  // logits / temperature before the softmax
  int64_t top_k = 0;         // sample among the k likeliest tokens; 0: all of them
  std::string prompt = "\n";
};

struct OptimizerConfig {
  std::string name = "adamw";  // "adamw" | "sgd"
  optim::AdamWOptions adamw;
  optim::SgdOptions sgd;
  double lr() const { return name == "sgd" ? sgd.lr : adamw.lr; }
};

// The [distributed] table (parallel/data_parallel.h); absent: one process, no communication.
struct DistributedConfig {
  bool enabled = false;
  std::string backend = "shm";
  int zero_stage = 0;
  double bucket_cap_mb = 25.0;
  double first_bucket_mb = 1.0;
  bool overlap = true;
  bool uneven = false;  // split = "uneven"
  int64_t rebalance_every = 10;
  double rebalance_hysteresis = 0.05;
  bool sync_batchnorm = false;
  // One device id per rank ("cpu", "opencl:0", ...); empty: every rank on [target]'s device. A
  // rank on another device than the CPU computes on a copy of the model there (trainer.h).
  std::vector<std::string> devices;
};

// The [federated] table (train/federated.h); absent: not federated.
struct FederatedConfig {
  bool enabled = false;
  int64_t local_steps = 50;
  bool secure = true;    // Paillier aggregation; false: the plaintext baseline
  std::string key_file;  // the owners' shared secret (secure only): one of these two
  std::string key_env;
  int64_t modulus_bits = 2048;
  std::string backend = "shm";
};

// The [privacy] table: DP-SGD (secure/dp_sgd.h) with an RDP accountant (rdp_accountant.h).
struct PrivacyConfig {
  bool enabled = false;
  double noise_multiplier = 1.0;  // sigma: required
  double max_grad_norm = 1.0;     // C, each example's clipping norm
  double delta = 1e-5;
  double target_epsilon = 0.0;  // stop before a step would pass it; 0: no budget
  int64_t seed = -1;            // the noise's seed; -1: fresh randomness (not replayable)
};

// The [checkpoint] table: how checkpoints are protected (the path is [train] checkpoint_path).
struct CheckpointConfig {
  bool encrypt = false;
  std::string key_file;  // one of these two when encrypt
  std::string key_env;
};

struct TrainConfig {
  std::string source;  // the file, for messages
  uint64_t seed = 0;
  ops::TargetSetting target;    // [target]: the device and the compiler's options for it
  std::optional<Config> model;  // the [model] table, read by the model's factory
  DataConfig data;
  SampleConfig sample;
  OptimizerConfig optimizer;
  // total_steps is filled in by the trainer once the run's length is known.
  optim::Schedule schedule;
  int64_t steps = 0;  // exactly one of steps and epochs is > 0
  int64_t epochs = 0;
  double clip_grad_norm = 0.0;
  int64_t log_interval = 50;
  int64_t eval_interval = 0;
  int64_t checkpoint_interval = 0;
  std::string checkpoint_path;
  CheckpointConfig checkpoint;
  FederatedConfig federated;
  PrivacyConfig privacy;
  std::string metrics_path;
  int64_t grad_accum_steps = 1;
  DistributedConfig distributed;
  std::string precision = "fp32";  // "fp32" | "bf16" | "fp16"
  int64_t memory_limit = 0;        // bytes; 0: none; -1: the cgroup's limit
  bool fuse = false;  // capture the step once, replay it with fused kernels (graph/replay.h)
  // The dtype the gemm ops compute in (autograd/autocast.h): f32, bf16 or f16.
  DType compute_dtype() const;
};

Expected<TrainConfig> parse_train_config(const Config& config);
// Whether `fuse` goes with the rest of the config (parse_train_config checks it; a caller that
// sets fuse afterwards, as `tessel train --fuse` does, checks again).
Status check_fuse(const TrainConfig& config);
// "6GiB", "512MB", "1.5 GB", "1048576" -> bytes; anything else is an error saying what is allowed.
Expected<int64_t> parse_byte_size(const std::string& text);
Expected<TrainConfig> load_train_config(const std::string& path);

// The device a run uses and the compiler's options for it: the [target] setting resolved
// (ops::resolve_target), where "auto" passes over the kinds the op library cannot launch on yet
// (ops::launches_on). A device that is not here is an error naming the key and what is missing.
Expected<ops::TargetChoice> resolve_train_target(const TrainConfig& config);

}  // namespace tessel::train
