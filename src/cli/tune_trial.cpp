// Tuning trials in child processes (see tune_trial.h).
#include "cli/tune_trial.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/self_path.h"
#include "ops/kernel_cache.h"
#include "ops/ops.h"
#include "ops/tuned_launch.h"
#include "support/subprocess.h"
#include "tile/passes/specialize.h"
#include "tune/choices.h"

namespace tessel::cli {

namespace {

nlohmann::json request_json(const TrialRequest& r) {
  return {{"kernel", r.kernel},    {"device", r.device},   {"params", r.params},
          {"sizes", r.sizes},      {"seconds", r.seconds}, {"versus_defaults", r.versus_defaults},
          {"baseline", r.baseline}};
}

// The kernel's arguments at `sizes`: tensors with random values (zeros for outputs are not
// needed: every tensor is compared), scalars 1 except beta = 0.
Expected<std::vector<ops::KernelArg>> make_args(const tile::Kernel& k,
                                                const std::map<std::string, int64_t>& sizes,
                                                Device* device, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<ops::KernelArg> args;
  for (const tile::KernelArg& a : k.args) {
    if (!a.is_tensor()) {
      if (a.scalar->type.is_float()) {
        args.push_back(a.name == "beta" ? 0.0 : 1.0);
      } else {
        args.push_back(int64_t{1});
      }
      continue;
    }
    Shape shape;
    for (const tile::Expr& d : a.tensor->shape) {
      if (auto* i = d->as<tile::IntImm>()) {
        shape.push_back(i->value);
      } else if (auto* v = d->as<tile::Var>()) {
        auto it = sizes.find(v->name);
        if (it == sizes.end())
          return invalid_argument("no size given for '{}' of kernel '{}'", v->name, k.name);
        shape.push_back(it->second);
      }
    }
    std::vector<float> values(static_cast<size_t>(shape_numel(shape)));
    for (float& v : values)
      v = uniform(rng);
    TESSEL_ASSIGN_OR_RETURN(Tensor host, Tensor::from_vector(values, shape));
    TESSEL_ASSIGN_OR_RETURN(DType dtype, parse_dtype(a.tensor->dtype.name()));
    TESSEL_ASSIGN_OR_RETURN(Tensor typed, ops::cast(host, dtype));
    TESSEL_ASSIGN_OR_RETURN(Tensor on_device, typed.to(device));
    args.push_back(on_device);
  }
  return args;
}

Expected<std::vector<std::vector<float>>> tensors_of(const std::vector<ops::KernelArg>& args) {
  std::vector<std::vector<float>> out;
  for (const ops::KernelArg& a : args) {
    const Tensor* t = std::get_if<Tensor>(&a);
    if (t == nullptr) continue;
    TESSEL_ASSIGN_OR_RETURN(Tensor host, t->to(cpu_device()));
    TESSEL_ASSIGN_OR_RETURN(Tensor f, ops::cast(host, DType::kF32));
    TESSEL_ASSIGN_OR_RETURN(std::vector<float> v, f.to_vector<float>());
    out.push_back(std::move(v));
  }
  return out;
}

// The largest |candidate - reference| / (1 + |reference|) over every tensor.
double max_difference(const std::vector<std::vector<float>>& a,
                      const std::vector<std::vector<float>>& b) {
  double worst = 0;
  for (size_t t = 0; t < a.size() && t < b.size(); ++t)
    for (size_t i = 0; i < a[t].size() && i < b[t].size(); ++i) {
      const double d = std::fabs(double(a[t][i]) - b[t][i]) / (1.0 + std::fabs(double(b[t][i])));
      if (!(d <= worst)) worst = std::isnan(d) ? INFINITY : d;
    }
  return worst;
}

// gemm / batched_gemm: C[z, i, j] against sum_p A[z, i, p] B[z, p, j] at sampled (z, i, j),
// from the inputs as the kernel read them (tensors 0 and 1, output tensor 2).
double sampled_gemm_error(const std::vector<std::vector<float>>& t,
                          const std::map<std::string, int64_t>& sizes) {
  const int64_t m = sizes.at("M"), n = sizes.at("N"), k = sizes.at("K");
  const int64_t z = sizes.count("Z") ? sizes.at("Z") : 1;
  std::mt19937_64 rng(7);
  double worst = 0;
  for (int s = 0; s < 256; ++s) {
    const int64_t b = static_cast<int64_t>(rng() % z), i = static_cast<int64_t>(rng() % m),
                  j = static_cast<int64_t>(rng() % n);
    double sum = 0, scale = 0;
    for (int64_t p = 0; p < k; ++p) {
      const double x = double(t[0][(b * m + i) * k + p]) * t[1][(b * k + p) * n + j];
      sum += x;
      scale += std::fabs(x);
    }
    worst = std::max(worst, std::fabs(t[2][(b * m + i) * n + j] - sum) / (1.0 + scale));
  }
  return worst;
}

// Timing a trial. Two things, not the kernel, dominated single launches timed one by one on this
// kind of machine (2 vCPUs, PoCL): the wake-up of the device's threads at every launch and of the
// host thread at every synchronisation (tens to hundreds of microseconds on an idle vCPU), and
// neighbours on a shared machine (the same gemm specialisation on PoCL measured 0.6 to 2.1 ms in
// trials a minute apart, median of each). So launches are timed in batches, back to back and
// synchronised once, long enough that the wake-ups are a few percent (as a training step issues
// them), and a trial's time per launch is its fastest batch (a neighbour only ever adds time).
// That alone does not make trials minutes apart comparable: a neighbour that holds a core for the
// whole 0.15 s trial still slows every batch (one point: 597-1560 us over three trials under a
// compile). The tuner therefore runs trials paired with the defaults (versus_defaults, below) and
// compares their ratios (tune_session.h, paired_cost).
constexpr double kBatchSeconds = 0.003;  // a batch's length, at least
constexpr int kMaxBatch = 64;

// Launches in a batch, from one launch's time.
int batch_size(double one_launch_seconds) {
  if (!(one_launch_seconds > 0)) return kMaxBatch;
  return static_cast<int>(std::clamp(std::ceil(kBatchSeconds / one_launch_seconds), 1.0,
                                     static_cast<double>(kMaxBatch)));
}

// Seconds per launch over a batch of `count` launches and one synchronisation.
Expected<double> time_batch(const std::string& kernel, const ops::KernelParams& params,
                            const std::vector<ops::KernelArg>& args, Device* device, int count) {
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < count; ++i)
    TESSEL_TRY(ops::launch_kernel(kernel, params, args));
  TESSEL_TRY(device->synchronize());
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / count;
}

// The warm-up launch, which also sizes the batches.
Expected<int> warm_up(const std::string& kernel, const ops::KernelParams& params,
                      const std::vector<ops::KernelArg>& args, Device* device) {
  TESSEL_TRY(time_batch(kernel, params, args, device, 1).status());  // first-launch costs
  TESSEL_ASSIGN_OR_RETURN(double once, time_batch(kernel, params, args, device, 1));
  return batch_size(once);
}

// Batches until the time budget is spent: at least 3, at most 1000.
bool timing_done(int batches, double total, double budget) {
  return batches >= 3 && (total >= budget || batches >= 1000);
}

Status time_kernel(const TrialRequest& r, const std::vector<ops::KernelArg>& args, Device* device,
                   double* seconds) {
  TESSEL_ASSIGN_OR_RETURN(int batch, warm_up(r.kernel, r.params, args, device));
  double total = 0, fastest = 0;
  for (int batches = 0; !timing_done(batches, total, r.seconds); ++batches) {
    TESSEL_ASSIGN_OR_RETURN(double t, time_batch(r.kernel, r.params, args, device, batch));
    total += t * batch;
    if (batches == 0 || t < fastest) fastest = t;
  }
  *seconds = fastest;
  return ok_status();
}

// The candidate and the defaults in rounds of one batch each, the order alternating, until the
// budget is spent (at least 9 rounds); the fastest batch of each, and the median over rounds of
// (candidate time / defaults time) within a round.
Status time_versus_defaults(const TrialRequest& r, const ops::KernelParams& defaults,
                            const std::vector<ops::KernelArg>& args,
                            const std::vector<ops::KernelArg>& default_args, Device* device,
                            TrialResult* result) {
  const ops::KernelParams* params[2] = {&r.params, &defaults};
  const std::vector<ops::KernelArg>* launch_args[2] = {&args, &default_args};
  int batch[2];
  for (int i = 0; i < 2; ++i) {
    TESSEL_ASSIGN_OR_RETURN(batch[i], warm_up(r.kernel, *params[i], *launch_args[i], device));
  }
  std::vector<double> ratios;
  double fastest[2] = {0, 0}, total = 0;
  for (int round = 0; round < 9 || !timing_done(round, total, r.seconds); ++round) {
    double t[2];
    for (int turn = 0; turn < 2; ++turn) {
      const int i = (round + turn) % 2;
      TESSEL_ASSIGN_OR_RETURN(t[i],
                              time_batch(r.kernel, *params[i], *launch_args[i], device, batch[i]));
      total += t[i] * batch[i];
      if (round == 0 || t[i] < fastest[i]) fastest[i] = t[i];
    }
    ratios.push_back(t[0] / t[1]);
  }
  std::nth_element(ratios.begin(), ratios.begin() + ratios.size() / 2, ratios.end());
  result->seconds = fastest[0];
  result->default_seconds = fastest[1];
  result->ratio = ratios[ratios.size() / 2];
  return ok_status();
}

// The trial itself; `status` names what failed.
Status trial(const TrialRequest& r, TrialResult* result) {
  tune::TuneChoices::global().use_database("");  // the request's parameters, not the database's
  TESSEL_ASSIGN_OR_RETURN(Device * device, get_device(r.device));
  TESSEL_ASSIGN_OR_RETURN(const tile::Kernel* kernel, ops::embedded_kernel(r.kernel));
  result->status = "compile_error";
  TESSEL_ASSIGN_OR_RETURN(
      tile::Kernel specialised,
      tile::specialize(*kernel, r.params, ops::tune_target_name(device->kind())));
  TESSEL_TRY(ops::prepare_kernel(device, r.kernel, r.params));
  result->status = "error";
  // The default specialisation: the parameters that are not tuned, the baseline's block sizes
  // (the op's rule) or else the kernel's own.
  ops::KernelParams defaults = r.params;
  const tile::TuneSpace* space =
      tile::find_space(ops::kernel_tune_spaces(), r.kernel, ops::tune_target_name(device->kind()));
  if (space != nullptr)
    for (const tile::SpaceParam& p : space->params)
      defaults.erase(p.name);
  for (const auto& [name, value] : r.baseline)
    defaults[name] = value;
  TESSEL_ASSIGN_OR_RETURN(std::vector<ops::KernelArg> ref_args,
                          make_args(specialised, r.sizes, device, 1));
  TESSEL_ASSIGN_OR_RETURN(std::vector<ops::KernelArg> args,
                          make_args(specialised, r.sizes, device, 1));
  TESSEL_TRY(ops::launch_kernel(r.kernel, defaults, ref_args));
  TESSEL_TRY(ops::launch_kernel(r.kernel, r.params, args));
  TESSEL_ASSIGN_OR_RETURN(auto reference, tensors_of(ref_args));
  TESSEL_ASSIGN_OR_RETURN(auto candidate, tensors_of(args));
  const bool bf16 = r.params.count("T") && r.params.at("T") != "f32";
  const double tolerance = bf16 ? 2e-2 : 1e-4;
  double error = max_difference(candidate, reference);
  // The plain product, checked where the launch is one (no bias, no activation).
  auto param_is_zero = [&](const char* name) {
    auto it = r.params.find(name);
    return it == r.params.end() || it->second == "0";
  };
  if ((r.kernel == "gemm" || r.kernel == "batched_gemm") && candidate.size() >= 3 &&
      param_is_zero("BIAS") && param_is_zero("ACT"))
    error = std::max(error, sampled_gemm_error(candidate, r.sizes));
  if (!(error <= tolerance)) {
    result->status = "wrong";
    result->detail =
        fmt::format("differs from the reference by {:.3g} (tolerance {:.1g})", error, tolerance);
    return ok_status();
  }
  if (r.versus_defaults)
    TESSEL_TRY(time_versus_defaults(r, defaults, args, ref_args, device, result));
  else
    TESSEL_TRY(time_kernel(r, args, device, &result->seconds));
  result->status = "ok";
  return ok_status();
}

// One child run, read: the answer is the last line that parses as JSON; without one, the exit
// (or the signal that ended it) and the last of what the child printed.
TrialResult read_trial(const ProgramRun& run) {
  TrialResult result;
  size_t end = run.output.size();
  while (end > 0) {
    size_t start = run.output.rfind('\n', end - 1);
    start = start == std::string::npos ? 0 : start + 1;
    nlohmann::json j = nlohmann::json::parse(run.output.substr(start, end - start), nullptr, false);
    if (j.is_object() && j.contains("status")) {
      result.status = j["status"];
      result.seconds = j.value("seconds", 0.0);
      result.detail = j.value("detail", "");
      result.default_seconds = j.value("default_seconds", 0.0);
      result.ratio = j.value("ratio", 0.0);
      return result;
    }
    if (start == 0) break;
    end = start - 1;
  }
  result.status = run.exit_code == 137 || run.exit_code == 124 ? "timeout" : "crash";
  std::string tail =
      run.output.size() > 300 ? run.output.substr(run.output.size() - 300) : run.output;
  result.detail = run.signal != 0 ? fmt::format("killed by {}: {}", signal_name(run.signal), tail)
                                  : fmt::format("exit {}: {}", run.exit_code, tail);
  return result;
}

}  // namespace

