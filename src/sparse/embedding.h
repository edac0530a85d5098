// An embedding table with row-sparse gradients, and the optimizers that update only the rows a
// step touched (torch.nn.Embedding(sparse=True) with torch.optim.SparseAdam, in that manner).
//
//   SparseEmbedding emb = SparseEmbedding::create(50000, 384, device, rng).value();
//   LazyAdamW opt = LazyAdamW::create(emb, {.lr = 1e-3}).value();
//   Variable y = emb.forward(ids).value();            // [..., 384]
//   loss.backward();  opt.step(emb);  emb.zero_grad();
//
// forward() finds the distinct ids of the batch (U of them, on the host), gathers those rows of
// the table into a leaf Variable [U, C] and looks the batch up in that; backward therefore
// produces a [U, C] gradient, never a [V, C] one, and an optimizer step reads and writes U rows
// of the table and of its state. So a step costs O(U C) where a dense gradient costs O(V C) for
// the zero fill, the gradient and the optimizer's pass over the whole table.
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

  // ids: i64 of any shape, each in [0, V) -> [..., C].
  Expected<Variable> forward(const Tensor& ids);

  // The rows the last forward used (distinct, increasing) [U] and their gradient [U, C]
  // (undefined before a backward reached it).
  const Tensor& grad_indices() const { return indices_; }
  const Tensor& grad_rows() const { return rows_.defined() ? rows_.grad() : empty_; }
  void zero_grad();

  const Tensor& weight() const { return weight_; }
  int64_t num_embeddings() const { return weight_.size(0); }
  int64_t embedding_dim() const { return weight_.size(1); }

 private:
  Tensor weight_;
  Tensor indices_;
  Variable rows_;
  Tensor empty_;
};

// The distinct ids of a batch in increasing order (`unique`) and, for each position, the index
// of its id there (`local`), for ids in [0, v): a radix sort of the positions by id (one pass per
// byte of v - 1), O(ids) per pass where sorting and a binary search per id were O(ids log ids).
// forward() uses it; exposed for its test.
void dedupe_ids(const std::vector<int64_t>& ids, int64_t v, std::vector<int64_t>* unique,
                std::vector<int64_t>* local);

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
