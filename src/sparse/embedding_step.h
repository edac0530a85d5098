// The training step of an embedding table, which is what sparse gradients change: look up B x T
// ids in [V, C], backward of the table from the loss's gradient, AdamW, zero the gradient; once
// with a dense gradient (nn::Embedding in flat parameters, optim::AdamW over the whole table) and
// once with a row-sparse one (SparseEmbedding, LazyAdamW), from the same weights on the same
// batches. The loss between forward and backward (the mean squared distance of each embedding to
// a fixed per-id target, so the table learns something measurable) stands for the rest of a
// network: it is computed and reported but not timed, since it is the same work either way.
// Steps of the two take turns, so both see the same load; both losses are recorded every step.
// The dense step's backward adds into the flat gradient in place (ops/nn_ops.cpp), which
// zero_grad clears; the sparse step's leaf keeps the loss gradient as its own. Both steps hand
// the loss gradient over (Variable::backward(Tensor&&)), as the next layer's backward hands over
// the gradient it made: holding on to it would make the sparse leaf copy it (12.6 MB), which a
// network does not pay.
//
// Batches: B x T ids uniform over the vocabulary (the least sparse case: a batch touches about
// V (1 - exp(-B T / V)) distinct rows, 7,500 of 50,000 at B T = 8,192), or, with `zipf` = s > 0,
// drawn by Zipf's law as real token streams are (the id of rank k has probability proportional
// to 1 / k^s; ranks are a fixed random order of the ids, so frequent rows are scattered over the
// table): fewer distinct rows, each with more positions. Targets are gathered from an N(0, 1)
// table before the timed step.
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
  int steps = 12;  // timed steps of each kind (after `warmup`)
  int warmup = 2;
  double lr = 1e-2;
  double zipf = 0;  // 0: uniform ids; s > 0: Zipf(s) ids
  uint64_t seed = 1;
  Device* device = nullptr;  // default: the CPU
};

struct EmbeddingStepReport {
  EmbeddingStepOptions options;
  std::vector<double> dense_ms, sparse_ms;          // timed steps, wall
  std::vector<double> dense_cpu_ms, sparse_cpu_ms;  // the same steps, process CPU time
  std::vector<double> dense_loss, sparse_loss;      // every step, warm-up included
  double mean_touched_rows = 0;
  // The lazy AdamW step alone (process CPU ms per step), on each batch's rows where they lie
  // (scattered over the table) and on as many rows laid out contiguously (every distinct id
  // renamed to the order of its first position: the same gradient rows and counts update rows
  // 0..U-1 of a table of the same size, reading the gradient's rows nearly in order). Their ratio
  // is what scattered rows cost this machine over streaming ones.
  std::vector<double> scattered_rows_cpu_ms, contiguous_rows_cpu_ms;
  std::string load_before, load_after;
  double median_dense_ms() const;
  double median_sparse_ms() const;
  std::string ids_label() const;  // "uniform ids" or "Zipf ids, s = 1.1"
  std::string to_text() const;
  std::string to_json() const;
};

Expected<EmbeddingStepReport> compare_embedding_steps(const EmbeddingStepOptions& options);

}  // namespace tessel::sparse
