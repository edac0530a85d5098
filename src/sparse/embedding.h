// An embedding table with row-sparse gradients, and the optimizers that update only the rows a
// step touched (torch.nn.Embedding(sparse=True) with torch.optim.SparseAdam, in that manner).
//
//   SparseEmbedding emb = SparseEmbedding::create(50000, 384, device, rng).value();
//   LazyAdamW opt = LazyAdamW::create(emb, {.lr = 1e-3}).value();
//   Variable y = emb.forward(ids).value();            // [..., 384]
//   loss.backward();  opt.step(emb);  emb.zero_grad();
//
// forward() groups the batch's ids on the host (U distinct ones) and gathers the rows of the
// table; its output is a leaf Variable, so backward leaves the output's gradient D [..., C] on it
// and nothing else: PyTorch's uncoalesced sparse gradient (indices = the ids, values = D), with
// no [V, C] tensor and not even a [U, C] one. An optimizer step then sums each distinct id's
// positions of D and updates that row of the table and of its state in one pass, so a step costs
// O(B T C) (the lookup, and reading D once) plus O(U C) (the touched rows), where a dense
// gradient costs O(V C) for the gradient, the optimizer's pass over the whole table and the zero
// fill. grad_rows() coalesces on request.
//
// Lazy semantics (documented, as PyTorch's SparseAdam): rows not in the batch keep their value
// and their optimizer state; AdamW's moments of a row advance only on steps that touch it, while
// bias correction uses the global step count; weight decay (decoupled) applies to touched rows
// only. With SGD without weight decay this is exactly dense SGD (untouched rows have zero
// gradient); AdamW differs from dense AdamW, which keeps moving untouched rows by their momentum.
#pragma once

#include <cstdint>
#include <vector>

#include "autograd/variable.h"
#include "support/random.h"

namespace tessel::sparse {

using autograd::Variable;

class SparseEmbedding {
 public:
  // Weight ~ N(0, 1), as torch.nn.Embedding.
  static Expected<SparseEmbedding> create(int64_t num_embeddings, int64_t embedding_dim,
                                          Device* device, Pcg32& rng);
  // Over an existing table [V, C] (shared, not copied).
  static Expected<SparseEmbedding> over(Tensor weight);

  // ids: i64 of any shape, each in [0, V) -> a leaf [..., C] (requires grad).
  Expected<Variable> forward(const Tensor& ids);

  // The last forward's distinct ids, increasing [U], and how its positions group by them: the
  // positions id by id [R] and where each id's run starts [U + 1].
  const Tensor& grad_indices() const { return indices_; }
  const Tensor& grad_starts() const { return starts_; }
  const Tensor& grad_positions() const { return positions_; }
  // The uncoalesced gradient: the last output's gradient as [R, C] rows, one per position
  // (undefined before a backward reached it).
  Expected<Tensor> grad_values() const;
  // The coalesced gradient of the rows grad_indices() names [U, C]: each id's positions summed.
  Expected<Tensor> grad_rows() const;
  void zero_grad();

  const Tensor& weight() const { return weight_; }
  int64_t num_embeddings() const { return weight_.size(0); }
  int64_t embedding_dim() const { return weight_.size(1); }

 private:
  Tensor weight_;
  Tensor indices_, starts_, positions_;
  Variable output_;
};

// A batch's ids grouped by value, for ids in [0, v): `unique` the distinct ids, increasing;
// `positions` every position, grouped by id (in increasing order within an id); `starts` [U + 1]
// where each id's positions begin. A radix sort of the positions by id (one stable counting
// pass per byte of v - 1), O(ids) per pass where sorting and a binary search per id were
// O(ids log ids). forward() uses it; exposed for its test.
struct IdGroups {
  std::vector<int64_t> unique, starts, positions;
};
IdGroups group_ids(const std::vector<int64_t>& ids, int64_t v);

struct LazySgdOptions {
  double lr = 0.01;
  double weight_decay = 0.0;
};

class LazySgd {
 public:
  static Expected<LazySgd> create(const LazySgdOptions& options);
  // Updates the rows of emb's last gradient; nothing when there is none.
  Status step(SparseEmbedding& emb);
  void set_lr(double lr) { options_.lr = lr; }

 private:
  LazySgdOptions options_;
};

struct LazyAdamWOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
};

class LazyAdamW {
 public:
  // State exp_avg and exp_avg_sq [V, C] (f32 zeros) on the table's device.
  static Expected<LazyAdamW> create(const SparseEmbedding& emb, const LazyAdamWOptions& options);
  Status step(SparseEmbedding& emb);
  int64_t step_count() const { return step_count_; }
  const Tensor& exp_avg() const { return m_; }
  const Tensor& exp_avg_sq() const { return v_; }

 private:
  LazyAdamWOptions options_;
  Tensor m_, v_;
  int64_t step_count_ = 0;
};

}  // namespace tessel::sparse
