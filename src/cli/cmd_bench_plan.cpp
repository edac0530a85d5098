// `tessel bench plan`: checks the step-time model (plan/step_model.h) against data-parallel
// steps measured on machines simulated in network namespaces (dist/netns_cluster.h), one rank per
// machine, over the mpi backend (Open MPI, TCP only). The simulated machines share this host's
// cores, so the model is given that contention explicitly (plan::Contention: ranks per core, and
// the share of a core each rank's communication thread takes while a collective runs), and its
// parameters are calibrated on runs other than the ones it is checked against:
//
//   calibration  a job of 1 rank: one rank's compute alone (forward, backward with each bucket's
//                readiness, optimizer; the steps without overlap). Jobs of each rank count at the
//                calibration link (--calibration-link, 40Mbit/s, none of the checked links): the
//                cores C from the compute slowdown of p ranks (max(1, p / C), mean over the
//                jobs); from the steps without overlap, how much slower a step's collectives run
//                than the same bytes in the link's streams (the other threads share the cores the
//                progress threads need; the link is scaled by it); from the steps with overlap,
//                the communication thread's share u
//                (backward takes longer beside a collective) and the rate eta at which a
//                collective progresses beside backward (the exposed communication), both
//                solved through the model, mean over the jobs.
//   validation   for each checked link and rank count, a fresh job: its link is measured first
//                (all-reduce streams of 8 B to 256 KiB, 5 repetitions, the median per size, then
//                a least-squares fit of latency and bandwidth: plan::fit_link), then the steps
//                with overlap on and off take turns. The model predicts both kinds of step from
//                the calibration (compute alone, C, u) and this job's link; nothing measured in
//                the job's steps goes into the prediction.
//
// Exposed communication is the smallest over the ranks (a rank that arrives late also waits for
// the others), as `tessel bench ddp` reports it. Links are shaped by netem where the kernel has it,
// else by tbf (rate only).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cli/bench_job.h"
#include "cli/commands.h"
#include "dist/launcher.h"
#include "dist/netns_cluster.h"
#include "dist/process_group.h"
#include "plan/profile.h"
#include "plan/step_model.h"
#include "train/train_config.h"

namespace tessel::cli {
namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  std::string config;
  std::vector<std::string> links = {"25Mbit/s", "50Mbit/s", "100Mbit/s"};
  std::vector<int> ranks = {2, 4};
  std::string calibration_link = "40Mbit/s";
  int steps = 5;
  int warmup = 1;
  bool json = false;
  bool worker = false;
};

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Seconds per all-reduce (f32 sum) of `bytes` in streams of `calls` back to back, as a step's
// buckets run (TCP through a shaped queue is slower in a stream than in one call): the median of
// `repetitions` streams.
Expected<double> all_reduce_seconds(dist::ProcessGroup& group, size_t bytes, int calls,
                                    int repetitions) {
  const size_t count = std::max<size_t>(1, bytes / sizeof(float));
  std::vector<float> buffer(size_t(calls) * count, 1.0f);
  std::vector<double> times;
  for (int i = 0; i < repetitions; ++i) {
    TESSEL_TRY(group.barrier());
    const Clock::time_point start = Clock::now();
    std::vector<dist::Work> works;
    for (int c = 0; c < calls; ++c) {
      TESSEL_ASSIGN_OR_RETURN(dist::Work w,
                              group.all_reduce(buffer.data() + size_t(c) * count, count,
                                               dist::DataType::kFloat32, dist::RedOp::kSum));
      works.push_back(std::move(w));
    }
    for (dist::Work& w : works)
      TESSEL_TRY(w.wait());
    times.push_back(std::chrono::duration<double>(Clock::now() - start).count() / calls);
  }
  return median(times);
}

nlohmann::json profile_json(const plan::ComputeProfile& p) {
  nlohmann::json buckets = nlohmann::json::array();
  for (const plan::BucketProfile& b : p.buckets)
    buckets.push_back({{"bytes", b.bytes}, {"ready_s", b.ready_s}});
  return {{"forward_s", p.forward_s},
          {"backward_s", p.backward_s},
          {"optimizer_s", p.optimizer_s},
          {"buckets", buckets}};
}

plan::ComputeProfile profile_of(const nlohmann::json& j) {
  plan::ComputeProfile p;
  p.forward_s = j["forward_s"];
  p.backward_s = j["backward_s"];
  p.optimizer_s = j["optimizer_s"];
  for (const auto& b : j["buckets"])
    p.buckets.push_back({b["bytes"], b["ready_s"]});
  return p;
}

