// `tessel tune`: finds the fastest specialisation of a kernel for shapes on a device by
// measuring it (the model-guided search of tune/search.h, each trial in a child process) and
// keeps the results in the tuning database that the op library reads at every launch.
//
//   tessel tune gemm --shape 2048x384x1152 --dtype bf16 --budget 32   (sizes in the kernel's
//                                                                     order: gemm M, K, N)
//   tessel tune --model examples/gpt_shakespeare.toml   every tunable launch of one training step
//                                                       and every algorithm choice it makes
//   tessel tune --workload resnet50 --budget 0          one bench-train workload step's algorithm
//                                                       choices only (--budget 0: no kernels)
//   tessel tune conv2d.forward --shape 32x64x56x56x64x3x3x1x1x1x1x1x1x1   one algorithm choice
//                                                       (N C H W O KH KW SH SW PH PW DH DW G)
//   tessel tune --show | --export FILE | --import FILE
//   tessel tune --compare-exhaustive [--device opencl:0] [--json]
//
// The database is --db, else $TESSEL_TUNE_DB, else ~/.cache/tessel/tune.db (tune/tune_db.h).
#include <cstdio>
#include <functional>
#include <memory>

#include <nlohmann/json.hpp>

#include "autograd/autocast.h"
#include "cli/commands.h"
#include "cli/tune_algorithm.h"
#include "cli/tune_compare.h"
#include "cli/tune_session.h"
#include "cli/tune_trial.h"
#include "ops/algorithm_choice.h"
#include "ops/gemm_precision.h"
#include "ops/tuned_launch.h"
#include "train/trainer.h"
#include "train/workloads.h"
#include "tune/choices.h"

