// Per-launch algorithm choices (see algorithm_choice.h).
#include "ops/algorithm_choice.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <set>

#include "ops/conv_algorithms.h"
#include "ops/tuned_launch.h"
#include "support/hash.h"
#include "tune/choices.h"

namespace tessel::ops {

namespace {

// Per thread: point name -> forced algorithm.
std::map<std::string, std::string>& forced() {
  thread_local std::map<std::string, std::string> f;
  return f;
}

struct AlgorithmRecorder {
  std::mutex mutex;
  std::vector<AlgorithmLaunch> launches;
  std::set<std::string> seen;
};
AlgorithmRecorder& algorithm_recorder() {
  static AlgorithmRecorder r;
  return r;
}

bool known(const AlgorithmPoint& point, const std::string& algorithm) {
  return std::find(point.algorithms.begin(), point.algorithms.end(), algorithm) !=
         point.algorithms.end();
}

void record(const AlgorithmPoint& point, Device* device, DType dtype,
            const std::vector<int64_t>& sizes, const std::string& rule) {
  std::string id = point.name + "|" + device->id() + "|" + dtype_name(dtype);
  for (int64_t s : sizes) {
    id += ',';
    id += std::to_string(s);
  }
  AlgorithmRecorder& r = algorithm_recorder();
  std::lock_guard<std::mutex> lock(r.mutex);
  if (r.seen.insert(id).second) r.launches.push_back({&point, device, dtype, sizes, rule});
}

}  // namespace

const std::vector<const AlgorithmPoint*>& algorithm_points() {
  static const std::vector<const AlgorithmPoint*> points = conv_algorithm_points();
  return points;
}

Expected<const AlgorithmPoint*> find_algorithm_point(const std::string& name) {
  std::string names;
  for (const AlgorithmPoint* p : algorithm_points()) {
    if (p->name == name) return p;
    names += (names.empty() ? "" : ", ") + p->name;
  }
  return not_found("no algorithm choice point '{}' (there are: {})", name, names);
}

std::string algorithm_params(const std::string& algorithm) {
  return "ALGO=" + algorithm;
}

std::string algorithm_of_params(const std::string& params) {
  auto parsed = tune::parse_params(params);
  auto it = parsed.find("ALGO");
  return it == parsed.end() ? "" : it->second;
}

std::string algorithm_source_hash(const std::string& point,
                                  const std::vector<std::string>& algorithms,
                                  const std::vector<std::string>& kernels) {
  std::string basis = point;
  for (const std::string& a : algorithms) {
    basis += ',';
    basis += a;
  }
  for (const std::string& k : kernels) {
    basis += '|';
    basis += kernel_source_hash(k);
  }
  return hash_hex(hash_text(basis));
}

tune::TuneKey algorithm_key(const AlgorithmPoint& point, Device* device, DType dtype,
                            const std::vector<int64_t>& sizes) {
  tune::TuneKey key;
  key.kernel = point.name;
  key.source_hash = point.source_hash;
  key.device = cached_device_fingerprint(device);
  key.dtype = dtype_name(dtype);
  const size_t n_shape = std::min(point.shape_names.size(), sizes.size());
  key.shape.assign(sizes.begin(), sizes.begin() + static_cast<std::ptrdiff_t>(n_shape));
  std::map<std::string, std::string> fixed;
  for (size_t i = 0; i < point.fixed_names.size() && n_shape + i < sizes.size(); ++i)
    fixed[point.fixed_names[i]] = std::to_string(sizes[n_shape + i]);
  key.fixed = tune::params_string(fixed);
  return key;
}

Expected<std::string> choose_algorithm(const AlgorithmPoint& point, Device* device, DType dtype,
                                       const std::vector<int64_t>& sizes, const std::string& rule) {
  const std::map<std::string, std::string>& f = forced();
  if (auto it = f.find(point.name); it != f.end() && point.applies(it->second, device, sizes))
    return it->second;
  if (recording_tunable_launches()) record(point, device, dtype, sizes, rule);
  tune::TuneChoices& choices = tune::TuneChoices::global();
  if (!choices.active()) return rule;
  TESSEL_ASSIGN_OR_RETURN(std::string params,
                          choices.choose(algorithm_key(point, device, dtype, sizes)));
  const std::string chosen = algorithm_of_params(params);
  if (!chosen.empty() && known(point, chosen) && point.applies(chosen, device, sizes))
    return chosen;
  return rule;
}

ForceAlgorithm::ForceAlgorithm(std::string point, std::string algorithm)
    : point_(std::move(point)) {
  std::map<std::string, std::string>& f = forced();
  if (auto it = f.find(point_); it != f.end()) previous_ = it->second;
  f[point_] = std::move(algorithm);
}

ForceAlgorithm::~ForceAlgorithm() {
  if (previous_.empty())
    forced().erase(point_);
  else
    forced()[point_] = previous_;
}

std::vector<AlgorithmLaunch> recorded_algorithm_launches() {
  AlgorithmRecorder& r = algorithm_recorder();
  std::lock_guard<std::mutex> lock(r.mutex);
  return r.launches;
}

void clear_recorded_algorithm_launches() {
  AlgorithmRecorder& r = algorithm_recorder();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.launches.clear();
  r.seen.clear();
}

}  // namespace tessel::ops