Status run_worker(const Options& o) {
  TESSEL_ASSIGN_OR_RETURN(train::TrainConfig config, train::load_train_config(o.config));
  TESSEL_ASSIGN_OR_RETURN(auto group, dist::ProcessGroup::from_env());
  nlohmann::json timings = nlohmann::json::array();
  if (group->size() > 1)
    for (size_t bytes : {size_t(8), size_t(16) << 10, size_t(64) << 10, size_t(256) << 10}) {
      TESSEL_ASSIGN_OR_RETURN(double seconds, all_reduce_seconds(*group, bytes, 4, 5));
      timings.push_back({double(bytes), seconds});
    }
  TESSEL_ASSIGN_OR_RETURN(auto run, plan::ProfiledRun::create(config, *group));
  std::vector<plan::StepTimes> off, on;
  std::vector<double> exposed_on, exposed_off;
  for (int s = 0; s < 2 * (o.warmup + o.steps); ++s) {
    const bool overlap = s % 2 == 0;
    TESSEL_TRY(group->barrier());
    TESSEL_ASSIGN_OR_RETURN(plan::StepTimes t, run->step(overlap));
    double wait = t.exposed_s;
    TESSEL_ASSIGN_OR_RETURN(
        dist::Work w, group->all_reduce(&wait, 1, dist::DataType::kFloat64, dist::RedOp::kMin));
    TESSEL_TRY(w.wait());
    if (std::getenv("TESSEL_PLAN_TRACE") && group->rank() == 0)
      std::printf(
          "rank 0 step %d overlap %d: forward %.1f backward %.1f optimizer %.1f step %.1f "
          "exposed %.1f ms\n",
          s, int(overlap), 1e3 * t.forward_s, 1e3 * t.backward_s, 1e3 * t.optimizer_s,
          1e3 * t.step_s, 1e3 * wait);
    if (s / 2 < o.warmup) continue;
    (overlap ? on : off).push_back(t);
    (overlap ? exposed_on : exposed_off).push_back(wait);
  }
  if (group->rank() != 0) return ok_status();
  auto field = [](const std::vector<plan::StepTimes>& v, double plan::StepTimes::*member) {
    std::vector<double> out;
    for (const plan::StepTimes& t : v)
      out.push_back(t.*member);
    return median(out);
  };
  nlohmann::json row = {{"ranks", group->size()},
                        {"all_reduce_timings", timings},
                        {"compute", profile_json(plan::median_profile(off, run->bucket_bytes()))},
                        {"measured",
                         {{"overlap",
                           {{"step_s", field(on, &plan::StepTimes::step_s)},
                            {"backward_s", field(on, &plan::StepTimes::backward_s)},
                            {"exposed_s", median(exposed_on)}}},
                          {"no_overlap",
                           {{"step_s", field(off, &plan::StepTimes::step_s)},
                            {"backward_s", field(off, &plan::StepTimes::backward_s)},
                            {"exposed_s", median(exposed_off)}}}}}};
  std::printf("PLAN %s\n", row.dump().c_str());
  std::fflush(stdout);
  return ok_status();
}

// One job: `nranks` ranks, one per simulated machine, links of `shape`; rank 0's row.
Expected<nlohmann::json> run_job(const Options& o, const dist::LinkShape& shape, int nranks) {
  TESSEL_ASSIGN_OR_RETURN(auto cluster, dist::NetnsCluster::create(nranks, shape));
  dist::LaunchOptions launch;
  launch.nranks = nranks;
  launch.backend = dist::Backend::kMpi;
  launch.hosts = cluster->hosts();
  launch.rsh_agent = {self_path(), "netns-exec"};
  launch.mpirun_args = cluster->mpirun_args();
  launch.command = {self_path(), "bench",
                    "plan",      "--worker",
                    "--config",  o.config,
                    "--steps",   std::to_string(o.steps),
                    "--warmup",  std::to_string(o.warmup)};
  launch.env = {{"TESSEL_THREADS", "1"}};
  launch.capture = true;
  launch.deadline_s = 600;
  TESSEL_ASSIGN_OR_RETURN(dist::LaunchResult result, dist::launch(launch));
  std::string output;
  for (const auto& r : result.ranks)
    output += r.output;
  if (!result.first_failure.empty())
    return internal_error("{} ranks: {}\n{}", nranks, result.first_failure, output);
  std::istringstream lines(result.ranks.front().output);
  std::string line;
  while (std::getline(lines, line)) {
    size_t at = line.find("PLAN {");
    if (at != std::string::npos) {
      nlohmann::json row = nlohmann::json::parse(line.substr(at + 5));
      row["shaping"] = cluster->shaping();
      if (std::getenv("TESSEL_PLAN_TRACE"))  // each job's steps and row, for looking into a table
        fmt::print(stderr, "job of {} ranks:\n{}", nranks, result.ranks.front().output);
      return row;
    }
  }
  return internal_error("{} ranks: rank 0 printed no result\n{}", nranks, output);
}

