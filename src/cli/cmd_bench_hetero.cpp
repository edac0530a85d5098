// `tessel bench hetero`: uneven data parallelism on two ranks of unequal speed. One rank runs at
// about half the speed of the other, and the job trains shared/WORKLOADS.md's gpt_mini and
// resnet18 with the global batch split evenly and split by measured throughput
// (parallel/rebalance.h), the two splits taking turns in one run.
//
// Unequal ranks (--slow-by), each rank with one kernel thread unless said otherwise:
//   "pace" (the default): every op the slow rank runs in forward and backward takes twice as
//            long: after an op it sleeps for as long as the op took (autograd/pace.h), paying
//            what it owes before any wait for the other rank. So it is slow the way a slower
//            device is: each compute segment ~2x, its synchronisation points (SyncBatchNorm's
//            all-reduces, DDP's buckets) arriving when its own work reaches them, and the core
//            free while it "computes", as a host core is while an accelerator runs.
//   "repeat": the slow rank computes each step's forward and backward twice, the first time on a
//            copy of the model that nothing reads: half the speed on any machine, but all the
//            extra work comes before the real pass, so with synchronised batch norm the fast rank
//            waits at the first layer for the whole shadow pass (the last session's 1.13x).
//   "threads": the fast rank has 2 kernel threads, the slow rank 1 (TESSEL_THREADS, set in the
//            rank before its pool exists): half the CPU time on 2 free cores, but on a machine
//            running many other jobs the 2-thread rank gets less than twice (measured here at
//            load 25: 1.26x).
//   "load":  each rank pinned to a core of its own, the slow rank's core shared with a thread
//            that spins: half of that core only when nothing else runs there.
//
// Each rank is a process of one job (dist::launch, shm), as `tessel launch` starts them; the
// model and its batch are WorkloadRun's (same seed on every rank: the same global batch), a rank
// computes its rows [lo, lo + share) of it. Per step: a barrier, forward and backward of the
// rank's rows (timed alone: the rank's compute), DataParallel's collectives and AdamW. The step
// time is the slowest rank's (all-reduced max); throughput = global batch / median step time.
// Splits take turns (--rounds rounds of --steps steps per split, after --warmup rounds), because a
// shared machine's load drifts by more than the effect measured; the medians are reported. The
// uneven split re-balances every --rebalance-every of its steps from the ranks' measured compute.
//
// TESSEL_HETERO_TRACE=1 in the environment: each rank prints every step's rows, compute and step
// time to stderr (`tessel launch -n 2 -- tessel bench hetero --worker --workload W` shows them).
//
// Losses: before the timed rounds the job trains --check-steps steps with an uneven split (the
// 2:1 split an exactly half-speed rank would get) and rank 0 then trains the same steps as one
// process with the whole batch from the same initial weights; max_loss_diff is the largest
// difference of the two runs' losses. BatchNorm (resnet18) is synchronised by default
// (--batch-norm sync: parallel/sync_batch_norm.h, torch.nn.SyncBatchNorm, statistics over both
// ranks' rows, the backward weighted by the shares), so its losses equal one process too; with
// --batch-norm per-rank each rank normalises with its own rows' statistics, as PyTorch DDP without
// SyncBatchNorm, and the losses differ by what a part's statistics differ from the whole's.
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "autograd/pace.h"
#include "cli/bench_job.h"
#include "cli/commands.h"
#include "dist/launcher.h"
#include "dist/process_group.h"
#include "parallel/data_parallel.h"
#include "parallel/rebalance.h"
#include "parallel/sync_batch_norm.h"
#include "support/thread_pool.h"
#include "train/workloads.h"

