// `tessel bench memory [--workloads mlp,cnn,...] [--steps N] [--precision bf16] [--json]`: the
// memory plan's prediction (plan/memory_plan.h, recorded at small batches) against the peak
// measured in a full-batch run, for the workloads of shared/WORKLOADS.md at the batches `tessel
// bench train` uses.
//
// Each side runs in a process of its own (this program with the hidden `--worker NAME --mode
// plan|run`), so neither sees the other's pages: the plan worker records and scales, and prints
// the plan's JSON; the run worker builds the workload at its full batch, takes warm-up and
// measured steps, and prints the caching allocator's peak of live blocks, the blocks it holds
// (live + cached) and its peak RSS (getrusage ru_maxrss). Peak memory does not depend on the
// machine's load, unlike the timings of the other benchmarks.
#include <sys/resource.h>

#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "autograd/autocast.h"
#include "cli/bench_job.h"
#include "cli/commands.h"
#include "plan/memory_plan.h"
#include "support/subprocess.h"
#include "train/workloads.h"

namespace tessel::cli {
namespace {

struct Options {
  std::vector<std::string> workloads;  // empty: all six
  int steps = 3;
  bool json = false;
  std::string precision = "fp32";  // bf16 / fp16: both workers step under autocast
  std::string worker;              // hidden: one workload
  std::string mode;                // hidden: plan | run
};

DType compute_of(const std::string& precision) {
  return precision == "bf16" ? DType::kBF16 : precision == "fp16" ? DType::kF16 : DType::kF32;
}

int64_t peak_rss_bytes() {
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  return int64_t(usage.ru_maxrss) * 1024;  // ru_maxrss is in KiB
}

int run_worker(const Options& o) {
  auto fail = [&](const Status& s) {
    std::fprintf(stderr, "tessel bench memory --worker %s: %s\n", o.worker.c_str(),
                 s.to_string().c_str());
    return 1;
  };
  Device* device = cpu_device();
  if (o.mode == "plan") {
    Expected<std::unique_ptr<plan::MemoryPlanTarget>> target =
        plan::workload_memory_target(o.worker, device, compute_of(o.precision));
    if (!target.ok()) return fail(target.status());
    Expected<plan::MemoryPlan> p = plan::plan_memory(**target);
    if (!p.ok()) return fail(p.status());
    std::printf("%s\n", plan::memory_plan_json(*p).dump().c_str());
    return 0;
  }
  Expected<std::unique_ptr<train::WorkloadRun>> run =
      train::WorkloadRun::create(o.worker, device, /*seed=*/1);
  if (!run.ok()) return fail(run.status());
  autograd::Autocast autocast(compute_of(o.precision));
  for (int i = 0; i < o.steps; ++i)
    if (Status s = (*run)->step(); !s.ok()) return fail(s);
  Expected<double> loss = (*run)->last_loss();
  if (!loss.ok()) return fail(loss.status());
  const AllocatorStats stats = device->allocator().stats();
  nlohmann::json row = {{"workload", o.worker},
                        {"batch", (*run)->batch_rows()},
                        {"steps", o.steps},
                        {"peak_bytes", stats.peak_bytes},
                        {"reserved_bytes", stats.reserved_bytes},
                        {"peak_rss_bytes", peak_rss_bytes()},
                        {"loss", *loss}};
  std::printf("%s\n", row.dump().c_str());
  return 0;
}

// The last JSON object the worker printed, or an error object saying how it ended.
nlohmann::json worker_row(const Options& o, const std::string& name, const std::string& mode) {
  ProgramRun child = run_program({self_path(), "bench", "memory", "--worker", name, "--mode", mode,
                                  "--steps", std::to_string(o.steps), "--precision", o.precision});
  std::optional<nlohmann::json> found = last_json_line(child.output);
  if (child.exit_code == 0 && found) return *found;
  return {{"error", fmt::format("{} worker exit {}: {}", mode, child.exit_code, child.output)}};
}

std::string mib(const nlohmann::json& v) {
  return fmt::format("{:.1f}", double(v.get<int64_t>()) / (1 << 20));
}

std::string ratio(const nlohmann::json& predicted, const nlohmann::json& measured) {
  const double m = double(measured.get<int64_t>());
  return m > 0 ? fmt::format("{:.3f}", double(predicted.get<int64_t>()) / m) : "-";
}

int run(const Options& o) {
  if (!o.worker.empty()) return run_worker(o);
  const std::vector<std::string> names =
      o.workloads.empty() ? train::workload_names() : o.workloads;
  if (!o.json) {
    fmt::print(
        "# tessel bench memory: the memory plan (recorded at batches 2 and 4, checked at 3, "
        "scaled) against a run at the full batch ({} steps), each in a process of its own; {}; "
        "MiB; ratio = predicted / measured; {}\n",
        o.steps, o.precision, uptime());
    fmt::print(
        "{:<9} {:>5} | {:>9} {:>9} {:>6} | {:>9} {:>9} {:>6} | {:>9} {:>9} {:>6} | {:>8} {}\n",
        "workload", "batch", "plan live", "allocator", "ratio", "plan held", "held", "ratio",
        "plan RSS", "peak RSS", "ratio", "overhead", "scaling check");
  }
  nlohmann::json all = nlohmann::json::array();
  int failures = 0;
  for (const std::string& name : names) {
    nlohmann::json planned = worker_row(o, name, "plan");
    nlohmann::json measured = worker_row(o, name, "run");
    all.push_back({{"workload", name}, {"plan", planned}, {"measured", measured}});
    if (planned.contains("error") || measured.contains("error")) {
      ++failures;
      if (!o.json)
        fmt::print("{:<9} {}\n", name,
                   std::string(planned.contains("error") ? planned["error"] : measured["error"]));
      continue;
    }
    if (o.json) continue;
    std::string check = "-";
    if (planned.contains("scaling_check")) {
      const auto& c = planned["scaling_check"];
      check = int64_t(c["nonlinear_allocations"]) == 0
                  ? "linear"
                  : fmt::format("{} off (max {} B)", int64_t(c["nonlinear_allocations"]),
                                int64_t(c["largest_difference_bytes"]));
    }
    fmt::print(
        "{:<9} {:>5} | {:>9} {:>9} {:>6} | {:>9} {:>9} {:>6} | {:>9} {:>9} {:>6} | {:>8} {}\n",
        name, int64_t(measured["batch"]), mib(planned["peak_bytes"]), mib(measured["peak_bytes"]),
        ratio(planned["peak_bytes"], measured["peak_bytes"]), mib(planned["reserved_peak_bytes"]),
        mib(measured["reserved_bytes"]),
        ratio(planned["reserved_peak_bytes"], measured["reserved_bytes"]),
        mib(planned["predicted_rss_bytes"]), mib(measured["peak_rss_bytes"]),
        ratio(planned["predicted_rss_bytes"], measured["peak_rss_bytes"]),
        mib(planned["overhead_bytes"]), check);
  }
  if (o.json) fmt::print("{}\n", all.dump());
  return failures == 0 ? 0 : 1;
}

}  // namespace

void add_bench_memory_command(CLI::App& bench) {
  auto o = std::make_shared<Options>();
  CLI::App* cmd = bench.add_subcommand(
      "memory", "the memory plan's predicted peak against a full-batch run, per workload");
  cmd->add_option("--workloads", o->workloads, "workloads (default: all of WORKLOADS.md)")
      ->delimiter(',')
      ->check(CLI::IsMember(train::workload_names()));
  cmd->add_option("--steps", o->steps, "steps of the measured run")->check(CLI::Range(1, 100));
  cmd->add_flag("--json", o->json, "one JSON array instead of the table");
  cmd->add_option("--precision", o->precision,
                  "fp32 (default), bf16 or fp16: the step under autocast (16-bit gemms and saved "
                  "activations), planned and run")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}));
  cmd->add_option("--worker", o->worker)->group("");  // hidden: one workload, in this process
  cmd->add_option("--mode", o->mode)->group("")->check(CLI::IsMember({"plan", "run"}));
  cmd->callback([o] { exit_code = run(*o); });
}

}  // namespace tessel::cli
