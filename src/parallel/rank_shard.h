// Each rank's part of a global batch: the data-parallel counterpart of PyTorch's
// DistributedSampler, for any BatchSource (images, text, synthetic).
//
//   // every rank builds the same source (same seed) with batch_size * world rows per batch:
//   auto shard = std::make_unique<RankShard>(std::move(global_source), rank, world);
//   Batch mine = shard->next().value();   // rows [rank * B, (rank + 1) * B) of the global batch
//
// Every rank reads the same global batches in the same order and keeps its own rows, so N ranks
// with B rows each see exactly what one process with N x B rows sees; the position (for
// checkpoints) is the global source's, the same on every rank.
//
// Uneven data parallelism (rebalance.h): set_shares(shares) cuts the following global batches
// rank-major into shares[0], shares[1], ... rows (they must add up to the global batch), so a
// rank's rows move with its share while the global order stays the one of one process.
#pragma once

#include <memory>
#include <vector>

#include "data/batches.h"

namespace tessel::parallel {

class RankShard : public BatchSource {
 public:
  RankShard(std::unique_ptr<BatchSource> global, int rank, int world_size)
      : global_(std::move(global)), rank_(rank), world_size_(world_size) {}

  // An error if the global batch's rows do not divide by the number of ranks (even split) or do
  // not add up to the shares.
  Expected<Batch> next() override;
  // Rows per rank of the next batches, in rank order; an empty list goes back to the even split.
  // An error if there is not one share per rank or one is negative.
  Status set_shares(std::vector<int64_t> shares);
  DataPosition position() const override { return global_->position(); }
  Status restore(const DataPosition& position) override { return global_->restore(position); }

 private:
  std::unique_ptr<BatchSource> global_;
  int rank_;
  int world_size_;
  std::vector<int64_t> shares_;  // empty: even
};

}  // namespace tessel::parallel