namespace tessel::cli {
namespace {

using autograd::Variable;
using Clock = std::chrono::steady_clock;

// The tolerance of the data-parallel tests (parallel/data_parallel_test.cpp).
constexpr double kLossTolerance = 2e-5;

struct Options {
  bool json = false;
  std::vector<std::string> workloads = {"gpt_mini", "resnet18"};
  std::string mode = "ddp";
  int rounds = 3;
  int steps = 1;
  int warmup = 1;
  int rebalance_every = 1;
  double hysteresis = 0.05;
  int check_steps = 2;
  int slow_rank = 1;
  std::string slow_by = "pace";
  std::string batch_norm = "sync";  // or "per-rank"
  // Worker only.
  bool worker = false;
  std::string workload;
};

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Pins the calling thread (and the threads it starts later) to the `index`-th core it may run on.
Status pin_to_core(int index) {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (::sched_getaffinity(0, sizeof(allowed), &allowed) != 0)
    return internal_error("sched_getaffinity failed");
  std::vector<int> cores;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &allowed)) cores.push_back(c);
  if (cores.empty()) return internal_error("no core to run on");
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cores[size_t(index) % cores.size()], &one);
  if (::sched_setaffinity(0, sizeof(one), &one) != 0)
    return internal_error("sched_setaffinity to core {} failed",
                          cores[size_t(index) % cores.size()]);
  return ok_status();
}

// A thread that spins on the calling thread's core until destroyed: the slow rank's competitor.
class CompetingLoad {
 public:
  CompetingLoad()
      : thread_([this] {
          volatile uint64_t spins = 0;
          while (!stop_.load(std::memory_order_relaxed))
            spins = spins + 1;
        }) {}
  ~CompetingLoad() {
    stop_ = true;
    thread_.join();
  }

