// Learning-rate schedules (see schedule.h).
#include "optim/schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace tessel::optim {
namespace {

double cosine(int64_t t, int64_t total, double base, double min) {
  double progress =
      static_cast<double>(std::clamp<int64_t>(t, 0, total)) / static_cast<double>(total);
  return min + (base - min) * 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
}

}  // namespace

Expected<ScheduleKind> parse_schedule_kind(std::string_view name) {
  if (name == "constant") return ScheduleKind::kConstant;
  if (name == "cosine") return ScheduleKind::kCosine;
  if (name == "warmup_constant") return ScheduleKind::kWarmupConstant;
  if (name == "warmup_cosine") return ScheduleKind::kWarmupCosine;
  return invalid_argument(
      "unknown schedule '{}': expected constant, cosine, warmup_constant or warmup_cosine", name);
}

Status Schedule::validate() const {
  if (base_lr < 0 || min_lr < 0)
    return invalid_argument("schedule: learning rates must be >= 0 (base_lr {}, min_lr {})",
                            base_lr, min_lr);
  bool warmup = kind == ScheduleKind::kWarmupConstant || kind == ScheduleKind::kWarmupCosine;
  bool cos = kind == ScheduleKind::kCosine || kind == ScheduleKind::kWarmupCosine;
  if (warmup && warmup_steps < 1)
    return invalid_argument("schedule: warmup_steps must be >= 1, got {}", warmup_steps);
  if (cos && total_steps <= (warmup ? warmup_steps : 0))
    return invalid_argument("schedule: total_steps ({}) must exceed warmup_steps ({})", total_steps,
                            warmup ? warmup_steps : 0);
  return ok_status();
}

double Schedule::lr_at(int64_t step) const {
  switch (kind) {
    case ScheduleKind::kConstant:
      return base_lr;
    case ScheduleKind::kCosine:
      return cosine(step, total_steps, base_lr, min_lr);
    case ScheduleKind::kWarmupConstant:
    case ScheduleKind::kWarmupCosine:
      if (step < warmup_steps)
        return base_lr * static_cast<double>(step + 1) / static_cast<double>(warmup_steps);
      if (kind == ScheduleKind::kWarmupConstant) return base_lr;
      return cosine(step - warmup_steps, total_steps - warmup_steps, base_lr, min_lr);
  }
  return base_lr;
}

}  // namespace tessel::optim
