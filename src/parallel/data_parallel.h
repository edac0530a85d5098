// Data-parallel training over a ProcessGroup: DDP (gradients all-reduced in buckets while
// backward runs) and ZeRO stages 1, 2 and 3 (optimizer state, then gradients, then parameters
// sharded across the ranks), on a model's flat parameters (nn::FlatParameters).
//
//   TESSEL_ASSIGN_OR_RETURN(auto dp, DataParallel::create(params, *group, make_adamw, options));
//   // every step (set_sync(false) on the inner steps of gradient accumulation):
//   loss.backward();                      // buckets start reducing from autograd's hooks
//   TESSEL_TRY(dp->finish_backward());    // launches what is left (unused parameters)
//   dp->optimizer().set_lr(lr);
//   TESSEL_TRY(dp->optimizer().step());   // waits bucket by bucket, steps, gathers (ZeRO)
//   TESSEL_TRY(params.zero_grad());
//
// Buckets. Parameters are taken in reverse named_parameters() order (the order backward produces
// their gradients) into buckets of at most `bucket_cap_bytes` (the first `first_bucket_bytes`,
// so that communication starts early), as PyTorch DDP does. A bucket is a contiguous range of a
// dtype group's flat buffers, since parameters are contiguous there. Each parameter's leaf gets
// an on_grad_ready hook (autograd/variable.h); when a bucket's last gradient of the pass is in,
// its collective is queued on the group's stream, whose progress thread runs it while backward
// goes on. Buckets are launched strictly in order (a bucket ready early waits for the ones
// before it), so every rank issues the same collectives in the same order.
//
// The optimizer is one per bucket over that bucket's range (its shard under ZeRO): step() waits
// for bucket 0's collective, updates bucket 0 while bucket 1's may still be running, and so on.
//
// Modes (rank r of n owns the r-th n-th of every bucket; a bucket's length is a multiple of
// 1024 elements, so n must divide 1024):
//   DDP     all-reduce (average) of each bucket in place in the flat gradients; full optimizer.
//   ZeRO-1  reduce-scatter of each bucket into a gradient shard; the optimizer (and its state)
//           covers only the shard; the updated shard is all-gathered into the flat values.
//   ZeRO-2  as 1, and the flat gradient buffer is freed: a parameter's gradient is copied into
//           its bucket's buffer as it becomes ready, the buffer lives only until its
//           reduce-scatter is done. Gradient accumulation reduces every inner step (as
//           DeepSpeed) and adds into the shard.
//   ZeRO-3  as 2, and the flat values are freed: each rank keeps its shard; a bucket is
//           all-gathered when an op first reads one of its parameters (autograd's on_use hook),
//           and the next bucket in forward order is gathered ahead (prefetch). The gathered
//           values are dropped when the bucket's gradients are complete; tensors that backward
//           rules saved keep what they need alive until backward frees them, so backward never
//           gathers again.
//
// A failure of any rank (a dead process, an abort) breaks the group: the wait that sees it
// returns the error, naming the rank, and so do all later calls; nothing hangs.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dist/process_group.h"
#include "nn/module.h"
#include "optim/optimizer.h"