double error_percent(double predicted, double measured) {
  return measured > 0 ? 100.0 * (predicted - measured) / measured : 0.0;
}

// The link a job's all-reduce timings fit (plan::fit_link), for its rank count, `slower` times
// slower (latency longer, bandwidth lower).
Expected<plan::Network> fitted_network(const nlohmann::json& row, double slower = 1) {
  plan::Network network;
  network.ranks = row["ranks"];
  std::vector<std::pair<double, double>> timings;
  for (const auto& t : row["all_reduce_timings"])
    timings.push_back({t[0], t[1]});
  TESSEL_ASSIGN_OR_RETURN(network.link, plan::fit_link(network, timings));
  network.link.latency_s *= slower;
  network.link.bytes_per_s /= slower;
  return network;
}

double total_compute(const plan::ComputeProfile& p) {
  return p.forward_s + p.backward_s + p.optimizer_s;
}

// Bisection for x in [lo, hi] where f(x) crosses `target`, f increasing.
double solve_increasing(const std::function<double(double)>& f, double target, double lo,
                        double hi) {
  for (int i = 0; i < 50; ++i) {
    const double mid = (lo + hi) / 2;
    (f(mid) < target ? lo : hi) = mid;
  }
  return (lo + hi) / 2;
}

// The communication thread's share u and the rate eta of a collective beside backward under
// which the model's overlapped step has the measured backward and exposed communication: u from
// backward (which grows with u, and with how long collectives run beside it, i.e. with 1 / eta),
// eta from exposed (which shrinks as eta grows), in turns until they settle.
std::pair<double, double> solve_overlap(const plan::ComputeProfile& alone,
                                        const plan::Network& network, plan::Contention c,
                                        double backward_s, double exposed_s) {
  c.comm_rate_in_compute = 1;
  for (int round = 0; round < 8; ++round) {
    c.comm_share = solve_increasing(
        [&](double u) {
          plan::Contention t = c;
          t.comm_share = u;
          return plan::predict_step(alone, network, true, t).backward_s;
        },
        backward_s, 0, 8);
    c.comm_rate_in_compute = solve_increasing(
        [&](double eta) {
          plan::Contention t = c;
          t.comm_rate_in_compute = eta;
          return -plan::predict_step(alone, network, true, t).exposed_s;
        },
        -exposed_s, 0.02, 1);
  }
  return {c.comm_share, c.comm_rate_in_compute};
}

struct Calibration {
  plan::ComputeProfile alone;
  double cores = 0;
  double comm_share = 0;
  double comm_rate = 1;
  double comm_in_step = 1;  // how much slower a step's collectives run than the link's streams
};

