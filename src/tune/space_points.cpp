// Concrete tuning spaces and their model features (see space_points.h).
#include "tune/space_points.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <optional>

#include "tile/ir/visitor.h"
#include "tile/passes/specialize.h"

namespace tessel::tune {

namespace {

// The value of a grid extent after specialisation: numbers, sizes and integer operators.
std::optional<int64_t> extent_value(const tile::Expr& e,
                                    const std::map<std::string, int64_t>& sizes) {
  if (auto* i = e->as<tile::IntImm>()) return i->value;
  if (auto* v = e->as<tile::Var>()) {
    auto it = sizes.find(v->name);
    if (it == sizes.end()) return std::nullopt;
    return it->second;
  }
  auto* b = e->as<tile::Binary>();
  if (b == nullptr) return std::nullopt;
  auto x = extent_value(b->a, sizes), y = extent_value(b->b, sizes);
  if (!x || !y) return std::nullopt;
  switch (b->op) {
    case tile::BinaryOp::kAdd:
      return *x + *y;
    case tile::BinaryOp::kSub:
      return *x - *y;
    case tile::BinaryOp::kMul:
      return *x * *y;
    case tile::BinaryOp::kDiv:
      return *y == 0 ? std::nullopt : std::optional(*x / *y);
    case tile::BinaryOp::kCDiv:
      return *y <= 0 ? std::nullopt : std::optional((*x + *y - 1) / *y);
    case tile::BinaryOp::kMin:
      return std::min(*x, *y);
    case tile::BinaryOp::kMax:
      return std::max(*x, *y);
    default:
      return std::nullopt;
  }
}

// Blocks, their balance over `workers`, the useful share of the padded work, and fast-memory
// bytes, of the specialised kernel.
std::vector<double> ir_features(const tile::Kernel& k, const std::map<std::string, int64_t>& sizes,
                                int workers, int64_t fast_memory) {
  double blocks = 1, useful = 1;
  for (const tile::Expr& e : k.grid()->extents) {
    const double n = static_cast<double>(extent_value(e, sizes).value_or(1));
    blocks *= std::max(1.0, n);
    // cdiv(X, B) covers ceil(X / B) * B of X's elements.
    if (auto* b = e->as<tile::Binary>(); b && b->op == tile::BinaryOp::kCDiv) {
      auto x = extent_value(b->a, sizes), y = extent_value(b->b, sizes);
      if (x && y && *x > 0) useful *= static_cast<double>(*x) / (n * static_cast<double>(*y));
    }
  }
  struct Allocs : tile::IRVisitor {
    int64_t bytes = 0;
    void visit_node(const tile::Alloc* a) override {
      bytes += a->buffer->const_elements() * a->buffer->dtype.bytes();
    }
  } allocs;
  allocs.visit(k.body);
  const double w = std::max(1, workers);
  const double balance = blocks / (std::ceil(blocks / w) * w);
  return {
      std::log2(blocks) / 16.0, balance, useful,
      static_cast<double>(allocs.bytes) / static_cast<double>(std::max<int64_t>(fast_memory, 1))};
}

}  // namespace

namespace {

// The kernel's integer parameters with the target's defaults applied.
std::map<std::string, int64_t> kernel_int_defaults(const tile::Kernel& kernel,
                                                   const std::string& target) {
  std::map<std::string, int64_t> env;
  for (const tile::Param& p : kernel.params)
    if (!p.is_dtype) env[p.name] = p.int_value;
  for (const tile::TargetDefaults& d : kernel.target_defaults) {
    const bool applies = d.target == target || (d.target == "gpu" && target != "cpu");
    if (!applies) continue;
    for (const auto& [name, value] : d.values)
      if (auto* p = kernel.find_param(name); p && !p->is_dtype) env[name] = std::stoll(value);
  }
  return env;
}

}  // namespace

std::map<std::string, std::string> kernel_space_defaults(const tile::TuneSpace& space,
                                                         const tile::Kernel& kernel,
                                                         const std::string& target) {
  const std::map<std::string, int64_t> env = kernel_int_defaults(kernel, target);
  std::map<std::string, std::string> out;
  for (const tile::SpaceParam& p : space.params) {
    auto it = env.find(p.name);
    out[p.name] = std::to_string(it == env.end() ? 0 : it->second);
  }
  return out;
}

Expected<SpacePoints> space_points(const tile::TuneSpace& space, const tile::Kernel& kernel,
                                   const std::map<std::string, std::string>& fixed,
                                   const std::string& target, const DeviceLimits& limits,
                                   int workers, const std::map<std::string, int64_t>& sizes,
                                   const std::map<std::string, std::string>& baseline) {
  // The values constraints see: the kernel's defaults on this target, the fixed parameters,
  // the device's limits; each point adds its own.
  TESSEL_TRY(tile::specialize(kernel, fixed, target).status());  // names the bad parameter
  std::map<std::string, int64_t> env = kernel_int_defaults(kernel, target);
  std::map<std::string, std::string> default_text = kernel_space_defaults(space, kernel, target);
  for (const auto& [name, value] : baseline)
    if (default_text.count(name)) default_text[name] = value;
  for (const auto& [name, value] : fixed) {
    auto* p = kernel.find_param(name);
    if (p && !p->is_dtype) env[name] = std::stoll(value);
  }
  int element_bytes = 4;
  if (auto it = fixed.find("T"); it != fixed.end())
    element_bytes = (it->second == "bf16" || it->second == "f16") ? 2 : it->second == "f64" ? 8 : 4;
  env["FAST_MEMORY"] = limits.fast_memory_bytes;
  env["MAX_THREADS"] = limits.max_threads_per_block;
  env["COMPUTE_UNITS"] = limits.compute_units;
  env["ELEMENT_BYTES"] = element_bytes;

  SpacePoints out;
  out.defaults = default_text;
  // One point: its features from the kernel specialised there; false when it does not specialise.
  auto add_point = [&](const std::map<std::string, int64_t>& point, std::vector<int> coords,
                       std::vector<double> features) {
    std::map<std::string, std::string> params = fixed, tuned;
    for (const tile::SpaceParam& p : space.params)
      params[p.name] = tuned[p.name] = std::to_string(point.at(p.name));
    Expected<tile::Kernel> k = tile::specialize(kernel, params, target);
    if (!k.ok()) return false;
    for (double f : ir_features(*k, sizes, workers, limits.fast_memory_bytes))
      features.push_back(f);
    if (tuned == default_text) out.default_index = static_cast<int>(out.points.size());
    out.points.push_back(std::move(tuned));
    out.coords.push_back(std::move(coords));
    out.features.push_back(std::move(features));
    return true;
  };
  // A value's position in a parameter's list, or that of the nearest value (off-grid baselines).
  auto position = [](const tile::SpaceParam& p, int64_t v) {
    int best = 0;
    for (int i = 0; i < static_cast<int>(p.values.size()); ++i)
      if (std::llabs(p.values[i] - v) < std::llabs(p.values[best] - v)) best = i;
    return best;
  };
  auto coords_and_features = [&](const std::map<std::string, int64_t>& point) {
    std::pair<std::vector<int>, std::vector<double>> cf;
    for (const tile::SpaceParam& p : space.params) {
      const int index = position(p, point.at(p.name));
      cf.first.push_back(index);
      cf.second.push_back(p.values.size() > 1 ? index / static_cast<double>(p.values.size() - 1)
                                              : 0.0);
    }
    return cf;
  };
  for (int64_t i = 0; i < space.size(); ++i) {
    std::map<std::string, int64_t> point = space.point(i);
    std::map<std::string, int64_t> values = env;
    for (const tile::SpaceParam& p : space.params)
      values[p.name] = point[p.name];
    if (!tile::satisfies(space, values)) continue;
    auto [coords, features] = coords_and_features(point);
    add_point(point, std::move(coords), std::move(features));
  }
  // The baseline is a point whatever the grid and its constraints say: it is what launches
  // untuned (gemm's CPU defaults take more than a 512 KiB L2, which its `require` rules out).
  if (out.default_index < 0) {
    std::map<std::string, int64_t> point;
    for (const auto& [name, value] : default_text)
      point[name] = std::stoll(value);
    auto [coords, features] = coords_and_features(point);
    add_point(point, std::move(coords), std::move(features));
  }
  if (out.points.empty())
    return invalid_argument("{}: no point of the space of '{}' on {} meets its constraints",
                            space.loc.to_string(), space.kernel, target);
  return out;
}

}  // namespace tessel::tune