namespace tessel::parallel {

struct DataParallelOptions {
  int zero_stage = 0;  // 0: DDP; 1, 2, 3: ZeRO
  int64_t bucket_cap_bytes = 25 << 20;
  int64_t first_bucket_bytes = 1 << 20;
  // false: no collective starts before finish_backward() (to measure what overlap saves).
  bool overlap = true;
};

// What one step cost in communication, and when collectives ran relative to backward.
struct StepStats {
  // Time the training thread spent blocked on collectives in the step: the communication that
  // computation did not hide (backward, optimizer updates of earlier buckets, forward for ZeRO-3).
  double exposed_comm_ms = 0.0;
  int buckets = 0;
  // Buckets whose collective was queued before backward ended (finish_backward was called) and
  // of those, how many had already finished then.
  int launched_during_backward = 0;
  int finished_during_backward = 0;
};

// Bytes this rank holds between steps, as ZeRO's paper counts them.
struct MemoryAccount {
  int64_t parameter_bytes = 0;
  int64_t gradient_bytes = 0;
  int64_t optimizer_bytes = 0;  // measured: the device allocator's growth when it was created
};

using OptimizerFactory =
    std::function<Expected<std::unique_ptr<optim::Optimizer>>(nn::FlatParameters&)>;

class DataParallel {
 public:
  // Broadcasts rank 0's parameters to every rank, lays out the buckets, installs the hooks and
  // makes the per-bucket optimizers with `make_optimizer`. `params` and `group` must outlive
  // this object. The model's buffers are not flat parameters: see broadcast_buffers.
  static Expected<std::unique_ptr<DataParallel>> create(nn::FlatParameters& params,
                                                        dist::ProcessGroup& group,
                                                        OptimizerFactory make_optimizer,
                                                        DataParallelOptions options);
  ~DataParallel();
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  // Every rank, once after create (as PyTorch DDP at construction): rank 0's buffers (BatchNorm
  // running statistics) replace the other ranks', so that all ranks evaluate the same model.
  // Training then updates each rank's from its own rows; rank 0's are the ones checkpointed.
  Status broadcast_buffers(nn::Module& model);
  // false on the inner steps of gradient accumulation: DDP and ZeRO-1 then only accumulate
  // locally (no communication); ZeRO-2 and 3 still reduce into the shard.
  void set_sync(bool sync) { sync_ = sync; }
  // Between steps: whether the next steps overlap communication with backward.
  void set_overlap(bool overlap) { options_.overlap = overlap; }
  // Uneven data parallelism (rebalance.h): this rank computes `local_rows` of a global batch of
  // `global_rows` from now on (0 rows: a rank excluded from the work that still joins the
  // collectives). A rank's loss is the mean over its own rows, so before the averaging collective
  // its gradient is scaled by world * local_rows / global_rows: the average over the ranks is
  // then sum_r local_r g_r / global, the gradient of the whole batch's mean loss that one process
  // computes. Equal shares scale by 1, which is skipped. Between steps; each rank its own share.
  Status set_batch_share(int64_t local_rows, int64_t global_rows);
  // Instead of forward, backward and finish_backward on a rank with no rows this step: joins the
  // pass's collectives with a zero gradient (ZeRO-3: first the parameter all-gathers, bucket by
  // bucket in the order forward reads them, last bucket first, as the other ranks' forward does).
  Status pass_without_rows();
  // A rank whose model computes on another device (opencl:0 beside CPU ranks): DataParallel keeps
  // the parameters, the collectives and the optimizer in host memory (this object's CPU
  // FlatParameters), and the rank's device holds a copy of the model with the same layout
  // (FlatParameters::create of the same architecture there). Each step:
  //   TESSEL_TRY(dp->copy_values_to(device_params));        // before forward on the device
  //   loss.backward();                                      // on the device
  //   TESSEL_TRY(dp->finish_backward_from(device_params));  // instead of finish_backward
  // Copying the values in: ZeRO-3 gathers every bucket for it, as forward would. Copying the
  // gradients out ends the pass: the buckets are reduced from the copies (no overlap with
  // backward); under ZeRO-2/3 the device gradients are zeroed (each pass is reduced into the
  // shards), under DDP/ZeRO-1 they accumulate on the device and are read on the synchronising
  // pass. The optimizer step then runs on the host.
  Status copy_values_to(nn::FlatParameters& device_params);
  Status finish_backward_from(nn::FlatParameters& device_params);
  // The factor this rank's gradients are scaled by before they are averaged (1: even shares).
  double gradient_weight() const { return gradient_weight_; }
  // After loss.backward(): queues every bucket not yet queued (parameters that got no gradient
  // this pass count as ready) and ends the pass.
  Status finish_backward();
  // The optimizer of the whole model: set_lr, step (waits for each bucket, updates it, and under
  // ZeRO all-gathers it), step_count; named_state for DDP (ZeRO's state is sharded: empty).
  optim::Optimizer& optimizer();
  const optim::Optimizer& optimizer() const;
  // Waits for every gradient collective of the pass: DDP's averaged gradients are then all in
  // the flat buffer (clipping by the global norm needs them). optimizer().step() needs no call.
  Status wait_gradients();
  // After wait_gradients(): the averaged gradients this rank's optimizer will read (DDP: the
  // flat buffers; ZeRO: this rank's shard of each bucket), e.g. to unscale them or look for
  // inf/NaN in mixed precision (all-reduce the flag over the group: each rank sees only its part).
  std::vector<Tensor> local_gradients() const;
  // Clips the averaged gradients by their global L2 norm, as optim::clip_grad_norm does for one
  // process, and returns the norm before clipping. DDP: every rank holds all the gradients, so
  // the norm is local. ZeRO: the ranks' shards are disjoint, so the norm is the square root of
  // the all-reduced sum of each rank's sum of squares, and each rank scales its shard. Waits for
  // the gradients; every rank must call it. max_norm must be > 0.
  Expected<double> clip_grad_norm(double max_norm);
  // Ends the step without updating (a mixed-precision step with inf/NaN gradients): waits for
  // the collectives and forgets the pass's gradients, as optimizer().step() would.
  Status skip_step();