TrialResult run_trial(const TrialRequest& request, int timeout_seconds) {
  std::vector<std::string> argv;
  if (!find_program_in_path({"timeout"}).empty())
    argv = {"timeout", "-s", "KILL", std::to_string(timeout_seconds)};
  argv.push_back(self_path());
  argv.insert(argv.end(), {"tune", "--trial", request_json(request).dump()});
  ProgramRun run = run_program(argv);
  if (run.signal == 0) return read_trial(run);
  // A child ended by a signal may have crashed on the candidate, or been killed from outside (the
  // kernel's OOM killer on a shared machine, a stray kill): one more run tells them apart. Both
  // signals are kept in the detail, so a flaky candidate is visible in the database.
  ProgramRun again = run_program(argv);
  TrialResult result = read_trial(again);
  const std::string first = fmt::format("first run killed by {}", signal_name(run.signal));
  result.detail = result.detail.empty() ? first : first + "; then " + result.detail;
  return result;
}

int run_trial_child(const std::string& request_json) {
  nlohmann::json j = nlohmann::json::parse(request_json, nullptr, false);
  TrialResult result;
  if (!j.is_object() || !j.contains("kernel")) {
    std::printf("%s\n",
                nlohmann::json{{"status", "error"}, {"detail", "bad request"}}.dump().c_str());
    return 2;
  }
  TrialRequest r;
  r.kernel = j["kernel"];
  r.device = j["device"];
  r.params = j["params"].get<std::map<std::string, std::string>>();
  r.sizes = j["sizes"].get<std::map<std::string, int64_t>>();
  r.seconds = j.value("seconds", 0.15);
  r.versus_defaults = j.value("versus_defaults", false);
  if (j.contains("baseline")) r.baseline = j["baseline"].get<std::map<std::string, std::string>>();
  Status s = trial(r, &result);
  if (!s.ok()) result.detail = s.message();
  nlohmann::json answer = {
      {"status", result.status}, {"seconds", result.seconds}, {"detail", result.detail}};
  if (r.versus_defaults) {
    answer["default_seconds"] = result.default_seconds;
    answer["ratio"] = result.ratio;
  }
  std::printf("%s\n", answer.dump().c_str());
  std::fflush(stdout);
  return s.ok() ? 0 : 1;
}

}  // namespace tessel::cli