 private:
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

Expected<std::unique_ptr<optim::Optimizer>> make_adamw(nn::FlatParameters& p) {
  TESSEL_ASSIGN_OR_RETURN(auto opt, optim::AdamW::create(p, {.lr = 1e-3}));  // WORKLOADS.md
  return std::unique_ptr<optim::Optimizer>(std::move(opt));
}

std::string slowdown(const std::string& slow_by) {
  if (slow_by == "load") return "a spinning thread pinned to the slow rank's core";
  if (slow_by == "threads") return "1 kernel thread against the fast rank's 2";
  if (slow_by == "repeat") return "it computes forward and backward twice (once on a copy)";
  return "each of its ops takes 2x (it sleeps as long as the op took), 1 thread each";
}

// --slow-by pace: how much longer the slow rank's ops take.
constexpr double kPaceFactor = 2.0;

struct StepResult {
  double loss = 0;       // the global batch's mean loss
  double compute_s = 0;  // this rank's forward + backward
  double step_s = 0;     // the slowest rank's whole step
};

// One data-parallel step with `shares` rows per rank.
// `pace` > 1: this rank's forward and backward ops take that many times as long.
Expected<StepResult> train_step(train::WorkloadRun& run, parallel::DataParallel& dp,
                                dist::ProcessGroup& group, const std::vector<int64_t>& shares,
                                train::WorkloadRun* shadow, parallel::GroupBatchNormSync* sync,
                                double pace) {
  const int r = group.rank();
  int64_t lo = 0, global = 0;
  for (size_t q = 0; q < shares.size(); ++q) {
    if (int(q) < r) lo += shares[q];
    global += shares[q];
  }
  const int64_t rows = shares[size_t(r)];
  TESSEL_TRY(dp.set_batch_share(rows, global));
  TESSEL_TRY(group.barrier());
  const Clock::time_point start = Clock::now();
  double weighted_loss = 0;
  if (rows > 0 && shadow) {  // --slow-by repeat: the same work once more, on a copy
    TESSEL_ASSIGN_OR_RETURN(Variable loss, shadow->loss_of_rows(lo, lo + rows));
    TESSEL_TRY(loss.backward());
    TESSEL_TRY(shadow->parameters().zero_grad());
  }
  if (rows > 0) {
    std::optional<autograd::Pace> paced;  // settles what it owes when the pass ends
    if (pace > 1.0) paced.emplace(pace);
    TESSEL_ASSIGN_OR_RETURN(Variable loss, run.loss_of_rows(lo, lo + rows));
    TESSEL_TRY(loss.backward());
    TESSEL_ASSIGN_OR_RETURN(std::vector<float> value, loss.data().to_vector<float>());
    weighted_loss = double(value.at(0)) * double(rows) / double(global);
  }
  StepResult result;
  result.compute_s = std::chrono::duration<double>(Clock::now() - start).count();
  // Synchronised batch norm waits for the slowest rank at every layer: not this rank's work.
  if (sync) result.compute_s -= sync->take_waited_s();
  TESSEL_TRY(rows > 0 ? dp.finish_backward() : dp.pass_without_rows());
  TESSEL_TRY(dp.optimizer().step());
  TESSEL_TRY(run.parameters().zero_grad());
  double step_s = std::chrono::duration<double>(Clock::now() - start).count();
  TESSEL_ASSIGN_OR_RETURN(
      dist::Work w, group.all_reduce(&step_s, 1, dist::DataType::kFloat64, dist::RedOp::kMax));
  TESSEL_TRY(w.wait());
  TESSEL_ASSIGN_OR_RETURN(
      dist::Work l,
      group.all_reduce(&weighted_loss, 1, dist::DataType::kFloat64, dist::RedOp::kSum));
  TESSEL_TRY(l.wait());
  result.step_s = step_s;
  result.loss = weighted_loss;
  return result;
}

std::string shares_text(const std::vector<int64_t>& shares) {
  std::string out;
  for (int64_t s : shares) {
    if (!out.empty()) out += ':';
    out += std::to_string(s);
  }
  return out;
}

Status run_worker(const Options& o) {
  // The launcher's rank (bench hetero starts its ranks itself, on one machine), known before the
  // group exists: the core is pinned before any thread starts, so that they all inherit it.
  const char* rank_env = std::getenv("TESSEL_RANK");
  const int rank = rank_env ? std::atoi(rank_env) : 0;
  std::unique_ptr<CompetingLoad> load;
  if (o.slow_by == "load") {
    TESSEL_TRY(pin_to_core(rank));
    if (rank == o.slow_rank) load = std::make_unique<CompetingLoad>();
  } else if (o.slow_by == "threads") {
    ::setenv("TESSEL_THREADS", rank == o.slow_rank ? "1" : "2", 1);
  }
  const int threads = ThreadPool::global().num_threads();
  TESSEL_ASSIGN_OR_RETURN(auto group, dist::ProcessGroup::from_env());
  if (group->rank() != rank)
    return internal_error("TESSEL_RANK {} is rank {}", rank, group->rank());
  const int n = group->size();
  std::vector<double> threads_per_rank(static_cast<size_t>(n));
  {
    const double mine = threads;
    TESSEL_ASSIGN_OR_RETURN(dist::Work w, group->all_gather(&mine, threads_per_rank.data(), 1,
                                                            dist::DataType::kFloat64));
    TESSEL_TRY(w.wait());
  }
  TESSEL_ASSIGN_OR_RETURN(auto run, train::WorkloadRun::create(o.workload, cpu_device(), 1));
  const int stage = o.mode == "ddp" ? 0 : o.mode[4] - '0';
  TESSEL_ASSIGN_OR_RETURN(
      auto dp,
      parallel::DataParallel::create(run->parameters(), *group, make_adamw, {.zero_stage = stage}));
  TESSEL_TRY(dp->broadcast_buffers(run->model()));
  std::shared_ptr<parallel::GroupBatchNormSync> sync;
  if (o.batch_norm == "sync") {  // the shadow and the one-process run keep plain batch norm
    TESSEL_ASSIGN_OR_RETURN(sync, parallel::convert_sync_batchnorm(run->model(), *group, dp.get()));
  }
  std::unique_ptr<train::WorkloadRun> shadow;
  if (o.slow_by == "repeat" && rank == o.slow_rank) {
    TESSEL_ASSIGN_OR_RETURN(shadow, train::WorkloadRun::create(o.workload, cpu_device(), 2));
  }
  const int64_t global = run->batch_rows();
  const double pace = o.slow_by == "pace" && rank == o.slow_rank ? kPaceFactor : 1.0;

  // Losses against one process: the split a rank at exactly half the speed would get.
  std::vector<double> speeds(size_t(n), 2.0);
  if (o.slow_rank >= 0 && o.slow_rank < n) speeds[size_t(o.slow_rank)] = 1.0;
  TESSEL_ASSIGN_OR_RETURN(std::vector<int64_t> check_shares,
                          parallel::proportional_shares(global, speeds));
  std::vector<double> job_losses, one_process_losses;
  for (int s = 0; s < o.check_steps; ++s) {
    TESSEL_ASSIGN_OR_RETURN(StepResult step, train_step(*run, *dp, *group, check_shares,
                                                        shadow.get(), sync.get(), pace));
    job_losses.push_back(step.loss);
  }
  if (rank == 0 && o.check_steps > 0) {  // the same initial weights (seed 1), the whole batch
    TESSEL_ASSIGN_OR_RETURN(auto alone, train::WorkloadRun::create(o.workload, cpu_device(), 1));
    for (int s = 0; s < o.check_steps; ++s) {
      TESSEL_TRY(alone->step());
      TESSEL_ASSIGN_OR_RETURN(double loss, alone->last_loss());
      one_process_losses.push_back(loss);
    }
  }
  TESSEL_TRY(group->barrier());
  double max_loss_diff = 0;
  for (size_t s = 0; s < one_process_losses.size(); ++s)
    max_loss_diff = std::max(max_loss_diff, std::abs(job_losses[s] - one_process_losses[s]));

  // The timed rounds: even and uneven take turns.
  TESSEL_ASSIGN_OR_RETURN(parallel::Rebalancer balance,
                          parallel::Rebalancer::create(global, n, {.hysteresis = o.hysteresis}));
  const std::vector<int64_t> even = parallel::even_shares(global, n);
  struct Split {
    std::string name;
    std::vector<double> step_ms;
  };
  std::vector<Split> splits = {{"even", {}}, {"uneven", {}}};
  int uneven_steps = 0, moves = 0;
  std::vector<std::string> history = {shares_text(balance.shares())};
  for (int round = 0; round < o.warmup + o.rounds; ++round)
    for (Split& split : splits)
      for (int s = 0; s < o.steps; ++s) {
        const bool uneven = split.name == "uneven";
        const std::vector<int64_t> shares = uneven ? balance.shares() : even;
        TESSEL_ASSIGN_OR_RETURN(
            StepResult step, train_step(*run, *dp, *group, shares, shadow.get(), sync.get(), pace));
        if (uneven && ++uneven_steps % o.rebalance_every == 0) {
          TESSEL_ASSIGN_OR_RETURN(bool moved,
                                  balance.exchange(*group, shares[size_t(rank)], step.compute_s));
          if (moved) {
            ++moves;
            history.push_back(shares_text(balance.shares()));
          }
        }
        if (std::getenv("TESSEL_HETERO_TRACE"))
          std::fprintf(stderr, "rank %d %s rows %ld compute %.3f s step %.3f s\n", rank,
                       split.name.c_str(), long(shares[size_t(rank)]), step.compute_s, step.step_s);
        if (round < o.warmup) continue;
        split.step_ms.push_back(1e3 * step.step_s);
      }
  if (rank != 0) return ok_status();
  const train::WorkloadSpec& spec = run->spec();
  const double tokens_per_row = double(spec.items_per_step) / double(global);
  for (const Split& split : splits) {
    const bool uneven = split.name == "uneven";
    nlohmann::json row = {{"workload", o.workload},
                          {"split", split.name},
                          {"throughput", double(global) / (1e-3 * median(split.step_ms))},
                          {"unit", "samples/s"},
                          {"step_ms", median(split.step_ms)},
                          {"shares", uneven ? balance.shares() : even},
                          {"global_batch", global},
                          {"mode", o.mode},
                          {"ranks", n},
                          {"slow_rank", o.slow_rank},
                          {"slow_by", o.slow_by},
                          {"slowdown", slowdown(o.slow_by)},
                          {"threads", threads_per_rank},
                          {"timed_steps", split.step_ms.size()},
                          {"load_average", load_average()}};
    if (spec.unit == "tokens/s") row["tokens_per_s"] = double(row["throughput"]) * tokens_per_row;
    if (uneven) {
      row["measured_rows_per_s"] = balance.throughput();
      row["share_moves"] = moves;
      row["share_history"] = history;
      row["rebalance_every"] = o.rebalance_every;
      row["hysteresis"] = o.hysteresis;
      row["check_shares"] = check_shares;
      row["max_loss_diff"] = max_loss_diff;
      row["loss_tolerance"] = kLossTolerance;
      row["check_steps"] = o.check_steps;
      const bool batch_norm = o.workload.rfind("resnet", 0) == 0;
      row["batch_norm"] = !batch_norm              ? "none"
                          : o.batch_norm == "sync" ? "synchronised (SyncBatchNorm)"
                                                   : "per-rank statistics";
      row["losses_equal"] = max_loss_diff <= kLossTolerance;
    }
    std::printf("%s\n", row.dump().c_str());
  }
  std::fflush(stdout);
  return ok_status();
}

Expected<std::vector<nlohmann::json>> run_job(const Options& o, const std::string& workload) {
  dist::LaunchOptions launch;
  launch.nranks = 2;
  launch.command = {self_path(),
                    "bench",
                    "hetero",
                    "--worker",
                    "--workload",
                    workload,
                    "--mode",
                    o.mode,
                    "--rounds",
                    std::to_string(o.rounds),
                    "--steps",
                    std::to_string(o.steps),
                    "--warmup",
                    std::to_string(o.warmup),
                    "--rebalance-every",
                    std::to_string(o.rebalance_every),
                    "--hysteresis",
                    fmt::format("{}", o.hysteresis),
                    "--check-steps",
                    std::to_string(o.check_steps),
                    "--slow-rank",
                    std::to_string(o.slow_rank),
                    "--slow-by",
                    o.slow_by,
                    "--batch-norm",
                    o.batch_norm};
  launch.env = {{"TESSEL_THREADS", "1"}};  // "threads": each rank sets its own
  launch.capture = true;
  TESSEL_ASSIGN_OR_RETURN(dist::LaunchResult result, dist::launch(launch));
  std::string output;
  for (auto& r : result.ranks)
    output += r.output;
  if (!result.first_failure.empty())
    return internal_error("{}: {}\n{}", workload, result.first_failure, output);
  std::vector<nlohmann::json> rows = json_rows(result.ranks.front().output);
  if (rows.size() == 2) return rows;
  return internal_error("{}: rank 0 printed no result\n{}", workload, output);
}

int run(const Options& o) {
  if (o.worker) {
    Status s = run_worker(o);
    if (!s.ok()) {
      fmt::print(stderr, "tessel bench hetero: {}\n", s.to_string());
      return 1;
    }
    return 0;
  }
  if (!o.json)
    fmt::print(
        "tessel bench hetero: 2 ranks, rank {} slowed: {}; {}, "
        "{} rounds x {} step(s) per split after {} warm-up, rebalance every {} uneven "
        "step(s), hysteresis {}\nbefore: {}\n\n{:<9} {:<7} {:>11} {:>9} {:>8} {:>15} "
        "{:>14} {:>7}\n",
        o.slow_rank, slowdown(o.slow_by), o.mode, o.rounds, o.steps, o.warmup, o.rebalance_every,
        o.hysteresis, uptime(), "workload", "split", "samples/s", "step_ms", "shares",
        "rows/s r0:r1", "max_loss_diff", "moves");
  std::vector<std::pair<std::string, double>> ratios;
  for (const std::string& workload : o.workloads) {
    Expected<std::vector<nlohmann::json>> rows = run_job(o, workload);
    if (!rows.ok()) {
      fmt::print(stderr, "{}\n", rows.status().to_string());
      return 1;
    }
    const nlohmann::json &even = (*rows)[0], &uneven = (*rows)[1];
    ratios.emplace_back(workload, double(uneven["throughput"]) / double(even["throughput"]));
    for (const nlohmann::json& r : *rows) {
      if (o.json) {
        fmt::print("{}\n", r.dump());
        continue;
      }
      std::string speeds = "-", diff = "-", moves = "-";
      if (r["split"] == "uneven") {
        const std::vector<double> v = r["measured_rows_per_s"];
        speeds = fmt::format("{:.2f}:{:.2f}", v.at(0), v.at(1));
        diff = fmt::format("{:.2e}", double(r["max_loss_diff"]));
        moves = std::to_string(int(r["share_moves"]));
      }
      fmt::print("{:<9} {:<7} {:>11.2f} {:>9.0f} {:>8} {:>15} {:>14} {:>7}\n", workload,
                 std::string(r["split"]), double(r["throughput"]), double(r["step_ms"]),
                 shares_text(r["shares"]), speeds, diff, moves);
    }
    std::fflush(stdout);
  }
  if (o.json) return 0;
  fmt::print("after: {}\n\n", uptime());
  for (const auto& [workload, ratio] : ratios)
    fmt::print("{}: uneven / even throughput = {:.2f} (bar: >= 1.15)\n", workload, ratio);
  fmt::print("losses: max |job - one process| over {} check steps, tolerance {} (BatchNorm: {})\n",
             o.check_steps, kLossTolerance,
             o.batch_norm == "sync" ? "synchronised over the ranks" : "per-rank statistics");
  return 0;
}

}  // namespace

