// Dynamic loss scaling for fp16 training, as PyTorch's GradScaler: the loss is multiplied by a
// scale S before backward, so small gradients survive being rounded to f16 in the gemms, and the
// gradients are divided by S before the optimizer sees them. A step whose gradients hold an inf
// or a NaN (S was too large) is skipped and S halves; after `growth_interval` clean steps in a
// row S doubles. S starts at 2^16 and stays a power of two, so scaling is exact.
//
//   GradScaler scaler;
//   TESSEL_TRY(loss.backward(full(loss.shape(), scaler.scale())));
//   TESSEL_ASSIGN_OR_RETURN(bool inf, scaler.unscale(params));   // grads /= S; inf on this rank?
//   inf = all-reduce(inf, max) over the ranks                     // every rank skips together
//   if (!inf) TESSEL_TRY(optimizer.step());
//   scaler.update(inf);
//
// The state (scale, clean steps) goes into checkpoints through state() / restore().
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "nn/module.h"

namespace tessel::optim {

struct GradScalerOptions {
  double init_scale = 65536.0;  // 2^16
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;  // clean steps in a row before the scale grows
};

class GradScaler {
 public:
  explicit GradScaler(GradScalerOptions options = {});

  double scale() const { return scale_; }
  // Clean steps since the scale last changed or an inf was seen.
  int64_t clean_steps() const { return clean_steps_; }

  // Divides every gradient by the scale, in place (one launch per flat group), and says whether
  // any of them is inf or NaN on this rank.
  Expected<bool> unscale(const nn::FlatParameters& params) const;
  // After each step, with found_inf agreed on by every rank: found_inf multiplies the scale by
  // backoff_factor and restarts the count; otherwise the count grows and, at growth_interval,
  // the scale is multiplied by growth_factor and the count restarts.
  void update(bool found_inf);

  // "scale" and "clean_steps" as text, for checkpoint metadata, and back.
  std::map<std::string, std::string> state() const;
  Status restore(const std::map<std::string, std::string>& state);

 private:
  GradScalerOptions options_;
  double scale_;
  int64_t clean_steps_ = 0;
};

}  // namespace tessel::optim
