// SyncBatchNorm over a process group (torch.nn.SyncBatchNorm under DDP): every BatchNorm2d of a
// model normalises with the statistics of the whole global batch, all ranks' rows together, so
// that a data-parallel run of a BatchNorm model equals one process with the whole batch.
//
//   TESSEL_ASSIGN_OR_RETURN(auto dp, DataParallel::create(params, *group, make_adamw, options));
//   TESSEL_ASSIGN_OR_RETURN(auto sync, convert_sync_batchnorm(model, *group, dp.get()));
//   ... each step: compute_s -= sync->take_waited_s();   // what the rebalancer should see
//
// Each synchronised layer's training forward makes two all-reduces of [C + 1] and [C] values
// (the per-channel sums and count, then the sums of squares around the global mean), and its
// backward the two matching ones, on the group's stream behind DDP's buckets, in the same order
// on every rank (autograd's order is deterministic). Sums travel in f64.
//
// Uneven shares (DataParallel::set_batch_share): rank r's gradients are scaled by its weight w_r
// before the averaging, which is right for what rank r's own loss contributes; but the backward
// of a global statistic carries every rank's loss into every rank's graph. So the all-reduce's
// backward sums w_r' g_r' over the ranks r' and divides by this rank's w_r: each rank's loss
// then counts by its own rows wherever its gradient ends up. Even shares: the plain sum, as in
// PyTorch. A rank with no rows (pass_without_rows) runs no forward and cannot take part: every
// rank needs rows while layers are synchronised.
//
// Timing: a rank now waits for the slowest at every synchronised layer, so its forward + backward
// time is the slowest rank's, which would tell the rebalancer (rebalance.h) that all ranks are
// equally fast. take_waited_s() is the time spent blocked in these all-reduces since the last
// call; a rank's own compute is its forward + backward less that.
#pragma once

#include <memory>

#include "dist/process_group.h"
#include "nn/conv_layers.h"
#include "ops/op.h"
#include "parallel/data_parallel.h"

namespace tessel::parallel {

class GroupBatchNormSync : public nn::BatchNormSync {
 public:
  // `group` (and `data_parallel`, which may be null: even shares) must outlive this object.
  GroupBatchNormSync(dist::ProcessGroup& group, const DataParallel* data_parallel);
  Expected<autograd::Variable> all_reduce_sum(const autograd::Variable& local) override;
  // Seconds blocked in the all-reduces since the last call (the caller's thread: forward and
  // backward run there).
  double take_waited_s();
  int layers() const { return layers_; }
  void set_layers(int layers) { layers_ = layers; }

 private:
  Expected<Tensor> sum_over_ranks(const Tensor& local, double weight);
  dist::ProcessGroup& group_;
  const DataParallel* data_parallel_;
  ops::OpDef op_;  // the recorded all-reduce; tape nodes point at it
  double waited_s_ = 0;
  int layers_ = 0;
};

// Synchronises every BatchNorm2d under `model` over `group`, weighted by `data_parallel`'s
// shares; returns the synchroniser they share (layers(): how many).
Expected<std::shared_ptr<GroupBatchNormSync>> convert_sync_batchnorm(
    nn::Module& model, dist::ProcessGroup& group, const DataParallel* data_parallel);

}  // namespace tessel::parallel
