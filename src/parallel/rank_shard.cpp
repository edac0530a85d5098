// A rank's rows of each global batch (see rank_shard.h).
#include "parallel/rank_shard.h"

namespace tessel::parallel {

Expected<Batch> RankShard::next() {
  TESSEL_ASSIGN_OR_RETURN(Batch global, global_->next());
  const int64_t rows = global.inputs.size(0);
  if (rows % world_size_ != 0 || global.targets.size(0) != rows)
    return invalid_argument("a global batch of {} rows (targets {}) does not split into {} ranks",
                            rows, global.targets.size(0), world_size_);
  const int64_t per_rank = rows / world_size_, lo = rank_ * per_rank;
  Batch mine;
  TESSEL_ASSIGN_OR_RETURN(mine.inputs, global.inputs.slice(0, lo, lo + per_rank));
  TESSEL_ASSIGN_OR_RETURN(mine.targets, global.targets.slice(0, lo, lo + per_rank));
  return mine;
}

}  // namespace tessel::parallel
