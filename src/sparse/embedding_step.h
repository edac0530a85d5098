// The training step that shows what sparse embedding gradients buy: a bag-of-tokens classifier
// (embedding [V, C] -> mean over the T tokens of each sequence -> Linear(C, classes) ->
// cross-entropy) trained with AdamW, once with a dense gradient for the table (nn::Embedding,
// optim::AdamW over every parameter) and once with a row-sparse one (SparseEmbedding with
// LazyAdamW; the head keeps dense AdamW), from the same weights on the same batches. Steps of the
// two take turns, so both see the same load; both losses are recorded at every step.
//
// Batches: each sequence gets a class c and its tokens are ids = c + classes * u with u uniform,
// so the task is learnable from the embeddings and a batch touches about
// V (1 - exp(-B T / V)) distinct rows (7,600 of 50,000 at B T = 8,192).
#pragma once

#include <string>
#include <vector>

#include "runtime/device.h"
#include "support/status.h"

namespace tessel::sparse {

struct EmbeddingStepOptions {
  int64_t vocabulary = 50000;
  int64_t dim = 384;
  int64_t batch = 32;
  int64_t tokens = 256;
  int64_t classes = 16;
  int steps = 12;   // timed steps of each kind (after `warmup`)
  int warmup = 2;
  double lr = 1e-3;
  uint64_t seed = 1;
  Device* device = nullptr;  // default: the CPU
};

struct EmbeddingStepReport {
  EmbeddingStepOptions options;
  std::vector<double> dense_ms, sparse_ms;      // timed steps
  std::vector<double> dense_loss, sparse_loss;  // every step, warm-up included
  double mean_touched_rows = 0;
  std::string load_before, load_after;
  double median_dense_ms() const;
  double median_sparse_ms() const;
  std::string to_text() const;
  std::string to_json() const;
};

Expected<EmbeddingStepReport> compare_embedding_steps(const EmbeddingStepOptions& options);

}  // namespace tessel::sparse
