// SyncBatchNorm over a process group (torch.nn.SyncBatchNorm under DDP): every BatchNorm2d of a
// model normalises with the statistics of the whole global batch, all ranks' rows together, so
// that a data-parallel run of a BatchNorm model equals one process with the whole batch.
//
//   TESSEL_ASSIGN_OR_RETURN(auto dp, DataParallel::create(params, *group, make_adamw, options));
//   TESSEL_ASSIGN_OR_RETURN(int layers, convert_sync_batchnorm(model, *group, dp.get()));
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

 private:
  Expected<Tensor> sum_over_ranks(const Tensor& local, double weight);
  dist::ProcessGroup& group_;
  const DataParallel* data_parallel_;
  ops::OpDef op_;  // the recorded all-reduce; tape nodes point at it
};

// Synchronises every BatchNorm2d under `model` over `group`, weighted by `data_parallel`'s
// shares; returns how many layers. The returned layers share one GroupBatchNormSync.
Expected<int> convert_sync_batchnorm(nn::Module& model, dist::ProcessGroup& group,
                                     const DataParallel* data_parallel);

}  // namespace tessel::parallel
