// What the data-parallel tests (data_parallel_test.cpp, uneven_test.cpp) and their rank program
// (data_parallel_rank.cpp) train: a tiny GPT, AdamW, and deterministic global batches of token
// rows, so that a test can check N ranks' losses against one process with the whole batch.
#pragma once

#include <memory>
#include <utility>
#include <vector>

#include "nn/gpt.h"
#include "optim/optimizer.h"
#include "support/random.h"

namespace tessel::parallel::testing {

constexpr int64_t kTime = 8;

inline nn::GptConfig test_gpt() {
  return {.vocab_size = 16, .block_size = 8, .n_layer = 2, .n_head = 2, .n_embd = 16};
}

// Rows [first_row, first_row + rows) of step `step`'s global batch: token ids and targets
// [rows, kTime]. Row r's tokens depend on (step % 2, r) only, so any cut of the global batch
// into ranks sees the rows one process sees.
inline std::pair<Tensor, Tensor> batch(int step, int64_t first_row, int64_t rows) {
  std::vector<int64_t> ids, targets;
  for (int64_t row = first_row; row < first_row + rows; ++row) {
    Pcg32 rng(1000 + uint64_t(step % 2), uint64_t(row));  // two batches in turn: learnable
    for (int64_t t = 0; t < kTime; ++t) {
      ids.push_back(int64_t(rng.below(16)));
      targets.push_back(int64_t(rng.below(16)));
    }
  }
  return {Tensor::from_vector<int64_t>(ids, {rows, kTime}).value(),
          Tensor::from_vector<int64_t>(targets, {rows, kTime}).value()};
}

inline Expected<std::unique_ptr<optim::Optimizer>> make_adamw(nn::FlatParameters& p) {
  TESSEL_ASSIGN_OR_RETURN(auto opt, optim::AdamW::create(p, {.lr = 3e-3, .weight_decay = 0.01}));
  return std::unique_ptr<optim::Optimizer>(std::move(opt));
}

// One process, the whole batch of `rows` rows per step, no DataParallel: the losses of `steps`
// AdamW steps, the reference the ranks' runs are checked against.
inline Expected<std::vector<double>> one_process_losses(int64_t rows, int steps) {
  nn::GPT model(test_gpt());
  Pcg32 rng(7, 1);
  TESSEL_ASSIGN_OR_RETURN(nn::FlatParameters params,
                          nn::FlatParameters::create(model, cpu_device(), rng));
  TESSEL_ASSIGN_OR_RETURN(auto opt, make_adamw(params));
  std::vector<double> losses;
  for (int s = 0; s < steps; ++s) {
    auto [x, y] = batch(s, 0, rows);
    TESSEL_ASSIGN_OR_RETURN(autograd::Variable logits, model.forward(autograd::Variable(x)));
    TESSEL_ASSIGN_OR_RETURN(autograd::Variable loss, model.loss(logits, autograd::Variable(y)));
    TESSEL_TRY(loss.backward());
    TESSEL_ASSIGN_OR_RETURN(std::vector<float> value, loss.data().to_vector<float>());
    losses.push_back(value.at(0));
    TESSEL_TRY(opt->step());
    TESSEL_TRY(params.zero_grad());
  }
  return losses;
}

}  // namespace tessel::parallel::testing
