// A training run as a TOML file describes it, read and checked in one place: every unknown key
// and every wrong value is an error naming the file, the key and what is allowed.
//
//   seed = 1
//   device = "auto"                   # "auto" | "cpu" | "opencl:N" | "cuda:N"  (auto: cpu today)
//   [model]     name = "cnn"          # model_registry.h: "mlp" (hidden = [...]) | "cnn" | ...
//   [data]      name = "fashion_mnist"   path = "/usr/share/datasets/fashion-mnist"
//               batch_size = 128   eval_batch_size = 1000
//   [optimizer] name = "adamw"  lr = 2e-3  weight_decay = 0.01  betas = [0.9, 0.999]  eps = 1e-8
//               (sgd: lr, momentum, dampening, nesterov, weight_decay)
//   [schedule]  name = "cosine"   # constant | cosine | warmup_constant | warmup_cosine
//               warmup_steps = 100   min_lr = 0.0
//   [train]     epochs = 2  (or steps = N)   clip_grad_norm = 1.0 (0: off)   log_interval = 50
//               eval_interval = 0 (0: at the end only)   checkpoint_interval = 0 (0: at the end)
//               checkpoint_path = "runs/x/checkpoint.safetensors" ("" : none)
//               metrics_path = "runs/x/metrics.jsonl" ("": none)
//               grad_accum_steps = 1   (micro-batches of batch_size per optimizer step)
//   [distributed] backend = "shm"     # shm | mpi | nccl; ranks from `tessel launch` or mpirun
//               zero_stage = 0  (0: DDP; 1, 2, 3: ZeRO)   bucket_cap_mb = 25.0
//               first_bucket_mb = 1.0   overlap = true
//               (batch_size is per rank: a step takes batch_size x ranks x grad_accum_steps)
//
// Only [model] and [data] are required; everything else has the defaults shown.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "optim/optimizer.h"
#include "optim/schedule.h"
#include "support/config.h"

namespace tessel::train {

struct DataConfig {
  std::string name;  // "fashion_mnist" | "mnist"
  std::string path;
  int64_t batch_size = 128;
  int64_t eval_batch_size = 1000;
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
};

struct TrainConfig {
  std::string source;  // the file, for messages
  uint64_t seed = 0;
  std::string device = "auto";
  std::optional<Config> model;  // the [model] table, read by the model's factory
  DataConfig data;
  OptimizerConfig optimizer;
  // total_steps is filled in by the trainer once the run's length is known.
  optim::Schedule schedule;
  int64_t steps = 0;   // exactly one of steps and epochs is > 0
  int64_t epochs = 0;
  double clip_grad_norm = 0.0;
  int64_t log_interval = 50;
  int64_t eval_interval = 0;
  int64_t checkpoint_interval = 0;
  std::string checkpoint_path;
  std::string metrics_path;
  int64_t grad_accum_steps = 1;
  DistributedConfig distributed;
};

Expected<TrainConfig> parse_train_config(const Config& config);
Expected<TrainConfig> load_train_config(const std::string& path);

// "auto" -> the device a run uses ("cpu" until the op library launches on GPUs); other names
// are checked to be "cpu", "opencl:N" or "cuda:N".
Expected<std::string> resolve_device_name(const std::string& name, const std::string& source);

}  // namespace tessel::train