void add_bench_hetero_command(CLI::App& bench) {
  auto options = std::make_shared<Options>();
  CLI::App* cmd = bench.add_subcommand(
      "hetero", "uneven data parallelism: two ranks of unequal speed, even vs uneven split");
  cmd->add_flag("--json", options->json, "one JSON object per (workload, split)");
  cmd->add_option("--workloads", options->workloads, "gpt_mini, resnet18 (default: both)")
      ->delimiter(',')
      ->check(CLI::IsMember({"gpt_tiny", "gpt_mini", "resnet18"}));
  cmd->add_option("--mode", options->mode, "ddp (default), zero1, zero2, zero3")
      ->check(CLI::IsMember({"ddp", "zero1", "zero2", "zero3"}));
  cmd->add_option("--rounds", options->rounds, "timed rounds of even then uneven (default 3)")
      ->check(CLI::Range(1, 1000));
  cmd->add_option("--steps", options->steps, "steps per split and round (default 1)")
      ->check(CLI::Range(1, 1000));
  cmd->add_option("--warmup", options->warmup, "untimed rounds first (default 1)")
      ->check(CLI::Range(0, 1000));
  cmd->add_option("--rebalance-every", options->rebalance_every,
                  "uneven steps between measurements (default 1)")
      ->check(CLI::Range(1, 1000));
  cmd->add_option("--hysteresis", options->hysteresis,
                  "move the shares only for a shorter predicted step by this fraction (0.05)")
      ->check(CLI::Range(0.0, 0.99));
  cmd->add_option("--check-steps", options->check_steps,
                  "steps compared with one process before timing (default 2; 0: none)")
      ->check(CLI::Range(0, 100));
  cmd->add_option(
         "--slow-by", options->slow_by,
         "pace (default: each op of the slow rank takes 2x, sleeping), repeat (it computes "
         "each step twice), threads (2 kernel threads against 1) or load (a spinning "
         "thread on the slow rank's core)")
      ->check(CLI::IsMember({"pace", "repeat", "threads", "load"}));
  cmd->add_option("--batch-norm", options->batch_norm,
                  "sync (default: SyncBatchNorm over the ranks) or per-rank (each rank's own "
                  "statistics, as DDP without SyncBatchNorm)")
      ->check(CLI::IsMember({"sync", "per-rank"}));
  cmd->add_option("--slow-rank", options->slow_rank, "the rank made slow (1; -1: none)")
      ->check(CLI::Range(-1, 1));
  cmd->add_flag("--worker", options->worker)->group("");
  cmd->add_option("--workload", options->workload)->group("");
  cmd->callback([options] { exit_code = run(*options); });
}

}  // namespace tessel::cli
