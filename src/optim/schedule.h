// Learning-rate schedules as pure functions of the step (0-based: the lr used by update `step`),
// so a resumed run needs only the step to continue the same curve.
//
//   Schedule s{.kind = ScheduleKind::kWarmupCosine, .base_lr = 1e-3, .min_lr = 1e-4,
//              .warmup_steps = 100, .total_steps = 5000};
//   optimizer.set_lr(s.lr_at(step));
//
//   constant        base_lr
//   cosine          min + (base - min) * (1 + cos(pi * t / T)) / 2,  t = min(step, T),
//                   T = total_steps (torch.optim.lr_scheduler.CosineAnnealingLR's closed form)
//   warmup_*        base * (step + 1) / warmup_steps while step < warmup_steps; then constant, or
//                   the cosine above over t = step - warmup, T = total_steps - warmup
#pragma once

#include <cstdint>
#include <string_view>

#include "support/status.h"

namespace tessel::optim {

enum class ScheduleKind { kConstant, kCosine, kWarmupConstant, kWarmupCosine };

// "constant", "cosine", "warmup_constant", "warmup_cosine" (config files use these names).
Expected<ScheduleKind> parse_schedule_kind(std::string_view name);

struct Schedule {
  ScheduleKind kind = ScheduleKind::kConstant;
  double base_lr = 1e-3;
  double min_lr = 0.0;
  int64_t warmup_steps = 0;
  int64_t total_steps = 0;

  // Errors for settings no step could use: total_steps < 1 for cosine, warmup_steps < 1 for
  // warm-up, warm-up not shorter than the cosine's total, negative rates.
  Status validate() const;
  double lr_at(int64_t step) const;
};

}  // namespace tessel::optim
