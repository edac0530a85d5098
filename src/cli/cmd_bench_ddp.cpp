// `tessel bench ddp`: what data-parallel training costs per step on this machine, for
// shared/WORKLOADS.md's gpt_tiny, gpt_mini and resnet18, with 2 and 4 ranks, DDP and ZeRO 1/2/3,
// gradient collectives overlapped with backward or not.
//
// Each configuration is one job of `tessel bench ddp --worker` started through dist::launch (as
// `tessel launch` would), each rank with TESSEL_THREADS = cores / ranks so the ranks do not fight
// over cores more than they must. A rank trains the workload's batch (synthetic tokens or
// images, AdamW lr 1e-3, f32) for --warmup + --steps steps and reports medians over the timed
// steps. The overlap settings take turns step by step within one job (paired: the load of a
// shared machine drifts, and would otherwise favour the job that ran in a calm moment). Columns,
// per step and rank (rank 0's step times; memory: the largest over the ranks):
//   step_ms          wall time of forward + backward + optimizer, with its communication
//   exposed_comm_ms  time the training thread was blocked waiting for a collective
//                    (DataParallel's StepStats): communication that computation did not hide.
//                    The minimum over the ranks: the rank that arrives last waits only for the
//                    communication, the others also for it (load imbalance, large on a shared
//                    machine), reported as max_wait_ms
//   compute_ms       step_ms - exposed_comm_ms: time the thread was computing
//   comm_ms          the step's collectives run again alone, back to back (time_collectives_alone),
//                    the fastest of 5 replays
//   peak_rss_mb      VmHWM of the rank's process (/proc/self/status) at the end
//   peak_alloc_mb    the most tensor memory in use at once (the CPU allocator's peak), which
//                    leaves out the process's code, libraries and the allocator's cache
//   params/grads/optim_mb  the bytes each rank holds between steps (ZeRO's accounting)
// With overlap the collectives and backward share the cores; on a machine with as many cores as
// ranks the communication progress thread takes time from compute, which shows up in
// compute_ms rather than in exposed_comm_ms.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "autograd/autocast.h"
#include "autograd/functional.h"
#include "cli/bench_job.h"
#include "cli/commands.h"
#include "dist/launcher.h"
#include "dist/process_group.h"
#include "nn/gpt.h"
#include "nn/resnet.h"
#include "parallel/data_parallel.h"

