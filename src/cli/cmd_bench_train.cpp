// `tessel bench train`: training-step throughput and peak memory of tessel next to PyTorch's
// (CPU, eager mode) on the workloads of shared/WORKLOADS.md, measured in the same invocation.
//
// Every implementation/workload pair runs in a process of its own, so each peak RSS is that
// process's alone: tessel re-executes itself with the hidden `--worker NAME` flag
// (train/workloads.h builds the workload), PyTorch runs tools/pytorch/bench_train.py under the
// first Python of --python, $TESSEL_PYTHON, python3. Each worker does warm-up steps (kernel
// compilation, allocator and cache warm-up), then timed steps, and prints one JSON line: the
// median step time, the throughput it gives in the workload's unit and its peak RSS
// (getrusage(RUSAGE_SELF).ru_maxrss: the worker's own pages, not those of compilers it ran).
// Both get the same thread count (tessel's pool: one per physical core; --threads overrides).
// The two implementations of a workload run one after the other, so the ratios come from the
// same minute of a shared machine; rerun for a second sample. `--config FILE` runs tessel's side
// on the device (and with the options) of the file's [target] table (ops/target_config.h), as
// `tessel train` would; each timed step then ends with the device's queue drained.
// `--precision bf16` runs both sides in mixed precision: tessel's step inside an autograd::Autocast
// scope (its gemm ops multiply in bf16, accumulate in f32), PyTorch's forward and loss inside
// torch.autocast on the same device with bfloat16, each with f32 master weights and optimizer.
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "autograd/autocast.h"
#include "cli/bench_job.h"
#include "cli/commands.h"
#include "graph/replay.h"
#include "ops/kernel_cache.h"
#include "ops/target_config.h"
#include "support/subprocess.h"
#include "support/thread_pool.h"
#include "train/workloads.h"
#include "tune/choices.h"

#ifndef TESSEL_SOURCE_DIR
#define TESSEL_SOURCE_DIR "."
#endif

namespace tessel::cli {
namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  bool json = false;
  std::vector<std::string> workloads;  // empty: every workload of WORKLOADS.md
  int steps = 0;                       // 0: at least 10 steps and 2 s
  int warmup = 3;
  int threads = 0;     // 0: tessel's pool size
  std::string python;  // empty: $TESSEL_PYTHON, else python3
  std::string script;  // empty: the one in the source tree
  uint64_t seed = 1;
  std::string worker;  // hidden: run one tessel workload and print its JSON
  std::string config;  // a TOML file whose [target] table picks tessel's device; empty: the CPU
  std::string precision = "fp32";  // or "bf16": mixed precision on both sides
  bool fuse = false;        // also time tessel with graph capture and fusion (graph/replay.h)
  bool dump_graph = false;  // worker: print the captured graph before and after fusion
};

// The device tessel's side runs on: the [target] table of --config, else the CPU.
Expected<Device*> bench_device(const Options& o) {
  if (o.config.empty()) return cpu_device();
  TESSEL_ASSIGN_OR_RETURN(Config config, Config::load(o.config));
  TESSEL_ASSIGN_OR_RETURN(ops::TargetSetting setting, ops::parse_target_setting(config));
  TESSEL_ASSIGN_OR_RETURN(ops::TargetChoice choice, ops::resolve_target(setting, ops::launches_on));
  ops::apply_target(choice);
  return choice.device;
}

double peak_rss_mb() {
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / 1024.0;  // ru_maxrss is in KiB
}

// CPU time of all the process's threads: on a machine others are using, the CPU-milliseconds a
// step costs say more about the work done than the wall time, which waits for a core.
double process_cpu_seconds() {
  timespec t{};
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return double(t.tv_sec) + double(t.tv_nsec) * 1e-9;
}

// The timed loop the worker runs; also the auto rule --steps 0 states.
bool enough_steps(int steps_wanted, size_t done, double seconds) {
  if (steps_wanted > 0) return done >= static_cast<size_t>(steps_wanted);
  return (done >= 10 && seconds >= 2.0) || done >= 500;
}

