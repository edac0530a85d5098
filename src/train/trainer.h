// The training loop of `tessel train`: builds device, model, parameters, optimizer, schedule and
// data from a TrainConfig, then runs forward, loss, backward, clipping, the optimizer step and
// the schedule, with evaluation, a progress line, JSONL metrics and checkpoints.
//
//   TESSEL_ASSIGN_OR_RETURN(TrainConfig config, load_train_config("examples/fashion_cnn.toml"));
//   TESSEL_ASSIGN_OR_RETURN(auto trainer, Trainer::create(config));
//   if (resume) TESSEL_TRY(trainer->resume("runs/cnn/checkpoint.safetensors"));
//   TESSEL_ASSIGN_OR_RETURN(RunSummary summary, trainer->run());
//
// Data comes from a DataSource (data_source.h) chosen by [data] name; the loss is the
// cross-entropy of logits [..., classes] against targets [...], so classifiers (targets [B]) and
// language models (targets [B, T]) share the loop. A language model trained on text writes a
// sample at the end ([sample]: Trainer::sample).
//
// A rank on another device ([distributed] devices = ["cpu", "opencl:0"]): DataParallel keeps the
// parameters, the collectives and the optimizer in host memory (a second instance of the model
// on the CPU holds them); the rank's model on its device takes the values before each step,
// evaluation and sample (DataParallel::copy_values_to), and its gradients go out after backward
// (finish_backward_from). Its forward + backward, copy included, is the time the uneven split
// sees, so a slower device gets a smaller share.
//
// Reproducibility: the seed fixes the initial weights (Pcg32(seed, 1)), the shuffles of every
// epoch (ImageBatches), the text windows (TextBatches), the samples and dropout's generators. A
// checkpoint holds the weights and buffers, the optimizer state and its step count, the step, the
// training data's position and the dropout generators' states, so a resumed run computes the same
// losses as one never interrupted. Metrics: one JSON object per line, {"step", "loss", "lr",
// "samples_per_s"} (text adds "tokens_per_s") every log_interval steps and {"step", "eval_loss",
// "eval_accuracy"} after each evaluation (language models: {"step", "eval_loss",
// "eval_perplexity"}); a resumed run appends.
#pragma once

#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "data/batches.h"
#include "dist/process_group.h"
#include "graph/replay.h"
#include "nn/module.h"
#include "optim/grad_scaler.h"
#include "optim/optimizer.h"
#include "parallel/data_parallel.h"
#include "parallel/rank_shard.h"
#include "parallel/rebalance.h"
#include "parallel/sync_batch_norm.h"
#include "secure/dp_sgd.h"
#include "secure/rdp_accountant.h"
#include "secure/secret_key.h"
#include "train/data_source.h"
#include "train/train_config.h"

namespace tessel::train {

struct Evaluation {
  bool classification = true;  // false for language models: no accuracy, a perplexity
  double loss = 0.0;      // mean cross-entropy over the evaluation targets (examples or tokens)
  double accuracy = 0.0;  // classification: fraction of examples whose largest logit is the label
  int64_t correct = 0, total = 0;  // total: targets evaluated
  double perplexity() const;       // exp(loss)
};

struct RunSummary {
  int64_t first_step = 0;       // the step the run started from (non-zero after resume)
  int64_t last_step = 0;        // the step it reached
  std::vector<double> losses;   // the training loss of every step run
  Evaluation final_eval;        // after the last step
  std::string sample;           // the text written at the end (language models on text)
  double seconds = 0.0;         // wall time of the loop, evaluations included
  double epsilon = 0.0;         // [privacy]: the privacy spent so far, at the config's delta
  bool budget_reached = false;  // [privacy]: stopped before a step would pass target_epsilon
};

struct TrainerOptions {
  std::FILE* progress = stdout;  // nullptr: silent
  int interactive = -1;          // redraw in place: -1 = when `progress` is a terminal
  // With a [distributed] table: this rank's group (tests run ranks as threads); null: the job in
  // the environment (`tessel launch`, mpirun), joined with the configured backend.
  dist::ProcessGroup* process_group = nullptr;
  // A federated data owner (train/federated.h) reads only shard `data_shard` of `data_shards` of
  // every global batch, as a rank would, with no collective in its loop.
  int data_shard = 0, data_shards = 1;
  // Whether run() evaluates when it returns (federated rounds call it once per round).
  bool evaluate_at_end = true;
  // With [train] fuse: where the first step's graph is printed, before and after fusion
  // (`tessel train --dump-graph`); nullptr: nowhere.
  std::FILE* dump_graph = nullptr;
};

class Trainer {
 public:
  static Expected<std::unique_ptr<Trainer>> create(TrainConfig config, TrainerOptions options = {});
  ~Trainer();

  // Restores everything a checkpoint holds; the next run() continues from its step.
  Status resume(const std::string& checkpoint_path);
  // Trains up to the configured number of steps, or to `stop_at` if that is smaller (a run cut
  // short, as a preempted job would be); evaluates and checkpoints at the configured intervals
  // and at the end.
  Expected<RunSummary> run(int64_t stop_at = -1);
  // Loss (and accuracy for classifiers) on the evaluation batches, in eval mode without recording
  // gradients.
  Expected<Evaluation> evaluate();
  // Text the model writes after `options.prompt` (a GPT on text data; decoded with the data's
  // vocabulary), drawn with Pcg32(seed, 6): the same text for the same weights and seed.
  Expected<std::string> sample(const SampleConfig& options);
  Status save_checkpoint(const std::string& path);