  // Checkpoints, in the names and shapes a single-process run uses (FlatParameters::named_tensors,
  // Optimizer::named_state), so that either kind of run resumes from the other's file.
  // gather_*: every rank must call them, in the same order; the ranks' shards are all-gathered
  // (parameters under ZeRO-3, optimizer state under ZeRO 1-3) into whole tensors on every rank.
  using NamedTensorList = std::vector<std::pair<std::string, Tensor>>;
  Expected<NamedTensorList> gather_parameters();
  Expected<NamedTensorList> gather_optimizer_state();
  // Every rank: `take(name)` gives a whole tensor (an error if it has none); each rank keeps its
  // part. Between steps (after create or a step), not during a pass.
  using TensorLookup = std::function<Expected<Tensor>(const std::string&)>;
  Status load_parameters(const TensorLookup& take);
  Status load_optimizer_state(const TensorLookup& take);

  int rank() const { return group_->rank(); }
  int world_size() const { return group_->size(); }
  const DataParallelOptions& options() const { return options_; }
  // Of the step that last called optimizer().step() (finish_backward fills the backward part).
  const StepStats& last_stats() const { return last_stats_; }
  MemoryAccount memory() const { return memory_; }
  size_t num_buckets() const { return buckets_.size(); }
  // Element ranges [begin, end) of each bucket in its group's flat buffers, in launch order.
  std::vector<std::pair<int64_t, int64_t>> bucket_ranges() const;
  // Whether bucket b's gradient collective of the current pass has been queued / has finished.
  bool bucket_launched(size_t b) const;
  bool bucket_reduced(size_t b) const;
  // Runs one step's collectives again, alone and back to back, and returns their time in ms:
  // the communication a step needs when nothing else competes for the cores.
  Expected<double> time_collectives_alone();

 private:
  struct Bucket;
  class BucketedOptimizer;
  using Clock = std::chrono::steady_clock;

  DataParallel(nn::FlatParameters& params, dist::ProcessGroup& group, DataParallelOptions options);
  Status build(const OptimizerFactory& make_optimizer);
  Status grad_ready(size_t bucket, size_t entry, autograd::VariableState& leaf);
  Status launch_ready_buckets();
  Status launch_reduction(Bucket& b);
  // Scales `grads` (a bucket's range) by gradient_weight_ before its collective.
  Status weigh(const Tensor& grads, DType dtype) const;
  Status wait_reduction(Bucket& b);
  Status launch_gather(Bucket& b);
  Status ensure_gathered(size_t bucket);
  Status step(double lr, int64_t step_count);
  Status end_step();
  Status wait(const dist::Work& work);
  // Zero-filled whole flat buffers per dtype group, of `dtype` (none: the group's own).
  Expected<std::vector<Tensor>> zeroed_flat(std::optional<DType> dtype) const;
  // Whole flat buffers per dtype group, of `dtype` (none: the group's own), each
  // bucket's shard all-gathered into its range.
  Expected<std::vector<Tensor>> gather_flat(const std::function<Tensor(const Bucket&)>& shard_of,
                                            std::optional<DType> dtype);
  // Whole flat buffers per group made of the named tensors `take(name + suffix)` of every entry.
  Expected<std::vector<Tensor>> flat_from(const TensorLookup& take, const std::string& suffix,
                                          std::optional<DType> dtype) const;
  // ZeRO-3: gathers each bucket in forward's order (last first), hands it to `use`, drops it.
  Status with_each_bucket_gathered(const std::function<Status(Bucket&)>& use);
  // That `device_params` has this object's layout (dtype groups and their lengths).
  Status check_mirror(const nn::FlatParameters& device_params) const;
  // ZeRO-3: forgets gathered values (they are stale once the shards change).
  Status drop_gathered();

  nn::FlatParameters params_;  // a handle sharing the caller's buffers
  dist::ProcessGroup* group_;
  DataParallelOptions options_;
  std::vector<std::unique_ptr<Bucket>> buckets_;
  std::unique_ptr<BucketedOptimizer> optimizer_;
  size_t next_launch_ = 0;
  bool sync_ = true;
  // Collectives queued while this is true were queued during backward (before finish_backward).
  bool in_pass_ = true;
  int passes_since_step_ = 0;  // reductions accumulated into the shards (ZeRO-2/3)
  double gradient_weight_ = 1.0;
  StepStats stats_;
  StepStats last_stats_;
  MemoryAccount memory_;
};

}  // namespace tessel::parallel