int run_worker(const Options& o) {
  auto fail = [&](const Status& s) {
    std::fprintf(stderr, "tessel bench train --worker %s: %s\n", o.worker.c_str(),
                 s.to_string().c_str());
    return 1;
  };
  Expected<Device*> device = bench_device(o);
  if (!device.ok()) return fail(device.status());
  Expected<std::unique_ptr<train::WorkloadRun>> run =
      train::WorkloadRun::create(o.worker, *device, o.seed);
  if (!run.ok()) return fail(run.status());
  autograd::Autocast autocast(o.precision == "bf16" ? DType::kBF16 : DType::kF32);
  // --fuse: the second warm-up step is captured (the first compiles kernels and touches memory
  // for the first time, which would skew the capture's profile), later ones replay the graph.
  graph::FusedSteps fused;
  int steps_run = 0;
  auto step = [&]() -> Status {
    if (!o.fuse || steps_run++ == 0) return (*run)->step();
    return fused.run([&] { return (*run)->step(); });
  };
  for (int i = 0; i < std::max(o.warmup, o.fuse ? 3 : 0); ++i)
    if (Status s = step(); !s.ok()) return fail(s);
  if (o.fuse && o.dump_graph && fused.graph()) {
    std::fprintf(stderr, "%s", graph::profile_string(*fused.graph()).c_str());
    std::fprintf(stderr, "%s\n--- after fusion ---\n%s", graph::to_string(*fused.graph()).c_str(),
                 graph::to_string(*fused.graph(), &fused.plan()->group_of).c_str());
    for (size_t g = 0; g < fused.plan()->groups.size(); ++g)
      std::fprintf(stderr, "g%zu:\n%s", g, fused.plan()->groups[g].source.c_str());
  }
  std::vector<double> seconds;
  const double cpu_start = process_cpu_seconds();
  const Clock::time_point start = Clock::now();
  while (!enough_steps(o.steps, seconds.size(),
                       std::chrono::duration<double>(Clock::now() - start).count())) {
    const Clock::time_point t0 = Clock::now();
    if (Status s = step(); !s.ok()) return fail(s);
    if (Status s = (*device)->synchronize(); !s.ok()) return fail(s);  // launches are queued
    seconds.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  Expected<double> loss = (*run)->last_loss();  // also waits for the device
  if (!loss.ok()) return fail(loss.status());
  const double cpu_per_step =
      seconds.empty() ? 0.0 : (process_cpu_seconds() - cpu_start) / double(seconds.size());
  std::vector<double> sorted = seconds;
  std::sort(sorted.begin(), sorted.end());
  const double median = sorted.empty() ? 0.0 : sorted[sorted.size() / 2];
  const train::WorkloadSpec& spec = (*run)->spec();
  nlohmann::json row = {{"workload", spec.name},
                        {"impl", o.fuse ? "tessel+fuse" : "tessel"},
                        {"version", "0.1.0"},
                        {"threads", ThreadPool::global().num_threads()},
                        {"device", (*device)->id()},
                        {"precision", o.precision},
                        {"fuse", o.fuse},
                        {"steps", seconds.size()},
                        {"warmup", o.warmup},
                        {"step_ms", median * 1e3},
                        {"cpu_ms", cpu_per_step * 1e3},
                        {"throughput", median > 0 ? double(spec.items_per_step) / median : 0.0},
                        {"unit", spec.unit},
                        {"peak_rss_mb", peak_rss_mb()},
                        {"parameters", (*run)->parameter_count()},
                        {"fused_groups", o.fuse && fused.plan() ? fused.plan()->groups.size() : 0},
                        {"fused_replays", fused.stats().replays},
                        {"fused_captures", fused.stats().captures},
                        {"loss", *loss}};
  std::printf("%s\n", row.dump().c_str());
  return 0;
}

std::string last_lines(const std::string& text, int count) {
  size_t pos = text.size();
  while (pos > 0 && text[pos - 1] == '\n')
    --pos;
  size_t end = pos;
  for (int i = 0; i < count && pos > 0; ++i) {
    pos = text.rfind('\n', pos - 1);
    if (pos == std::string::npos) {
      pos = 0;
      break;
    }
  }
  return text.substr(pos == 0 ? 0 : pos + 1, end - (pos == 0 ? 0 : pos + 1));
}

// Where PyTorch can be run from, or why not.
struct Peer {
  std::string python;
  std::string script;
  std::string version;  // empty: not available
  std::string why_not;
};

Peer find_pytorch(const Options& o) {
  Peer peer;
  const char* env = std::getenv("TESSEL_PYTHON");
  peer.python = !o.python.empty() ? o.python : (env && *env ? env : "python3");
  peer.script = !o.script.empty()
                    ? o.script
                    : std::string(TESSEL_SOURCE_DIR) + "/tools/pytorch/bench_train.py";
  if (::access(peer.script.c_str(), R_OK) != 0) {
    peer.why_not =
        fmt::format("PyTorch not measured: script {} is missing (--script)", peer.script);
    return peer;
  }
  ProgramRun probe = run_program({peer.python, "-c", "import torch; print(torch.__version__)"});
  if (probe.exit_code != 0) {
    peer.why_not = fmt::format(
        "PyTorch not measured: '{}' cannot import torch (use --python or TESSEL_PYTHON): {}",
        peer.python, last_lines(probe.output, 1));
    return peer;
  }
  peer.version = last_lines(probe.output, 1);
  return peer;
}

// One measurement: the worker's JSON row, or an error row naming what failed.
nlohmann::json measure(const std::vector<std::string>& argv, const std::string& workload,
                       const std::string& impl,
                       const std::vector<std::pair<std::string, std::string>>& env = {}) {
  ProgramRun child = run_program(argv, env);
  std::optional<nlohmann::json> row = last_json_line(child.output);
  if (child.exit_code == 0 && row && row->contains("throughput")) return *row;
  return {{"workload", workload},
          {"impl", impl},
          {"error", fmt::format("exit {}: {}", child.exit_code, last_lines(child.output, 3))}};
}

std::string number(const nlohmann::json& row, const char* key, const char* format) {
  if (!row.contains(key)) return "-";
  return fmt::format(fmt::runtime(format), row[key].get<double>());
}

int run(const Options& o) {
  if (!o.worker.empty()) return run_worker(o);
  const std::vector<std::string> names =
      o.workloads.empty() ? train::workload_names() : o.workloads;
  const int threads = o.threads > 0 ? o.threads : ThreadPool::global().num_threads();
  const Peer peer = find_pytorch(o);
  const std::string steps_text =
      o.steps > 0 ? fmt::format("median of {} steps", o.steps) : "median of >= 10 steps and >= 2 s";
  if (!o.json) {
    std::printf(
        "# tessel bench train: %s, forward + cross-entropy + backward + AdamW(lr 1e-3), batch in "
        "memory; %s after %d warm-up; %d threads; one process per row; CPU ms: the process's "
        "CPU time (all threads) per timed step\n",
        o.precision == "bf16" ? "bf16 mixed precision (f32 weights and optimizer)" : "f32",
        steps_text.c_str(), o.warmup, threads);
    if (peer.version.empty())
      std::printf("# %s\n", peer.why_not.c_str());
    else
      std::printf("# PyTorch %s (eager, CPU, %d threads%s) from %s\n", peer.version.c_str(),
                  threads, o.precision == "bf16" ? ", torch.autocast bfloat16" : "",
                  peer.python.c_str());
    // The workers read the same database (tuned kernels and algorithm choices).
    std::printf("# tuning database: %s\n", tune::TuneChoices::global().describe().c_str());
    std::printf("%-9s %-11s %6s %9s %9s %11s %-10s %9s | %-15s\n", "workload", "impl", "steps",
                "step ms", "CPU ms", "throughput", "unit", "peak MB", "tessel/pytorch");
    std::printf("%-9s %-11s %6s %9s %9s %11s %-10s %9s | %7s %7s\n", "", "", "", "(median)",
                "per step", "", "", "RSS", "thr", "mem");
    std::fflush(stdout);
  }
  const std::vector<std::string> common = {
      "--steps", std::to_string(o.steps), "--warmup",    std::to_string(o.warmup),
      "--seed",  std::to_string(o.seed),  "--precision", o.precision};
  std::string torch_device = "cpu";  // PyTorch runs on the same GPU as tessel, else the CPU
  if (!o.config.empty()) {
    Expected<Device*> device = bench_device(o);  // a config mistake stops here, once
    if (!device.ok()) {
      std::fprintf(stderr, "tessel bench train: %s\n", device.status().message().c_str());
      return 2;
    }
    if ((*device)->kind() == DeviceKind::kCuda) torch_device = (*device)->id();
    if (!o.json)
      std::printf("# tessel on %s (--config %s), PyTorch on %s\n", (*device)->id().c_str(),
                  o.config.c_str(), torch_device.c_str());
  }
  for (const std::string& name : names) {
    const train::WorkloadSpec spec = *train::find_workload(name);  // checked by the option
    std::vector<std::string> tessel_argv = {self_path(), "bench", "train", "--worker", name};
    tessel_argv.insert(tessel_argv.end(), common.begin(), common.end());
    if (!o.config.empty()) tessel_argv.insert(tessel_argv.end(), {"--config", o.config});
    nlohmann::json mine =
        measure(tessel_argv, name, "tessel", {{"TESSEL_THREADS", std::to_string(threads)}});
    // --fuse: the fused step right after the eager one, so the two share the machine's minutes.
    nlohmann::json fused;
    if (o.fuse) {
      std::vector<std::string> fused_argv = tessel_argv;
      fused_argv.push_back("--fuse");
      fused =
          measure(fused_argv, name, "tessel+fuse", {{"TESSEL_THREADS", std::to_string(threads)}});
      if (mine.contains("step_ms") && fused.contains("step_ms"))
        fused["fused_over_eager_step"] =
            fused["step_ms"].get<double>() / mine["step_ms"].get<double>();
    }
    nlohmann::json theirs;
    if (peer.version.empty()) {
      theirs = {
          {"workload", name}, {"impl", "pytorch"}, {"available", false}, {"note", peer.why_not}};
    } else {
      std::vector<std::string> py_argv = {peer.python, peer.script, "--workload",
                                          name,        "--threads", std::to_string(threads),
                                          "--device",  torch_device};
      py_argv.insert(py_argv.end(), common.begin(), common.end());
      theirs = measure(py_argv, name, "pytorch");
    }
    for (nlohmann::json* row : {&mine, &fused}) {
      if (row->contains("throughput") && theirs.contains("throughput")) {
        (*row)["throughput_ratio"] =
            (*row)["throughput"].get<double>() / theirs["throughput"].get<double>();
        (*row)["memory_ratio"] =
            (*row)["peak_rss_mb"].get<double>() / theirs["peak_rss_mb"].get<double>();
      }
    }
    std::vector<const nlohmann::json*> rows = {&mine};
    if (o.fuse) rows.push_back(&fused);
    rows.push_back(&theirs);
    for (const nlohmann::json* row : rows) {
      if (o.json) {
        std::printf("%s\n", row->dump().c_str());
        continue;
      }
      const std::string impl = (*row)["impl"];
      if (!row->contains("throughput")) {
        std::string why = row->contains("error") ? (*row)["error"].get<std::string>()
                                                 : "not measured (see above)";
        std::replace(why.begin(), why.end(), '\n', ' ');
        std::printf("%-9s %-11s %s\n", name.c_str(), impl.c_str(), why.c_str());
        continue;
      }
      std::string ratios;
      if (row->contains("throughput_ratio"))
        ratios = fmt::format(" {:>6.2f}x {:>6.2f}x", (*row)["throughput_ratio"].get<double>(),
                             (*row)["memory_ratio"].get<double>());
      if (row->contains("fused_over_eager_step"))
        ratios += fmt::format("  (step {:.3f}x eager's, {} fused groups)",
                              (*row)["fused_over_eager_step"].get<double>(),
                              (*row)["fused_groups"].get<int64_t>());
      std::printf(
          "%-9s %-11s %6d %9s %9s %11s %-10s %9s |%s\n", name.c_str(), impl.c_str(),
          (*row)["steps"].get<int>(), number(*row, "step_ms", "{:.2f}").c_str(),
          number(*row, "cpu_ms", "{:.2f}").c_str(),
          number(*row, "throughput", (*row)["throughput"].get<double>() < 100 ? "{:.2f}" : "{:.0f}")
              .c_str(),
          spec.unit.c_str(), number(*row, "peak_rss_mb", "{:.1f}").c_str(), ratios.c_str());
    }
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace

void add_bench_train_command(CLI::App& bench) {
  auto options = std::make_shared<Options>();
  CLI::App* cmd = bench.add_subcommand(
      "train", "training-step throughput and peak RSS on the WORKLOADS.md models vs PyTorch");
  const std::vector<std::string> names = train::workload_names();
  cmd->add_flag("--json", options->json, "one JSON object per line instead of the table");
  cmd->add_option("--workloads", options->workloads,
                  "workloads to run (default: all of WORKLOADS.md)")
      ->delimiter(',')
      ->check(CLI::IsMember(names));
  cmd->add_option("--steps", options->steps,
                  "timed steps per run (default 0: at least 10 steps and 2 s)")
      ->check(CLI::Range(0, 100000));
  cmd->add_option("--warmup", options->warmup, "untimed steps first (default 3)")
      ->check(CLI::Range(0, 100000));
  cmd->add_option("--threads", options->threads,
                  "threads for both (default: tessel's pool, one per physical core)")
      ->check(CLI::Range(0, 4096));
  cmd->add_option("--python", options->python,
                  "Python with torch (default: $TESSEL_PYTHON, else python3)");
  cmd->add_option("--script", options->script,
                  "PyTorch side (default: tools/pytorch/bench_train.py in the source tree)");
  cmd->add_option("--seed", options->seed, "initialisation and batch seed (default 1)");
  cmd->add_option("--config", options->config,
                  "a TOML file whose [target] table picks tessel's device (default: the CPU)")
      ->check(CLI::ExistingFile);
  cmd->add_option("--precision", options->precision,
                  "fp32, or bf16: mixed precision on both sides (tessel's Autocast, PyTorch's "
                  "torch.autocast), f32 weights and optimizer (default fp32)")
      ->check(CLI::IsMember({"fp32", "bf16"}));
  cmd->add_flag("--fuse", options->fuse,
                "also time tessel's step captured once and replayed with fused element-wise "
                "kernels (a row 'tessel+fuse' after each eager 'tessel' row)");
  cmd->add_flag("--dump-graph", options->dump_graph)->group("");
  cmd->add_option("--worker", options->worker)->group("")->check(CLI::IsMember(names));
  cmd->callback([options] { exit_code = run(*options); });
}

}  // namespace tessel::cli