Expected<Calibration> calibrate(const Options& o) {
  TESSEL_ASSIGN_OR_RETURN(plan::Link link, plan::parse_link(o.calibration_link));
  const dist::LinkShape shape{.rate_bytes_per_s = link.bytes_per_s, .delay_s = link.latency_s};
  Calibration c;
  TESSEL_ASSIGN_OR_RETURN(nlohmann::json one, run_job(o, shape, 1));
  c.alone = profile_of(one["compute"]);
  std::vector<nlohmann::json> rows;
  std::vector<double> cores;
  for (int n : o.ranks) {
    TESSEL_ASSIGN_OR_RETURN(nlohmann::json row, run_job(o, shape, n));
    const double slowdown = total_compute(profile_of(row["compute"])) / total_compute(c.alone);
    // Ranks that fit their cores (slowdown ~1) say only that C >= p.
    cores.push_back(double(n) / std::max(1.0, slowdown));
    rows.push_back(row);
  }
  double cores_sum = 0;
  for (double v : cores)
    cores_sum += v;
  c.cores = cores_sum / double(cores.size());
  // Without overlap nothing runs beside a step's collectives but the optimizer, yet they take
  // longer than the same bytes in the link's streams (the other ranks' threads and the
  // optimizer's share the cores the progress threads need): the ratio, measured over predicted.
  double slower_sum = 0;
  for (const nlohmann::json& row : rows) {
    TESSEL_ASSIGN_OR_RETURN(plan::Network network, fitted_network(row));
    const plan::Contention contention{.ranks = double(row["ranks"]), .cores = c.cores};
    const double predicted = plan::predict_step(c.alone, network, false, contention).exposed_s;
    slower_sum += double(row["measured"]["no_overlap"]["exposed_s"]) / std::max(1e-9, predicted);
  }
  c.comm_in_step = slower_sum / double(rows.size());
  double share_sum = 0, rate_sum = 0;
  for (const nlohmann::json& row : rows) {
    TESSEL_ASSIGN_OR_RETURN(plan::Network network, fitted_network(row, c.comm_in_step));
    const plan::Contention contention{.ranks = double(row["ranks"]), .cores = c.cores};
    const auto [share, rate] =
        solve_overlap(c.alone, network, contention, row["measured"]["overlap"]["backward_s"],
                      row["measured"]["overlap"]["exposed_s"]);
    share_sum += share;
    rate_sum += rate;
    if (!o.json)
      fmt::print(
          "calibration {:<9} {} ranks: compute {:.1f} ms (alone {:.1f} ms); with overlap "
          "backward {:.1f} ms (without {:.1f} ms), exposed {:.1f} ms: u = {:.2f}, eta = {:.2f}\n",
          o.calibration_link, int(row["ranks"]), 1e3 * total_compute(profile_of(row["compute"])),
          1e3 * total_compute(c.alone), 1e3 * double(row["measured"]["overlap"]["backward_s"]),
          1e3 * double(row["measured"]["no_overlap"]["backward_s"]),
          1e3 * double(row["measured"]["overlap"]["exposed_s"]), share, rate);
  }
  c.comm_share = share_sum / double(rows.size());
  c.comm_rate = rate_sum / double(rows.size());
  return c;
}

