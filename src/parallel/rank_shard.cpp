// A rank's rows of each global batch (see rank_shard.h).
#include "parallel/rank_shard.h"

namespace tessel::parallel {

Status RankShard::set_shares(std::vector<int64_t> shares) {
  if (!shares.empty() && int(shares.size()) != world_size_)
    return invalid_argument("{} shares for {} ranks", shares.size(), world_size_);
  for (size_t r = 0; r < shares.size(); ++r)
    if (shares[r] < 0) return invalid_argument("rank {}'s share is {} rows", r, shares[r]);
  shares_ = std::move(shares);
  return ok_status();
}

Expected<Batch> RankShard::next() {
  TESSEL_ASSIGN_OR_RETURN(Batch global, global_->next());
  const int64_t rows = global.inputs.size(0);
  int64_t lo = 0, count = 0;
  if (shares_.empty()) {
    if (rows % world_size_ != 0 || global.targets.size(0) != rows)
      return invalid_argument("a global batch of {} rows (targets {}) does not split into {} ranks",
                              rows, global.targets.size(0), world_size_);
    count = rows / world_size_;
    lo = rank_ * count;
  } else {
    int64_t total = 0;
    for (size_t r = 0; r < shares_.size(); ++r) {
      if (int(r) < rank_) lo += shares_[r];
      total += shares_[r];
    }
    if (total != rows || global.targets.size(0) != rows)
      return invalid_argument(
          "a global batch of {} rows (targets {}) does not split into shares "
          "adding up to {}",
          rows, global.targets.size(0), total);
    count = shares_[size_t(rank_)];
  }
  Batch mine;
  TESSEL_ASSIGN_OR_RETURN(mine.inputs, global.inputs.slice(0, lo, lo + count));
  TESSEL_ASSIGN_OR_RETURN(mine.targets, global.targets.slice(0, lo, lo + count));
  return mine;
}

}  // namespace tessel::parallel