  // Called after each backward, before the gradients are unscaled, clipped and applied (tests
  // inject an inf here to see the loss scaler skip the step).
  using GradientHook = std::function<Status(const nn::FlatParameters& params, int64_t step)>;
  void set_after_backward(GradientHook hook) { after_backward_ = std::move(hook); }

  int64_t step() const { return step_; }
  // [train] fuse: the captured graph, its plan and replay counts; null without fusion.
  const graph::FusedSteps* fused_steps() const { return fused_.get(); }
  // The fp16 loss scaler; null for fp32 and bf16, which need none.
  const optim::GradScaler* grad_scaler() const { return grad_scaler_.get(); }
  // The optimizer the loop steps: the data-parallel one in distributed runs.
  const optim::Optimizer& optimizer() const {
    return data_parallel_ ? data_parallel_->optimizer() : *optimizer_;
  }
  int64_t total_steps() const { return total_steps_; }
  nn::Module& model() { return *model_; }
  nn::FlatParameters& parameters() { return *params_; }
  Device* device() const { return device_; }
  // Distributed runs only (null otherwise): the ranks' group, for anything else that must agree
  // across ranks (a mixed-precision overflow flag), and the data-parallel machinery.
  dist::ProcessGroup* process_group() const { return group_; }
  parallel::DataParallel* data_parallel() const { return data_parallel_.get(); }
  // [distributed] split = "uneven" only (null otherwise): the ranks' current shares of the
  // global batch and their measured throughput.
  const parallel::Rebalancer* rebalancer() const { return rebalancer_.get(); }

 private:
  explicit Trainer(TrainConfig config, TrainerOptions options)
      : config_(std::move(config)), options_(options) {}
  Status build();
  Expected<RunSummary> run_steps(int64_t stop_at);  // run() without its out-of-memory guard
  Status build_data_parallel();
  Status write_metrics(const std::string& json_line);
  optim::Optimizer& mutable_optimizer() {
    return data_parallel_ ? data_parallel_->optimizer() : *optimizer_;
  }
  int rank() const { return group_ ? group_->rank() : 0; }
  // The parameters the data-parallel machinery (or the single-process optimizer) updates.
  nn::FlatParameters& updated_params() { return host_params_ ? *host_params_ : *params_; }
  // A rank on another device: its model takes the current values (before a pass over it).
  Status refresh_device_copy();
  int world_size() const { return group_ ? group_->size() : 1; }
  // An error naming the step and the first non-finite tensor when the loss (or, in one process,
  // a gradient) holds an inf or NaN.
  Status check_finite(double loss);
  // Whether any rank saw an inf or NaN gradient this step: every rank must skip the same steps.
  Expected<bool> any_rank_found_inf(bool found_inf_here);
  // The averaged gradients this rank's optimizer reads: the flat buffers, or under ZeRO this
  // rank's shards (after DataParallel::wait_gradients()).
  const nn::FlatParameters& local_gradients();

  TrainConfig config_;
  TrainerOptions options_;
  Device* device_ = nullptr;
  std::unique_ptr<nn::Module> model_;
  std::unique_ptr<nn::FlatParameters> params_;  // the model's, on device_
  // A rank on another device than the CPU: DataParallel's parameters, in host memory.
  std::unique_ptr<nn::Module> host_model_;
  std::unique_ptr<nn::FlatParameters> host_params_;
  std::unique_ptr<optim::Optimizer> optimizer_;
  std::unique_ptr<optim::GradScaler> grad_scaler_;
  std::unique_ptr<graph::FusedSteps> fused_;  // [train] fuse
  GradientHook after_backward_;
  std::unique_ptr<DataSource> data_;
  std::unique_ptr<BatchSource> train_batches_;
  int64_t total_steps_ = 0;
  int64_t step_ = 0;
  bool resumed_ = false;
  std::FILE* metrics_ = nullptr;
  std::unique_ptr<dist::ProcessGroup> own_group_;
  dist::ProcessGroup* group_ = nullptr;
  std::unique_ptr<parallel::DataParallel> data_parallel_;
  std::shared_ptr<parallel::GroupBatchNormSync> batch_norm_sync_;  // sync_batchnorm
  std::unique_ptr<nn::FlatParameters> gradient_shards_;            // ZeRO: local_gradients()' view
  // split = "uneven": the cut of each global batch (inside train_batches_) and who moves it.
  parallel::RankShard* rank_shard_ = nullptr;
  std::unique_ptr<parallel::Rebalancer> rebalancer_;
  std::optional<secure::SecretKey> checkpoint_key_;  // [checkpoint] encrypt = true
  std::unique_ptr<secure::DpSgd> dp_sgd_;            // [privacy]
  secure::RdpAccountant accountant_;
  double sample_rate_ = 0.0;  // [privacy]: batch / examples
};

// Mean cross-entropy of logits [..., classes] against class ids [...]: labels [B] of a
// classifier and next tokens [B, T] of a language model alike (rows flattened, views only). The
// loss every training step minimises; plan/ measures the same step.
Expected<autograd::Variable> training_loss(const autograd::Variable& logits,
                                           const autograd::Variable& targets);

}  // namespace tessel::train
