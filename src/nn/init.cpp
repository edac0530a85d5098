// Initialisers (see init.h): closed-form bounds from the fans, values drawn on the host.
#include "nn/init.h"

#include <cmath>
#include <numbers>
#include <vector>

namespace tessel::nn {
namespace {

// Writes host values (row-major) into t, converting to its dtype.
Status write_values(Tensor& t, const std::vector<double>& values) {
  if (!t.defined()) return failed_precondition("initialising an undefined tensor");
  if (!is_floating_point(t.dtype()))
    return invalid_argument("initialisers need a floating-point tensor, got {}",
                            dtype_name(t.dtype()));
  TESSEL_ASSIGN_OR_RETURN(Tensor host, Tensor::empty(t.shape(), t.dtype()));
  auto* bytes = static_cast<unsigned char*>(host.storage()->host_address()) + host.offset_bytes();
  for (size_t i = 0; i < values.size(); ++i)
    store_scalar(t.dtype(), values[i], bytes + i * host.element_size());
  return t.copy_from(host);
}

// A standard normal draw from two uniforms (Box-Muller); u1 in (0, 1].
double standard_normal(Pcg32& rng, double* spare, bool* has_spare) {
  if (*has_spare) {
    *has_spare = false;
    return *spare;
  }
  double u1 = 1.0 - static_cast<double>(rng.next_float());
  double u2 = static_cast<double>(rng.next_float());
  double r = std::sqrt(-2.0 * std::log(u1));
  *spare = r * std::sin(2.0 * std::numbers::pi * u2);
  *has_spare = true;
  return r * std::cos(2.0 * std::numbers::pi * u2);
}

Expected<double> kaiming_std(const Tensor& t, const KaimingOptions& o) {
  TESSEL_ASSIGN_OR_RETURN(Fans fans, compute_fans(t.shape()));
  int64_t fan = o.mode == FanMode::kFanIn ? fans.fan_in : fans.fan_out;
  if (fan == 0) return invalid_argument("kaiming init of a tensor with a zero fan");
  return calculate_gain(o.nonlinearity, o.a) / std::sqrt(static_cast<double>(fan));
}

Expected<double> xavier_std(const Tensor& t, double gain) {
  TESSEL_ASSIGN_OR_RETURN(Fans fans, compute_fans(t.shape()));
  if (fans.fan_in + fans.fan_out == 0) return invalid_argument("xavier init with zero fans");
  return gain * std::sqrt(2.0 / static_cast<double>(fans.fan_in + fans.fan_out));
}

}  // namespace

double calculate_gain(Nonlinearity nonlinearity, double param) {
  switch (nonlinearity) {
    case Nonlinearity::kLinear:
    case Nonlinearity::kSigmoid:
      return 1.0;
    case Nonlinearity::kTanh:
      return 5.0 / 3.0;
    case Nonlinearity::kRelu:
      return std::sqrt(2.0);
    case Nonlinearity::kLeakyRelu:
      return std::sqrt(2.0 / (1.0 + param * param));
  }
  return 1.0;
}

Expected<Fans> compute_fans(const Shape& shape) {
  if (shape.size() < 2)
    return invalid_argument("fan in and fan out need a tensor of rank 2 or more, got shape {}",
                            shape_string(shape));
  int64_t receptive = 1;
  for (size_t d = 2; d < shape.size(); ++d)
    receptive *= shape[d];
  return Fans{shape[1] * receptive, shape[0] * receptive};
}

Status uniform(Tensor& t, Pcg32& rng, double low, double high) {
  std::vector<double> values(static_cast<size_t>(t.numel()));
  for (double& v : values)
    v = low + (high - low) * static_cast<double>(rng.next_float());
  return write_values(t, values);
}

Status normal(Tensor& t, Pcg32& rng, double mean, double std) {
  std::vector<double> values(static_cast<size_t>(t.numel()));
  double spare = 0;
  bool has_spare = false;
  for (double& v : values)
    v = mean + std * standard_normal(rng, &spare, &has_spare);
  return write_values(t, values);
}

Status constant(Tensor& t, double value) {
  if (!t.defined()) return failed_precondition("initialising an undefined tensor");
  return t.fill(value);
}
Status zeros(Tensor& t) {
  return constant(t, 0.0);
}
Status ones(Tensor& t) {
  return constant(t, 1.0);
}

Status kaiming_uniform(Tensor& t, Pcg32& rng, const KaimingOptions& options) {
  TESSEL_ASSIGN_OR_RETURN(double std, kaiming_std(t, options));
  double bound = std::sqrt(3.0) * std;
  return uniform(t, rng, -bound, bound);
}

Status kaiming_normal(Tensor& t, Pcg32& rng, const KaimingOptions& options) {
  TESSEL_ASSIGN_OR_RETURN(double std, kaiming_std(t, options));
  return normal(t, rng, 0.0, std);
}

Status xavier_uniform(Tensor& t, Pcg32& rng, double gain) {
  TESSEL_ASSIGN_OR_RETURN(double std, xavier_std(t, gain));
  double bound = std::sqrt(3.0) * std;
  return uniform(t, rng, -bound, bound);
}

Status xavier_normal(Tensor& t, Pcg32& rng, double gain) {
  TESSEL_ASSIGN_OR_RETURN(double std, xavier_std(t, gain));
  return normal(t, rng, 0.0, std);
}

}  // namespace tessel::nn
