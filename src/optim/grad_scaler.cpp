// Dynamic loss scaling (see grad_scaler.h).
#include "optim/grad_scaler.h"

#include <charconv>
#include <cstdio>
#include <cmath>

#include "ops/kernel_cache.h"
#include "optim/clip.h"

namespace tessel::optim {

GradScaler::GradScaler(GradScalerOptions options) : options_(options), scale_(options.init_scale) {}

Expected<bool> GradScaler::unscale(const nn::FlatParameters& params) const {
  const double inverse = 1.0 / scale_;  // exact: the scale is a power of two
  for (const auto& group : params.groups()) {
    const int64_t n = group.grads.numel();
    if (n == 0) continue;
    // unary with OP 0 is y = scale * x; in place is safe (each element reads only itself).
    ops::View flat{group.grads, {1, 1, n}, {n, n, 1}};
    TESSEL_TRY(ops::launch_kernel("unary", {{"OP", "0"}}, {flat, flat, inverse}));
  }
  // An inf or NaN anywhere makes the sum of squares inf or NaN. (A finite sum overflows only for
  // gradients beyond ~1e19, which would wreck the step just as surely.)
  TESSEL_ASSIGN_OR_RETURN(double norm, global_grad_norm(params));
  return !std::isfinite(norm);
}

void GradScaler::update(bool found_inf) {
  if (found_inf) {
    scale_ *= options_.backoff_factor;
    clean_steps_ = 0;
    return;
  }
  if (++clean_steps_ >= options_.growth_interval) {
    scale_ *= options_.growth_factor;
    clean_steps_ = 0;
  }
}

std::map<std::string, std::string> GradScaler::state() const {
  // %.17g round-trips a double exactly.
  char buffer[32];
  std::snprintf(buffer, sizeof(buffer), "%.17g", scale_);
  return {{"scale", buffer}, {"clean_steps", std::to_string(clean_steps_)}};
}

Status GradScaler::restore(const std::map<std::string, std::string>& state) {
  auto scale = state.find("scale");
  auto clean = state.find("clean_steps");
  if (scale == state.end() || clean == state.end())
    return invalid_argument("loss scaler state needs 'scale' and 'clean_steps'");
  char* end = nullptr;
  const double s = std::strtod(scale->second.c_str(), &end);
  if (end == scale->second.c_str() || *end != '\0' || !(s > 0) || !std::isfinite(s))
    return invalid_argument("loss scaler state: scale '{}' is not a positive number",
                            scale->second);
  int64_t steps = 0;
  const std::string& text = clean->second;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), steps);
  if (ec != std::errc() || ptr != text.data() + text.size() || steps < 0)
    return invalid_argument("loss scaler state: clean_steps '{}' is not a count", text);
  scale_ = s;
  clean_steps_ = steps;
  return ok_status();
}

}  // namespace tessel::optim
