// Parameter initialisers with PyTorch's formulas (torch.nn.init), drawing from a seeded PCG32 so
// that a seed gives the same weights on every platform and compiler.
//
//   Pcg32 rng(seed);
//   TESSEL_TRY(kaiming_uniform(w, rng, {.a = std::sqrt(5.0)}));   // nn.Linear's default weight
//   TESSEL_TRY(xavier_normal(w, rng, calculate_gain(Nonlinearity::kTanh)));
//
// Fans follow torch.nn.init._calculate_fan_in_and_fan_out: a weight [out, in, k...] has
// fan_in = in * prod(k) and fan_out = out * prod(k); a 1-D tensor has no fans (an error, as in
// PyTorch). Values are drawn on the host in row-major order (uniform: 24-bit PCG32 floats; normal:
// Box-Muller on pairs of them) and copied to the tensor, which may be any view on any device.
#pragma once

#include <cstdint>

#include "support/random.h"
#include "runtime/tensor.h"
#include "support/status.h"

namespace tessel::nn {

enum class FanMode { kFanIn, kFanOut };
enum class Nonlinearity { kLinear, kSigmoid, kTanh, kRelu, kLeakyRelu };

// torch.nn.init.calculate_gain; `param` is leaky_relu's negative slope.
double calculate_gain(Nonlinearity nonlinearity, double param = 0.01);

struct Fans {
  int64_t fan_in = 0;
  int64_t fan_out = 0;
};
Expected<Fans> compute_fans(const Shape& shape);

struct KaimingOptions {
  double a = 0.0;  // leaky_relu's negative slope (used when nonlinearity is kLeakyRelu)
  FanMode mode = FanMode::kFanIn;
  Nonlinearity nonlinearity = Nonlinearity::kLeakyRelu;
};

Status uniform(Tensor& t, Pcg32& rng, double low = 0.0, double high = 1.0);
Status normal(Tensor& t, Pcg32& rng, double mean = 0.0, double std = 1.0);
Status constant(Tensor& t, double value);
Status zeros(Tensor& t);
Status ones(Tensor& t);
// U(-b, b), b = gain * sqrt(3 / fan).
Status kaiming_uniform(Tensor& t, Pcg32& rng, const KaimingOptions& options = {});
// N(0, std^2), std = gain / sqrt(fan).
Status kaiming_normal(Tensor& t, Pcg32& rng, const KaimingOptions& options = {});
// U(-b, b), b = gain * sqrt(6 / (fan_in + fan_out)).
Status xavier_uniform(Tensor& t, Pcg32& rng, double gain = 1.0);
// N(0, std^2), std = gain * sqrt(2 / (fan_in + fan_out)).
Status xavier_normal(Tensor& t, Pcg32& rng, double gain = 1.0);

}  // namespace tessel::nn