namespace tessel::cli {
namespace {

using autograd::Variable;
using Clock = std::chrono::steady_clock;

struct Options {
  bool json = false;
  std::vector<std::string> workloads = {"gpt_tiny", "gpt_mini", "resnet18"};
  std::vector<int> ranks = {2, 4};
  std::vector<std::string> modes = {"ddp", "zero1", "zero2", "zero3"};
  std::vector<std::string> overlap = {"on", "off"};
  std::vector<std::string> precisions = {"fp32"};
  std::string backend = "shm";
  int steps = 4;
  int warmup = 2;
  double bucket_cap_mb = 25.0;  // PyTorch DDP's defaults
  double first_bucket_mb = 1.0;
  // Worker only.
  bool worker = false;
  std::string workload = "gpt_tiny";
  std::string mode = "ddp";
  std::vector<bool> overlap_settings;  // from --overlap, in its order
};

int zero_stage_of(const std::string& mode) {
  return mode == "ddp" ? 0 : mode[4] - '0';
}

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double peak_rss_mb() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;  // kB
  return 0.0;
}

// A workload's model, its loss and one step's batch (synthetic: what data loading gives does not
// matter here), per shared/WORKLOADS.md.
struct Workload {
  std::unique_ptr<nn::Module> model;
  std::function<Expected<Variable>(const Variable& output, const Variable& targets)> loss;
  Tensor inputs, targets;
};

Expected<Workload> make_workload(const std::string& name, int rank) {
  Workload w;
  Pcg32 rng(99, uint64_t(rank));
  if (name == "resnet18") {
    TESSEL_ASSIGN_OR_RETURN(nn::ResNetConfig config,
                            nn::resnet_config(18, nn::ResNetStem::kCifar, 10));
    w.model = std::make_unique<nn::ResNet>(config);
    w.loss = [](const Variable& logits, const Variable& targets) {
      return autograd::cross_entropy(logits, targets);
    };
    const int64_t batch = 32;
    std::vector<float> images(size_t(batch * 3 * 32 * 32));
    for (float& v : images)
      v = rng.next_float() * 2.0f - 1.0f;
    std::vector<int64_t> labels;
    for (int64_t i = 0; i < batch; ++i)
      labels.push_back(int64_t(rng.below(10)));
    TESSEL_ASSIGN_OR_RETURN(w.inputs, Tensor::from_vector(images, {batch, 3, 32, 32}));
    TESSEL_ASSIGN_OR_RETURN(w.targets, Tensor::from_vector(labels, {batch}));
    return w;
  }
  nn::GptConfig config;
  int64_t batch = 0;
  if (name == "gpt_tiny") {
    config = nn::gpt_tiny();
    batch = 12;
  } else if (name == "gpt_mini") {
    config = nn::gpt_mini();
    batch = 8;
  } else {
    return invalid_argument("unknown workload '{}'", name);
  }
  auto gpt = std::make_unique<nn::GPT>(config);
  nn::GPT* model = gpt.get();
  w.model = std::move(gpt);
  w.loss = [model](const Variable& logits, const Variable& targets) {
    return model->loss(logits, targets);
  };
  std::vector<int64_t> ids, targets;
  for (int64_t i = 0; i < batch * config.block_size; ++i) {
    ids.push_back(int64_t(rng.below(uint32_t(config.vocab_size))));
    targets.push_back(int64_t(rng.below(uint32_t(config.vocab_size))));
  }
  TESSEL_ASSIGN_OR_RETURN(w.inputs, Tensor::from_vector(ids, {batch, config.block_size}));
  TESSEL_ASSIGN_OR_RETURN(w.targets, Tensor::from_vector(targets, {batch, config.block_size}));
  return w;
}

// One rank of one configuration; rank 0 prints the JSON row.
Status run_worker(const Options& o) {
  TESSEL_ASSIGN_OR_RETURN(auto group, dist::ProcessGroup::from_env());
  TESSEL_ASSIGN_OR_RETURN(Workload w, make_workload(o.workload, group->rank()));
  Pcg32 init(1, 1);
  TESSEL_ASSIGN_OR_RETURN(nn::FlatParameters params,
                          nn::FlatParameters::create(*w.model, cpu_device(), init));
  auto make_adamw = [](nn::FlatParameters& p) -> Expected<std::unique_ptr<optim::Optimizer>> {
    TESSEL_ASSIGN_OR_RETURN(auto opt, optim::AdamW::create(p, {.lr = 1e-3}));
    return std::unique_ptr<optim::Optimizer>(std::move(opt));
  };
  TESSEL_ASSIGN_OR_RETURN(
      auto dp,
      parallel::DataParallel::create(params, *group, make_adamw,
                                     {.zero_stage = zero_stage_of(o.mode),
                                      .bucket_cap_bytes = int64_t(o.bucket_cap_mb * (1 << 20)),
                                      .first_bucket_bytes = int64_t(o.first_bucket_mb * (1 << 20)),
                                      .overlap = true}));
  // Overlap settings take turns step by step in one job (a paired measurement): a shared
  // machine's load drifts over minutes and would otherwise favour whichever job ran in a calm.
  struct Setting {
    bool overlap;
    std::string precision;
  };
  std::vector<Setting> settings;
  for (const std::string& precision : o.precisions)
    for (bool overlap : o.overlap_settings)
      settings.push_back({overlap, precision});
  struct Samples {
    std::vector<double> step_ms, exposed_ms, max_wait_ms;
  };
  std::vector<Samples> samples(settings.size());
  const int rounds = o.warmup + o.steps;
  for (int s = 0; s < rounds * int(settings.size()); ++s) {
    const size_t which = size_t(s) % settings.size();
    dp->set_overlap(settings[which].overlap);
    TESSEL_TRY(group->barrier());  // every rank starts the step together
    const Clock::time_point start = Clock::now();
    {
      // Mixed precision as the trainer does it: 16-bit gemms, f32 everywhere else.
      autograd::Autocast autocast(settings[which].precision == "bf16"   ? DType::kBF16
                                  : settings[which].precision == "fp16" ? DType::kF16
                                                                        : DType::kF32);
      TESSEL_ASSIGN_OR_RETURN(Variable logits, w.model->forward(Variable(w.inputs)));
      TESSEL_ASSIGN_OR_RETURN(Variable loss, w.loss(logits, Variable(w.targets)));
      TESSEL_TRY(loss.backward());
    }
    TESSEL_TRY(dp->finish_backward());
    TESSEL_TRY(dp->optimizer().step());
    TESSEL_TRY(params.zero_grad());
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
    if (s / int(settings.size()) >= o.warmup) {
      // The rank that reached the collectives last waited only for the communication; the others
      // also waited for it (load imbalance). Keep both: min and max over the ranks.
      double waits[2] = {dp->last_stats().exposed_comm_ms, -dp->last_stats().exposed_comm_ms};
      TESSEL_ASSIGN_OR_RETURN(
          dist::Work w, group->all_reduce(waits, 2, dist::DataType::kFloat64, dist::RedOp::kMin));
      TESSEL_TRY(w.wait());
      samples[which].step_ms.push_back(ms);
      samples[which].exposed_ms.push_back(waits[0]);
      samples[which].max_wait_ms.push_back(-waits[1]);
    }
  }
  // The step's collectives alone: the fastest of 5 replays (the least disturbed by neighbours).
  double comm_ms = 0;
  for (int i = 0; i < 5; ++i) {
    TESSEL_ASSIGN_OR_RETURN(double ms, dp->time_collectives_alone());
    comm_ms = i == 0 ? ms : std::min(comm_ms, ms);
  }
  double peaks[2] = {peak_rss_mb(),
                     double(cpu_device()->allocator().stats().peak_bytes) / (1 << 20)};
  TESSEL_ASSIGN_OR_RETURN(dist::Work work,
                          group->all_reduce(peaks, 2, dist::DataType::kFloat64, dist::RedOp::kMax));
  TESSEL_TRY(work.wait());
  if (group->rank() != 0) return ok_status();
  const parallel::MemoryAccount m = dp->memory();
  for (size_t i = 0; i < settings.size(); ++i) {
    const double step = median(samples[i].step_ms), exposed = median(samples[i].exposed_ms);
    nlohmann::json row = {{"workload", o.workload},
                          {"ranks", group->size()},
                          {"backend", group->backend()},
                          {"mode", o.mode},
                          {"overlap", settings[i].overlap},
                          {"precision", settings[i].precision},
                          {"buckets", dp->num_buckets()},
                          {"bucket_cap_mb", o.bucket_cap_mb},
                          {"step_ms", step},
                          {"compute_ms", step - exposed},
                          {"comm_ms", comm_ms},
                          {"exposed_comm_ms", exposed},
                          {"max_wait_ms", median(samples[i].max_wait_ms)},
                          {"peak_rss_mb", peaks[0]},
                          {"peak_alloc_mb", peaks[1]},
                          {"params_mb", double(m.parameter_bytes) / (1 << 20)},
                          {"grads_mb", double(m.gradient_bytes) / (1 << 20)},
                          {"optim_mb", double(m.optimizer_bytes) / (1 << 20)},
                          {"steps", o.steps},
                          {"load_average", load_average()}};
    std::printf("%s\n", row.dump().c_str());
  }
  std::fflush(stdout);
  return ok_status();
}

// One job: a workload, rank count and mode, with every overlap setting asked for; its rows.
Expected<std::vector<nlohmann::json>> run_job(const Options& o, const std::string& workload,
                                              int nranks, const std::string& mode) {
  auto join = [](const std::vector<std::string>& items) {
    std::string out;
    for (const std::string& item : items)
      out += (out.empty() ? "" : ",") + item;
    return out;
  };
  dist::LaunchOptions launch;
  launch.nranks = nranks;
  TESSEL_ASSIGN_OR_RETURN(launch.backend, dist::parse_backend(o.backend));
  launch.command = {self_path(),
                    "bench",
                    "ddp",
                    "--worker",
                    "--workload",
                    workload,
                    "--mode",
                    mode,
                    "--overlap",
                    join(o.overlap),
                    "--precision",
                    join(o.precisions),
                    "--steps",
                    std::to_string(o.steps),
                    "--warmup",
                    std::to_string(o.warmup),
                    "--bucket-cap-mb",
                    fmt::format("{}", o.bucket_cap_mb),
                    "--first-bucket-mb",
                    fmt::format("{}", o.first_bucket_mb)};
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  launch.env = {{"TESSEL_THREADS", std::to_string(std::max(1u, cores / unsigned(nranks)))}};
  launch.capture = true;
  TESSEL_ASSIGN_OR_RETURN(dist::LaunchResult result, dist::launch(launch));
  std::string output;
  for (auto& r : result.ranks)
    output += r.output;
  if (!result.first_failure.empty())
    return internal_error("{} {} ranks {}: {}\n{}", workload, nranks, mode, result.first_failure,
                          output);
  std::vector<nlohmann::json> rows = json_rows(result.ranks.front().output);
  if (rows.size() == o.overlap.size() * o.precisions.size()) return rows;
  return internal_error("{} {} ranks {}: rank 0 printed no result\n{}", workload, nranks, mode,
                        output);
}

int run(const Options& o) {
  if (o.worker) {
    Options worker = o;
    for (const std::string& setting : o.overlap)
      worker.overlap_settings.push_back(setting == "on");
    Status s = run_worker(worker);
    if (!s.ok()) {
      fmt::print(stderr, "tessel bench ddp: {}\n", s.to_string());
      return 1;
    }
    return 0;
  }
  std::vector<nlohmann::json> rows;
  if (!o.json)
    fmt::print(
        "tessel bench ddp: backend {}, {} timed steps after {} warm-up, AdamW, buckets "
        "{} MiB (first {} MiB); {} cores, load average {:.1f}\n\n{:<9} {:>5} {:<6} {:<7} {:<5} "
        "{:>9} {:>10} {:>8} {:>11} {:>8} {:>9} {:>8} "
        "{:>8} {:>8} {:>8}\n",
        o.backend, o.steps, o.warmup, o.bucket_cap_mb, o.first_bucket_mb,
        std::thread::hardware_concurrency(), load_average(), "workload", "ranks", "mode", "overlap",
        "prec", "step_ms", "compute_ms", "comm_ms", "exposed_ms", "exposed%", "rss_MB", "alloc_MB",
        "param_MB", "grad_MB", "optim_MB");
  for (const std::string& workload : o.workloads) {
    for (int n : o.ranks)
      for (const std::string& mode : o.modes) {
        Expected<std::vector<nlohmann::json>> job = run_job(o, workload, n, mode);
        if (!job.ok()) {
          fmt::print(stderr, "{}\n", job.status().to_string());
          return 1;
        }
        for (const auto& r : *job) {
          rows.push_back(r);
          if (o.json) {
            fmt::print("{}\n", r.dump());
            continue;
          }
          const double exposed = r["exposed_comm_ms"], step = r["step_ms"];
          fmt::print(
              "{:<9} {:>5} {:<6} {:<7} {:<5} {:>9.1f} {:>10.1f} {:>8.1f} {:>11.1f} {:>7.1f}% "
              "{:>9.0f} {:>8.0f} {:>8.1f} {:>8.1f} {:>8.1f}\n",
              workload, n, mode, bool(r["overlap"]) ? "on" : "off", std::string(r["precision"]),
              step, double(r["compute_ms"]), double(r["comm_ms"]), exposed, 100.0 * exposed / step,
              double(r["peak_rss_mb"]), double(r["peak_alloc_mb"]), double(r["params_mb"]),
              double(r["grads_mb"]), double(r["optim_mb"]));
        }
        std::fflush(stdout);
      }
  }
  if (o.json) return 0;
  // The bars, from the rows above (fp32 rows; the bf16 ratio where both were run).
  auto find = [&](const std::string& w, int n, const std::string& mode, bool ov,
                  const std::string& precision = "fp32") -> const nlohmann::json* {
    for (const auto& r : rows)
      if (r["workload"] == w && r["ranks"] == n && r["mode"] == mode && r["overlap"] == ov &&
          r["precision"] == precision)
        return &r;
    return nullptr;
  };
  fmt::print("\n");
  for (const std::string& w : o.workloads)
    for (int n : o.ranks) {
      for (const std::string& mode : o.modes) {
        const auto *on = find(w, n, mode, true), *off = find(w, n, mode, false);
        if (on && off && double((*off)["exposed_comm_ms"]) > 0)
          fmt::print(
              "{} {} ranks {}: exposed communication with overlap / without = {:.2f} "
              "(bar: <= 0.33)\n",
              w, n, mode, double((*on)["exposed_comm_ms"]) / double((*off)["exposed_comm_ms"]));
        for (bool ov : {true, false}) {
          const auto *fp32 = find(w, n, mode, ov), *bf16 = find(w, n, mode, ov, "bf16");
          if (fp32 && bf16)
            fmt::print("{} {} ranks {} overlap {}: bf16 / fp32 step time = {:.2f} (bar: <= 0.7)\n",
                       w, n, mode, ov ? "on" : "off",
                       double((*bf16)["step_ms"]) / double((*fp32)["step_ms"]));
        }
      }
      // One job measures every overlap setting, so either row has the job's peaks.
      auto any_overlap = [&](const std::string& mode) {
        const nlohmann::json* r = find(w, n, mode, true);
        return r ? r : find(w, n, mode, false);
      };
      const auto *ddp = any_overlap("ddp"), *z2 = any_overlap("zero2");
      if (ddp && z2)
        fmt::print(
            "{} {} ranks: ZeRO-2 / DDP peak memory per rank: RSS {:.2f}, tensors {:.2f} "
            "(bar: < 1)\n",
            w, n, double((*z2)["peak_rss_mb"]) / double((*ddp)["peak_rss_mb"]),
            double((*z2)["peak_alloc_mb"]) / double((*ddp)["peak_alloc_mb"]));
    }
  return 0;
}

}  // namespace