int run(const Options& o) {
  if (o.worker) {
    Status s = run_worker(o);
    if (!s.ok()) {
      fmt::print(stderr, "tessel bench plan: {}\n", s.to_string());
      return 1;
    }
    return 0;
  }
  Status available = dist::NetnsCluster::available();
  if (!available.ok()) {
    fmt::print(stderr, "tessel bench plan: {}\n", available.to_string());
    return 1;
  }
  const Clock::time_point start = Clock::now();
  if (!o.json)
    fmt::print(
        "tessel bench plan: {} on simulated machines (one rank each, mpi over TCP), {} timed "
        "steps of each kind after {} warm-up; {} cores\nbefore: {}\n\n",
        o.config, o.steps, o.warmup, std::thread::hardware_concurrency(), uptime());
  Expected<Calibration> calibration = calibrate(o);
  if (!calibration.ok()) {
    fmt::print(stderr, "tessel bench plan: {}\n", calibration.status().to_string());
    return 1;
  }
  const Calibration& cal = *calibration;
  if (!o.json)
    fmt::print(
        "calibrated: one rank alone computes {:.1f} ms (forward {:.1f}, backward {:.1f}, "
        "optimizer {:.1f}); cores C = {:.2f}; communication thread share u = {:.2f}; a "
        "collective beside backward at eta = {:.2f} of its speed; a step's collectives {:.2f}x the "
        "link's streams\n\n"
        "{:<10} {:>5} {:<8} {:>8} {:>9} {:>9} {:>9} {:>7} {:>10} {:>10} {:>7}\n",
        1e3 * total_compute(cal.alone), 1e3 * cal.alone.forward_s, 1e3 * cal.alone.backward_s,
        1e3 * cal.alone.optimizer_s, cal.cores, cal.comm_share, cal.comm_rate, cal.comm_in_step,
        "link", "ranks", "overlap", "alpha_us", "MB/s", "step_ms", "pred_ms", "err", "exposed_ms",
        "pred_ms", "err");
  int within = 0, rows = 0, exposed_within = 0;
  for (const std::string& text : o.links) {
    auto link = plan::parse_link(text);
    if (!link.ok()) {
      fmt::print(stderr, "tessel bench plan: {}\n", link.status().to_string());
      return 1;
    }
    for (int n : o.ranks) {
      auto row = run_job(o, {.rate_bytes_per_s = link->bytes_per_s, .delay_s = link->latency_s}, n);
      if (!row.ok()) {
        fmt::print(stderr, "tessel bench plan: {}\n", row.status().to_string());
        return 1;
      }
      const nlohmann::json& r = *row;
      auto network = fitted_network(r, cal.comm_in_step);
      if (!network.ok()) {
        fmt::print(stderr, "tessel bench plan: {}\n", network.status().to_string());
        return 1;
      }
      const plan::Contention contention{.ranks = double(n),
                                        .cores = cal.cores,
                                        .comm_share = cal.comm_share,
                                        .comm_rate_in_compute = cal.comm_rate};
      for (const char* key : {"no_overlap", "overlap"}) {
        const bool overlap = std::string(key) == "overlap";
        const plan::StepPrediction p = plan::predict_step(cal.alone, *network, overlap, contention);
        const double step = r["measured"][key]["step_s"], exposed = r["measured"][key]["exposed_s"];
        ++rows;
        within += std::abs(error_percent(p.step_s, step)) <= 15;
        exposed_within += std::abs(error_percent(p.exposed_s, exposed)) <= 15;
        nlohmann::json out = {{"link", text},
                              {"shaping", r["shaping"]},
                              {"ranks", n},
                              {"overlap", overlap},
                              {"fitted_latency_us", network->link.latency_s * 1e6},
                              {"fitted_mb_per_s", network->link.bytes_per_s / 1e6},
                              {"all_reduce_timings", r["all_reduce_timings"]},
                              {"step_ms", step * 1e3},
                              {"predicted_step_ms", p.step_s * 1e3},
                              {"exposed_ms", exposed * 1e3},
                              {"predicted_exposed_ms", p.exposed_s * 1e3},
                              {"backward_ms", double(r["measured"][key]["backward_s"]) * 1e3},
                              {"predicted_backward_ms", p.backward_s * 1e3},
                              {"cores", cal.cores},
                              {"comm_share", cal.comm_share},
                              {"comm_rate_in_compute", cal.comm_rate},
                              {"comm_in_step", cal.comm_in_step},
                              {"load_average", load_average()}};
        if (o.json) {
          fmt::print("{}\n", out.dump());
        } else {
          fmt::print(
              "{:<10} {:>5} {:<8} {:>8.0f} {:>9.2f} {:>9.1f} {:>9.1f} {:>6.1f}% {:>10.1f} "
              "{:>10.1f} {:>6.1f}%\n",
              text, n, overlap ? "on" : "off", network->link.latency_s * 1e6,
              network->link.bytes_per_s / 1e6, step * 1e3, p.step_s * 1e3,
              error_percent(p.step_s, step), exposed * 1e3, p.exposed_s * 1e3,
              error_percent(p.exposed_s, exposed));
        }
        std::fflush(stdout);
      }
    }
  }
  if (!o.json)
    fmt::print(
        "\nwithin 15%: step time {} of {} rows, exposed communication {} of {}\nafter: {}\n"
        "took {:.0f} s\n",
        within, rows, exposed_within, rows, uptime(),
        std::chrono::duration<double>(Clock::now() - start).count());
  return 0;
}

}  // namespace

void add_bench_plan_command(CLI::App& bench) {
  auto o = std::make_shared<Options>();
  CLI::App* cmd = bench.add_subcommand(
      "plan", "the step-time model's predictions against steps measured on simulated machines");
  cmd->add_option("--config", o->config,
                  "training config (default: examples/plan_calibration.toml)");
  cmd->add_option("--link", o->links, "link settings, one per flag (25Mbit/s; 100Mbit/s,1ms)");
  cmd->add_option("--ranks", o->ranks, "rank counts (2,4)")->delimiter(',');
  cmd->add_option("--calibration-link", o->calibration_link,
                  "the link of the calibration jobs (40Mbit/s), best none of the checked ones");
  cmd->add_option("--steps", o->steps, "timed steps of each kind")->check(CLI::Range(1, 1000));
  cmd->add_option("--warmup", o->warmup, "untimed steps first")->check(CLI::Range(0, 1000));
  cmd->add_flag("--json", o->json, "one JSON object per (link, ranks, overlap)");
  cmd->add_flag("--worker", o->worker, "internal: one rank of a job")->group("");
  cmd->callback([o] {
    Options options = *o;
    if (options.config.empty()) {
      // Its data path is relative to the repository's root, where the ranks must start.
      options.config = "examples/plan_calibration.toml";
      if (!std::filesystem::exists(options.config))
        std::filesystem::current_path(TESSEL_SOURCE_DIR);
    }
    options.config = std::filesystem::absolute(options.config).string();
    exit_code = run(options);
  });
}

}  // namespace tessel::cli