namespace tessel::cli {
namespace {

struct Options {
  std::string kernel;
  std::vector<std::string> shapes;
  std::string device = "cpu";
  std::string dtype = "f32";
  std::vector<std::string> fixed;
  int budget = 32;
  double seconds = 0;
  uint64_t seed = 1;
  bool json = false;
  std::string db;
  bool show = false;
  std::string export_file, import_file;
  std::string model;
  std::string workload;
  bool compare = false;
  bool quick = false;
  bool reuse = false;
  std::string trial;
};

void print_outcome(const TuneOutcome& o, bool json) {
  const double flops = launch_flops(o.target.kernel, o.target.sizes);
  if (json) {
    nlohmann::json row = {{"kernel", o.target.kernel},
                          {"shape", tune::shape_string(o.key.shape)},
                          {"sizes", sizes_text(o.target.kernel, o.target.sizes)},
                          {"device", o.target.device},
                          {"dtype", o.key.dtype},
                          {"fixed", o.key.fixed},
                          {"trials", o.trials},
                          {"failed", o.failed},
                          {"best", o.best_params},
                          {"best_seconds", o.best_seconds},
                          {"default", o.default_params},
                          {"default_seconds", o.default_seconds},
                          {"chosen", o.chosen_params},
                          {"confirm_ratios", o.confirm_ratios}};
    if (flops > 0 && o.best_seconds > 0) row["gflops"] = flops / o.best_seconds * 1e-9;
    std::printf("%s\n", row.dump().c_str());
    return;
  }
  std::printf("%s %s %s on %s: best %s %.3f ms", o.target.kernel.c_str(), o.key.dtype.c_str(),
              sizes_text(o.target.kernel, o.target.sizes).c_str(), o.target.device.c_str(),
              o.best_params.empty() ? "(none ran)" : o.best_params.c_str(), o.best_seconds * 1e3);
  if (o.default_seconds > 0)
    std::printf(", defaults (%s) %.3f ms: %.2fx", o.default_params.c_str(), o.default_seconds * 1e3,
                o.default_seconds / o.best_seconds);
  if (!o.chosen_params.empty())
    std::printf(", chosen: %s",
                o.chosen_params == o.default_params ? "the defaults" : o.chosen_params.c_str());
  std::printf("  [%d trials, %d failed]\n", o.trials, o.failed);
}

Status show(tune::TuneDb& db, bool json) {
  TESSEL_ASSIGN_OR_RETURN(std::vector<tune::Trial> rows, db.all());
  // The choice of each key, and how many trials each key has.
  std::map<std::string, std::pair<const tune::Trial*, int>> best;
  for (const tune::Trial& t : rows) {
    const std::string key = t.key.kernel + "|" + t.key.device + "|" + t.key.dtype + "|" +
                            t.key.fixed + "|" + tune::shape_string(t.key.shape) + "|" +
                            t.key.source_hash;
    auto& [pick, count] = best[key];
    ++count;
    // The tuner's choice, else (a database from an older tuner) the fastest good trial.
    auto chosen = [](const tune::Trial* x) { return x->detail.rfind(tune::kChosenPrefix, 0) == 0; };
    if (t.status == "ok" && (pick == nullptr || (chosen(&t) && !chosen(pick)) ||
                             (chosen(&t) == chosen(pick) && t.seconds < pick->seconds)))
      pick = &t;
  }
  if (!json)
    std::printf("%s: %zu trials\n%-13s %-5s %-8s %-20s %-26s %10s %6s  %s\n", db.path().c_str(),
                rows.size(), "kernel", "dtype", "fixed", "shape", "best", "ms", "trials", "device");
  for (const auto& [key, entry] : best) {
    const tune::Trial* t = entry.first;
    if (t == nullptr) continue;
    if (json) {
      std::printf("%s\n", nlohmann::json{{"kernel", t->key.kernel},
                                         {"dtype", t->key.dtype},
                                         {"fixed", t->key.fixed},
                                         {"shape", tune::shape_string(t->key.shape)},
                                         {"params", t->params},
                                         {"seconds", t->seconds},
                                         {"trials", entry.second},
                                         {"device", t->key.device}}
                              .dump()
                              .c_str());
    } else {
      std::printf("%-13s %-5s %-8s %-20s %-26s %10.3f %6d  %s\n", t->key.kernel.c_str(),
                  t->key.dtype.c_str(), t->key.fixed.empty() ? "-" : t->key.fixed.c_str(),
                  tune::shape_string(t->key.shape).c_str(), t->params.c_str(), t->seconds * 1e3,
                  entry.second, t->key.device.c_str());
    }
  }
  return ok_status();
}

// What one training step launches: its tunable kernel launches and its algorithm choices, in
// launch order, recorded with the database off (so as the defaults and rules make them).
struct RecordedStep {
  std::vector<TuneTarget> targets;
  std::vector<ops::AlgorithmLaunch> algorithms;
};

Expected<RecordedStep> record_step(const std::function<Status()>& step) {
  tune::TuneChoices::global().use_database("");
  ops::record_tunable_launches(true);
  Status ran = step();
  ops::record_tunable_launches(false);
  TESSEL_TRY(ran);
  RecordedStep out;
  for (const ops::TunableLaunch& l : ops::recorded_tunable_launches())
    out.targets.push_back(TuneTarget{l.key.kernel, l.device, l.fixed, l.sizes, l.baseline});
  out.algorithms = ops::recorded_algorithm_launches();
  return out;
}

// One training step of `config_path`.
Expected<RecordedStep> model_step(const std::string& config_path) {
  TESSEL_ASSIGN_OR_RETURN(train::TrainConfig config, train::load_train_config(config_path));
  config.checkpoint_path.clear();
  config.metrics_path.clear();
  config.sample.tokens = 0;  // the text sampled at the end launches a shape per context length
  train::TrainerOptions options;
  options.progress = nullptr;
  options.evaluate_at_end = false;
  TESSEL_ASSIGN_OR_RETURN(std::unique_ptr<train::Trainer> trainer,
                          train::Trainer::create(std::move(config), options));
  Expected<RecordedStep> step = record_step([&] { return trainer->run(1).status(); });
  if (!step.ok()) return step.status().with_context("running one step of {}", config_path);
  return step;
}

// One step of a `tessel bench train` workload (shared/WORKLOADS.md), in `dtype` (autocast).
Expected<RecordedStep> workload_step(const std::string& name, const std::string& device_id,
                                     const std::string& dtype) {
  TESSEL_ASSIGN_OR_RETURN(Device * device, get_device(device_id));
  TESSEL_ASSIGN_OR_RETURN(DType compute, parse_dtype(dtype));
  TESSEL_ASSIGN_OR_RETURN(std::unique_ptr<train::WorkloadRun> run,
                          train::WorkloadRun::create(name, device, 1));
  autograd::Autocast autocast(compute);
  Expected<RecordedStep> step = record_step([&] {
    TESSEL_TRY(run->step());
    return device->synchronize();
  });
  if (!step.ok()) return step.status().with_context("running one step of workload {}", name);
  return step;
}

// The blocks an op passes for a kernel launch named on the command line: matmul's and linear's
// rule for the gemm kernels (ops/gemm_precision.h), else the kernel's own defaults (none).
Expected<ops::KernelParams> named_launch_baseline(const std::string& kernel,
                                                  const std::string& device_id,
                                                  const std::map<std::string, int64_t>& sizes) {
  const bool gemm = kernel == "gemm" || kernel == "gemm_rounded";
  if (!gemm && kernel != "batched_gemm" && kernel != "batched_gemm_rounded")
    return ops::KernelParams{};
  TESSEL_ASSIGN_OR_RETURN(Device * device, get_device(device_id));
  auto size = [&](const char* name) {
    auto it = sizes.find(name);
    return it == sizes.end() ? int64_t{1} : it->second;
  };
  return ops::gemm_launch_blocks(device->kind(), gemm ? 1 : size("Z"), size("M"), size("N"));
}

// A launch at an algorithm choice point named on the command line: 14 sizes for conv2d's.
Expected<ops::AlgorithmLaunch> named_algorithm_launch(const ops::AlgorithmPoint& point,
                                                      const std::string& shape,
                                                      const std::string& device_id,
                                                      const std::string& dtype) {
  TESSEL_ASSIGN_OR_RETURN(std::vector<int64_t> sizes, tune::parse_shape(shape));
  const size_t want = point.shape_names.size() + point.fixed_names.size();
  if (sizes.size() != want)
    return invalid_argument("tune {}: --shape needs {} sizes, got {} in '{}'", point.name, want,
                            sizes.size(), shape);
  ops::AlgorithmLaunch launch;
  launch.point = &point;
  TESSEL_ASSIGN_OR_RETURN(launch.device, get_device(device_id));
  TESSEL_ASSIGN_OR_RETURN(launch.dtype, parse_dtype(dtype));
  launch.sizes = sizes;
  // The rule: what the op picks with no database, recorded from one unforced run.
  TESSEL_ASSIGN_OR_RETURN(std::function<Status()> unforced,
                          point.make_runner("", launch.device, launch.dtype, sizes));
  TESSEL_ASSIGN_OR_RETURN(RecordedStep step, record_step(unforced));
  for (const ops::AlgorithmLaunch& seen : step.algorithms)
    if (seen.point == &point && seen.sizes == sizes) launch.rule = seen.rule;
  if (launch.rule.empty())
    return invalid_argument("tune {}: a run of {} on {} made no choice at this point", point.name,
                            shape, device_id);
  return launch;
}

void print_algorithm_outcome(const AlgorithmOutcome& o, bool json) {
  if (!json) return;  // tune_algorithm printed its line
  nlohmann::json row = {{"point", o.launch.point->name},
                        {"sizes", algorithm_sizes_text(o.launch)},
                        {"device", o.launch.device->id()},
                        {"dtype", o.key.dtype},
                        {"rule", o.rule},
                        {"chosen", o.chosen},
                        {"rounds", o.rounds}};
  for (const AlgorithmTiming& t : o.timings) {
    nlohmann::json a = {{"algorithm", t.algorithm}};
    if (t.error.empty()) {
      a["median_seconds"] = t.median_seconds;
      a["ratio_to_rule"] = t.median_ratio;
      a["faster_share"] = t.faster_share;
    } else {
      a["error"] = t.error;
    }
    row["algorithms"].push_back(a);
  }
  std::printf("%s\n", row.dump().c_str());
}

Status run(const Options& o) {
  if (!o.trial.empty()) {
    exit_code = run_trial_child(o.trial);
    return ok_status();
  }
  const std::string path = o.db.empty() ? tune::default_tune_db_path() : o.db;
  TESSEL_ASSIGN_OR_RETURN(std::unique_ptr<tune::TuneDb> db, tune::TuneDb::open(path));
  if (!o.import_file.empty()) {
    TESSEL_TRY(db->import_json(o.import_file));
    std::printf("imported %s into %s\n", o.import_file.c_str(), path.c_str());
  }
  if (!o.export_file.empty()) {
    TESSEL_TRY(db->export_json(o.export_file));
    std::printf("exported %s to %s\n", path.c_str(), o.export_file.c_str());
  }
  if (o.show) TESSEL_TRY(show(*db, o.json));
  if (o.compare) {
    TESSEL_ASSIGN_OR_RETURN(double worst,
                            compare_exhaustive(o.device, o.json, db.get(), o.quick, o.reuse));
    if (!o.json) std::printf("worst ratio: %.3f\n", worst);
  }
  std::vector<TuneTarget> targets;
  std::vector<ops::AlgorithmLaunch> algorithms;
  auto add_step = [&](const RecordedStep& step, const std::string& what) {
    if (o.budget > 0) targets.insert(targets.end(), step.targets.begin(), step.targets.end());
    algorithms.insert(algorithms.end(), step.algorithms.begin(), step.algorithms.end());
    std::fprintf(stderr, "%s: %zu tunable launches and %zu algorithm choices in one step%s\n",
                 what.c_str(), step.targets.size(), step.algorithms.size(),
                 o.budget > 0 ? "" : " (--budget 0: the algorithm choices only)");
  };
  if (!o.model.empty()) {
    TESSEL_ASSIGN_OR_RETURN(RecordedStep step, model_step(o.model));
    add_step(step, o.model);
  }
  if (!o.workload.empty()) {
    TESSEL_ASSIGN_OR_RETURN(RecordedStep step, workload_step(o.workload, o.device, o.dtype));
    add_step(step, "workload " + o.workload);
  }
  Expected<const ops::AlgorithmPoint*> point = ops::find_algorithm_point(o.kernel);
  if (!o.kernel.empty() && point.ok()) {
    if (o.shapes.empty()) return invalid_argument("tune {}: give at least one --shape", o.kernel);
    for (const std::string& s : o.shapes) {
      TESSEL_ASSIGN_OR_RETURN(ops::AlgorithmLaunch launch,
                              named_algorithm_launch(**point, s, o.device, o.dtype));
      algorithms.push_back(launch);
    }
  } else if (!o.kernel.empty()) {
    if (o.shapes.empty()) return invalid_argument("tune {}: give at least one --shape", o.kernel);
    std::map<std::string, std::string> fixed{{"T", o.dtype}};
    for (const std::string& f : o.fixed)
      for (const auto& [name, value] : tune::parse_params(f))
        fixed[name] = value;
    for (const std::string& s : o.shapes) {
      TESSEL_ASSIGN_OR_RETURN(auto sizes, parse_sizes_for(o.kernel, s));
      TESSEL_ASSIGN_OR_RETURN(ops::KernelParams baseline,
                              named_launch_baseline(o.kernel, o.device, sizes));
      targets.push_back(TuneTarget{o.kernel, o.device, fixed, sizes, baseline});
    }
  }
  TuneLimits limits;
  limits.budget = o.budget;
  limits.seconds = o.seconds;
  limits.seed = o.seed;
  for (const TuneTarget& t : targets) {
    TESSEL_ASSIGN_OR_RETURN(TuneOutcome outcome, tune_target(t, limits, db.get(), stderr));
    print_outcome(outcome, o.json);
  }
  // Algorithms last, timed with the kernels' tuned specialisations in force.
  tune::TuneChoices::global().use_database(path);
  for (const ops::AlgorithmLaunch& a : algorithms) {
    TESSEL_ASSIGN_OR_RETURN(AlgorithmOutcome outcome, tune_algorithm(a, db.get(), stderr));
    print_algorithm_outcome(outcome, o.json);
  }
  if (targets.empty() && algorithms.empty() && !o.show && !o.compare && o.import_file.empty() &&
      o.export_file.empty())
    return invalid_argument(
        "tune: name a kernel or algorithm choice point (and --shape), or --model, --workload, "
        "--show, --export, "
        "--import or --compare-exhaustive");
  return ok_status();
}

}  // namespace

void add_tune_command(CLI::App& app) {
  auto options = std::make_shared<Options>();
  CLI::App* tune = app.add_subcommand(
      "tune", "find the fastest specialisation of a kernel by measuring it (tuning database)");
  tune->add_option("kernel", options->kernel,
                   "kernel name (kernels/*.tile), e.g. gemm, or algorithm choice point, e.g. "
                   "conv2d.forward");
  tune->add_option("--shape", options->shapes,
                   "sizes in the kernel's order (gemm: MxKxN) or M=2048,K=384,N=1152; repeatable");
  tune->add_option("--device", options->device, "cpu, opencl:0, cuda:0 (default cpu)");
  tune->add_option("--dtype", options->dtype, "the kernel's T: f32, bf16, f16 (default f32)");
  tune->add_option("--fixed", options->fixed,
                   "other parameters, as the op library passes them: BIAS=1");
  tune->add_option("--budget", options->budget,
                   "trials per shape (default 32); with --model or --workload, 0 tunes the "
                   "algorithm choices only");
  tune->add_option("--seconds", options->seconds, "wall-time budget per shape (default none)");
  tune->add_option("--seed", options->seed, "the search's seed (default 1)");
  tune->add_flag("--json", options->json, "one JSON object per result");
  tune->add_option("--db", options->db,
                   "tuning database (default $TESSEL_TUNE_DB, else ~/.cache/tessel/tune.db)");
  tune->add_flag("--show", options->show, "list the chosen specialisation of every tuned key");
  tune->add_option("--export", options->export_file, "write every trial to FILE (JSON lines)");
  tune->add_option("--import", options->import_file, "add the trials of FILE (from --export)");
  tune->add_option("--model", options->model,
                   "tune every tunable launch one training step of this config makes");
  tune->add_option("--workload", options->workload,
                   "tune what one step of a bench-train workload launches (mlp, cnn, resnet18, "
                   "resnet50, gpt_tiny, gpt_mini; --dtype bf16: under autocast)");
  tune->add_flag("--compare-exhaustive", options->compare,
                 "search vs random vs grid on spaces measured exhaustively");
  tune->add_flag("--quick", options->quick, "with --compare-exhaustive: two small cases only");
  tune->add_flag("--reuse", options->reuse,
                 "with --compare-exhaustive: points the database already measured are not "
                 "measured again (replays the searches over an earlier run)");
  tune->add_option("--trial", options->trial, "(internal) run one trial and print its result")
      ->group("");
  tune->callback([options] {
    Status s = run(*options);
    if (!s.ok()) {
      std::fprintf(stderr, "tessel tune: %s\n", s.message().c_str());
      exit_code = 1;
    }
  });
}

}  // namespace tessel::cli
