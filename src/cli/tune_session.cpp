// One tuning session (see tune_session.h).
#include "cli/tune_session.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <sstream>

#include "cli/tune_trial.h"
#include "ops/tuned_launch.h"
#include "runtime/device.h"
#include "support/thread_pool.h"
#include "tune/fingerprint.h"
#include "tune/search.h"

namespace tessel::cli {

namespace {

std::vector<std::string> size_names(const tile::Kernel& k) {
  std::vector<std::string> names;
  for (const tile::Expr& s : k.sizes)
    names.push_back(s->as<tile::Var>()->name);
  return names;
}

}  // namespace

Expected<std::map<std::string, int64_t>> parse_sizes_for(const std::string& kernel,
                                                         const std::string& text) {
  TESSEL_ASSIGN_OR_RETURN(const tile::Kernel* k, ops::embedded_kernel(kernel));
  const std::vector<std::string> names = size_names(*k);
  std::map<std::string, int64_t> sizes;
  if (text.find('=') == std::string::npos) {
    TESSEL_ASSIGN_OR_RETURN(std::vector<int64_t> dims, tune::parse_shape(text));
    if (dims.size() != names.size())
      return invalid_argument("--shape {}: kernel '{}' has {} sizes ({})", text, kernel,
                              names.size(), fmt::join(names, ", "));
    for (size_t i = 0; i < dims.size(); ++i)
      sizes[names[i]] = dims[i];
    return sizes;
  }
  std::stringstream in(text);
  std::string part;
  while (std::getline(in, part, ',')) {
    const size_t eq = part.find('=');
    char* end = nullptr;
    const long long v = eq == std::string::npos ? 0 : std::strtoll(part.c_str() + eq + 1, &end, 10);
    if (eq == std::string::npos || *end != '\0' || v <= 0)
      return invalid_argument("--shape {}: '{}' is not NAME=SIZE", text, part);
    sizes[part.substr(0, eq)] = v;
  }
  for (const std::string& n : names)
    if (!sizes.count(n))
      return invalid_argument("--shape {}: kernel '{}' needs {} ({})", text, kernel, n,
                              fmt::join(names, ", "));
  return sizes;
}

std::string sizes_text(const std::string& kernel, const std::map<std::string, int64_t>& sizes) {
  Expected<const tile::Kernel*> k = ops::embedded_kernel(kernel);
  std::string s;
  if (!k.ok()) return s;
  for (const std::string& n : size_names(**k)) {
    auto it = sizes.find(n);
    s += fmt::format("{}{}={}", s.empty() ? "" : " ", n, it == sizes.end() ? 0 : it->second);
  }
  return s;
}

double launch_flops(const std::string& kernel, const std::map<std::string, int64_t>& sizes) {
  auto get = [&](const char* n) {
    auto it = sizes.find(n);
    return it == sizes.end() ? 1.0 : static_cast<double>(it->second);
  };
  if (kernel == "gemm") return 2 * get("M") * get("N") * get("K");
  if (kernel == "batched_gemm") return 2 * get("Z") * get("M") * get("N") * get("K");
  if (kernel == "conv_gemm") return 2 * get("Z") * get("G") * get("M") * get("N") * get("K");
  return 0;
}

Expected<PreparedTarget> prepare_target(const TuneTarget& target) {
  TESSEL_ASSIGN_OR_RETURN(Device * device, get_device(target.device));
  TESSEL_ASSIGN_OR_RETURN(const tile::Kernel* kernel, ops::embedded_kernel(target.kernel));
  const std::string kind = ops::tune_target_name(device->kind());
  const tile::TuneSpace* space = tile::find_space(ops::kernel_tune_spaces(), target.kernel, kind);
  if (space == nullptr)
    return not_found(
        "kernel '{}' declares no tuning space for {} (kernels/*.tile: tune {} on "
        "{} {{ ... }})",
        target.kernel, kind, target.kernel, kind);
  const DeviceLimits limits = device->limits();
  const int workers = device->kind() == DeviceKind::kCpu ? ThreadPool::global().num_threads()
                                                         : limits.compute_units;
  PreparedTarget out;
  TESSEL_ASSIGN_OR_RETURN(out.space, tune::space_points(*space, *kernel, target.fixed, kind, limits,
                                                        workers, target.sizes, target.baseline));
  out.space_loc = space->loc.to_string();
  // The key as the op library computes it at launch.
  out.key.kernel = target.kernel;
  out.key.source_hash = ops::kernel_source_hash(target.kernel);
  out.key.device = tune::device_fingerprint(device);
  auto t = target.fixed.find("T");
  out.key.dtype = t == target.fixed.end() ? "f32" : t->second;
  std::map<std::string, std::string> rest;
  for (const auto& [name, value] : target.fixed)
    if (name != "T" && ops::differs_from_default(*kernel, name, value)) rest[name] = value;
  out.key.fixed = tune::params_string(rest);
  for (const std::string& n : size_names(*kernel))
    out.key.shape.push_back(target.sizes.count(n) ? target.sizes.at(n) : 0);
  return out;
}

double paired_cost(const TrialResult& r, double* reference_seconds) {
  if (!(*reference_seconds > 0)) *reference_seconds = r.default_seconds;
  return r.ratio * *reference_seconds;
}

namespace {

// One timing among a search's trials is luck on a shared machine. So the search's best and the
// kernel's defaults are timed again, launch by launch in turns inside one child process (a
// neighbour's load hits both alike), in `confirm_rounds` children; the best is chosen only when
// the median of the rounds' time ratios is below 1 - margin and no round has it slower.
// Otherwise the defaults are chosen: the op library then runs exactly what it runs untuned.
Status confirm_best(const TuneTarget& target, const PreparedTarget& prepared,
                    const tune::SpacePoints& space, int best, const TuneLimits& limits,
                    tune::TuneDb* db, std::FILE* progress, TuneOutcome* out) {
  std::string chosen = out->default_params;
  double chosen_seconds = out->default_seconds;
  std::string why = "the defaults were the best point";
  if (best != space.default_index) {
    std::vector<double> best_times, default_times;
    for (int round = 0; round < limits.confirm_rounds; ++round) {
      TrialRequest request{target.kernel, target.device, target.fixed, target.sizes};
      request.baseline = target.baseline;
      for (const auto& [name, value] : space.points[best])
        request.params[name] = value;
      request.seconds = limits.confirm_seconds;
      request.versus_defaults = true;
      TrialResult r = run_trial(request);
      if (r.status != "ok" || !(r.ratio > 0)) break;
      out->confirm_ratios.push_back(r.ratio);
      best_times.push_back(r.seconds);
      default_times.push_back(r.default_seconds);
    }
    std::vector<double> ratios = out->confirm_ratios;
    std::sort(ratios.begin(), ratios.end());
    const double median_ratio = tune::median_of(ratios);
    const bool confirmed =
        tune::confirmed_faster(ratios, limits.confirm_rounds, limits.confirm_margin);
    // Both from the same rounds, so the summary's ratio is the confirmation's.
    if (!default_times.empty()) out->default_seconds = tune::median_of(default_times);
    if (!best_times.empty()) out->best_seconds = tune::median_of(best_times);
    why = fmt::format("best/defaults time ratio {:.3f} (median of {} rounds, worst {:.3f})",
                      ratios.empty() ? 1.0 : median_ratio, ratios.size(),
                      ratios.empty() ? 0.0 : ratios.back());
    if (confirmed) {
      chosen = out->best_params;
      chosen_seconds = tune::median_of(best_times);
      why = "faster than the defaults: " + why;
    } else {
      chosen_seconds = out->default_seconds;
      why = fmt::format("defaults kept: {} (needs <= {:.3f}, every round < 1)", why,
                        1.0 - limits.confirm_margin);
    }
    if (progress)
      std::fprintf(progress, "  confirmation of %s: %s\n", out->best_params.c_str(), why.c_str());
  }
  out->chosen_params = chosen;
  if (db && chosen_seconds > 0)
    TESSEL_TRY(db->choose({prepared.key, chosen, "ok", chosen_seconds,
                           std::string(tune::kChosenPrefix) + " " + why}));
  return ok_status();
}

}  // namespace

Expected<TuneOutcome> tune_target(const TuneTarget& target, const TuneLimits& limits,
                                  tune::TuneDb* db, std::FILE* progress) {
  TESSEL_ASSIGN_OR_RETURN(PreparedTarget prepared, prepare_target(target));
  const tune::SpacePoints& space = prepared.space;
  tune::SearchOptions options;
  options.seed = limits.seed;
  options.first = space.default_index;
  options.patience = limits.patience;
  tune::Search search(space.coords, space.features, options);
  TuneOutcome out;
  out.target = target;
  out.key = prepared.key;
  if (space.default_index >= 0)
    out.default_params = tune::params_string(space.points[space.default_index]);
  const double flops = launch_flops(target.kernel, target.sizes);
  const auto start = std::chrono::steady_clock::now();
  double reference_seconds = 0;  // the defaults' time in the first trial (paired_cost)
  if (progress)
    std::fprintf(progress, "tune %s %s on %s: %zu points (%s), budget %d trials\n",
                 target.kernel.c_str(), sizes_text(target.kernel, target.sizes).c_str(),
                 target.device.c_str(), space.points.size(), prepared.space_loc.c_str(),
                 limits.budget);
  while (!search.done() && out.trials < limits.budget) {
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (limits.seconds > 0 && elapsed >= limits.seconds) break;
    const int p = search.next();
    if (p < 0) break;
    TrialRequest request{target.kernel, target.device, target.fixed, target.sizes};
    request.baseline = target.baseline;
    for (const auto& [name, value] : space.points[p])
      request.params[name] = value;
    request.versus_defaults = true;
    TrialResult r = run_trial(request);
    ++out.trials;
    const bool ok = r.status == "ok" && r.ratio > 0;
    if (!ok) ++out.failed;
    if (ok) r.seconds = paired_cost(r, &reference_seconds);
    search.report(p, ok ? r.seconds : std::numeric_limits<double>::infinity());
    if (p == space.default_index && ok) out.default_seconds = r.seconds;
    if (db) {
      tune::Trial t{prepared.key, tune::params_string(space.points[p]), r.status, r.seconds,
                    r.detail};
      TESSEL_TRY(db->record(t));
    }
    if (progress) {
      std::string how = ok ? fmt::format("{:8.3f} ms", r.seconds * 1e3) : r.status;
      if (ok && flops > 0) how += fmt::format("  {:7.1f} GFLOP/s", flops / r.seconds * 1e-9);
      std::fprintf(progress, "  [%2d/%d] %-24s %s   best %.3f ms\n", out.trials, limits.budget,
                   tune::params_string(space.points[p]).c_str(), how.c_str(),
                   std::isfinite(search.best_cost()) ? search.best_cost() * 1e3 : 0.0);
      if (!ok && !r.detail.empty())
        std::fprintf(progress, "         %s\n", r.detail.substr(0, 200).c_str());
      std::fflush(progress);
    }
  }
  if (search.best() >= 0) {
    out.best_params = tune::params_string(space.points[search.best()]);
    out.best_seconds = search.best_cost();
  }
  out.default_params = tune::params_string(space.defaults);
  if (search.best() < 0 || limits.confirm_rounds <= 0) return out;
  TESSEL_TRY(confirm_best(target, prepared, space, search.best(), limits, db, progress, &out));
  return out;
}

}  // namespace tessel::cli