void add_bench_ddp_command(CLI::App& bench) {
  auto options = std::make_shared<Options>();
  CLI::App* cmd = bench.add_subcommand(
      "ddp", "data-parallel step time, exposed communication and memory: DDP and ZeRO 1/2/3");
  cmd->add_flag("--json", options->json, "one JSON object per line instead of the table");
  cmd->add_option("--workloads", options->workloads, "gpt_tiny, gpt_mini, resnet18 (default: all)")
      ->delimiter(',');
  cmd->add_option("--ranks", options->ranks, "rank counts (default: 2,4)")->delimiter(',');
  cmd->add_option("--modes", options->modes, "ddp, zero1, zero2, zero3 (default: all)")
      ->delimiter(',')
      ->check(CLI::IsMember({"ddp", "zero1", "zero2", "zero3"}));
  cmd->add_option("--overlap", options->overlap, "on, off (default: both)")
      ->delimiter(',')
      ->check(CLI::IsMember({"on", "off"}));
  cmd->add_option("--precision", options->precisions,
                  "fp32 (default), bf16, fp16: 16-bit gemms as the trainer's precision option")
      ->delimiter(',')
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}));
  cmd->add_option("--backend", options->backend, "shm (default) or mpi")
      ->check(CLI::IsMember({"shm", "mpi"}));
  cmd->add_option("--steps", options->steps, "timed steps per job (default 4)")
      ->check(CLI::Range(1, 1000));
  cmd->add_option("--warmup", options->warmup, "untimed steps first (default 2)")
      ->check(CLI::Range(0, 1000));
  cmd->add_option("--bucket-cap-mb", options->bucket_cap_mb, "bucket size cap (default 25)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--first-bucket-mb", options->first_bucket_mb, "first bucket's cap (default 1)")
      ->check(CLI::PositiveNumber);
  // One rank of one job (what the benchmark launches).
  cmd->add_flag("--worker", options->worker)->group("");
  cmd->add_option("--workload", options->workload)->group("");
  cmd->add_option("--mode", options->mode)->group("");
  cmd->callback([options] { exit_code = run(*options); });
}

}  // namespace tessel::cli
