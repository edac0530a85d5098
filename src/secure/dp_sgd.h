// DP-SGD (Abadi et al. 2016, as Opacus does it): every example's gradient is clipped to norm C,
// the clipped gradients are summed, Gaussian noise of standard deviation sigma C is added to each
// coordinate, and the sum is divided by the batch size. RdpAccountant (rdp_accountant.h) turns
// sigma, the sampling rate and the steps into epsilon.
//
//   TESSEL_ASSIGN_OR_RETURN(auto dp, DpSgd::attach(model, params, {.max_grad_norm = 1.0,
//                                                                  .noise_multiplier = 1.1}));
//   ... forward, mean loss over the batch, backward ...
//   TESSEL_TRY(dp->privatise(batch_size));    // params' gradients are now the private ones
//   optimizer.step();
//
// Per-example gradients without a batch-of-one loop: attach() sets a forward tap (nn/module.h) on
// every Linear and Conv2d that saves the layer's input x and adds a zero leaf to its output, so
// backward leaves the output's gradient g there. With the batch's mean loss, example i's
// gradient of a Linear's weight is B sum_t g_it x_it^T; its squared norm is computed without
// forming it (Goodfellow 2015, "ghost" norms): B^2 |g_i|^2 |x_i|^2 for one row per example, and
// B^2 sum_{t,s} (g_it . g_is)(x_it . x_is) for sequences. Once every layer's share of each
// example's norm is known, the clipped sum sum_i c_i G_i is one pass of outer products per
// weight, with c_i = min(1, C / (|g_i| + 1e-6)) as in Opacus. A Conv2d's per-example weight
// gradient is g_i [Cout x P] times the example's unfolded input U_i^T [P x Cin k k] (im2col),
// formed per example (for its norm, then again for the clipped sum) and never kept for the batch.
// Biases: sum_t g_it. Every trainable parameter must belong to a Linear or a Conv2d with
// groups = 1 (BatchNorm mixes examples and cannot be made private this way: use none).
//
// Noise: a ChaCha20 stream (libsodium's randombytes_buf_deterministic) keyed per step from
// `seed`, turned normal by Box-Muller; without a seed, the seed comes from randombytes_buf, so
// that nobody can replay the noise. Everything runs on the host in f32/f64.
#pragma once

#include <array>
#include <memory>
#include <optional>
#include <vector>

#include "nn/module.h"

namespace tessel::secure {

struct DpSgdOptions {
  double max_grad_norm = 1.0;     // C
  double noise_multiplier = 1.0;  // sigma
  std::optional<std::array<uint8_t, 32>> seed;
};

class DpSgd {
 public:
  static Expected<std::unique_ptr<DpSgd>> attach(nn::Module& model, nn::FlatParameters& params,
                                                 const DpSgdOptions& options);
  ~DpSgd();  // removes the taps
  DpSgd(const DpSgd&) = delete;
  DpSgd& operator=(const DpSgd&) = delete;

  // After backward of the mean loss over `batch` examples: every parameter's gradient becomes
  // (sum_i clip(g_i) + N(0, sigma^2 C^2)) / batch.
  Status privatise(int64_t batch);
  // Each example's whole-model gradient norm before clipping, from the last privatise().
  const std::vector<double>& last_norms() const { return norms_; }
  int64_t steps() const { return steps_; }

 private:
  struct Layer;
  DpSgd(nn::Module& model, const DpSgdOptions& options);
  Expected<nn::Variable> tap(Layer& layer, const nn::Variable& input, nn::Variable output);

  nn::Module& model_;
  DpSgdOptions options_;
  std::array<uint8_t, 32> seed_;
  std::vector<std::unique_ptr<Layer>> layers_;
  std::vector<double> norms_;
  int64_t steps_ = 0;
};

}  // namespace tessel::secure
