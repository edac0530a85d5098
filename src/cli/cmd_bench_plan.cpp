// `tessel bench plan`: calibrates the step-time model (plan/step_model.h) against measured
// data-parallel steps, on machines simulated in network namespaces (dist/netns_cluster.h), one
// rank per machine, over the mpi backend (Open MPI, TCP only), for each link setting and rank
// count asked for.
//
// Each job's ranks (`tessel bench plan --worker`, started with mpirun through `tessel
// netns-exec`) first measure the link: ping-pong between ranks 0 and 1 of 8 bytes (latency,
// alpha) and of 512 KiB (bandwidth), the fastest of 3 round trips each, halved. Then they train
// CONFIG's model (examples/plan_calibration.toml by default) with DDP, steps taking turns with
// overlap on and off. The model gets rank 0's compute from the steps without overlap (forward,
// backward, optimizer, and each bucket's readiness in backward), the measured link, and the
// all-reduce Open MPI picks; it predicts the step time and the exposed communication of both
// kinds of step, printed beside the measured medians (exposed: the smallest over the ranks, as
// `tessel bench ddp` reports it, since a rank that arrives late also waits for the others).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

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
  int steps = 4;
  int warmup = 1;
  bool json = false;
  bool worker = false;
};

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

std::string self_path() {
  char self[4096] = {};
  ssize_t n = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
  return n > 0 ? std::string(self, static_cast<size_t>(n)) : "tessel";
}

// One-way time of `bytes` from rank 0 to rank 1: the fastest of 3 round trips, halved.
Expected<double> one_way_seconds(dist::ProcessGroup& group, size_t bytes) {
  std::vector<unsigned char> buffer(std::max<size_t>(bytes, 1));
  double best = 1e30;
  for (int i = 0; i < 3; ++i) {
    TESSEL_TRY(group.barrier());
    const Clock::time_point start = Clock::now();
    if (group.rank() <= 1) {
      const int peer = 1 - group.rank();
      for (int leg = 0; leg < 2; ++leg) {
        const bool sending = (leg == 0) == (group.rank() == 0);
        TESSEL_ASSIGN_OR_RETURN(
            dist::Work w, sending ? group.send(buffer.data(), bytes, dist::DataType::kUint8, peer)
                                  : group.recv(buffer.data(), bytes, dist::DataType::kUint8, peer));
        TESSEL_TRY(w.wait());
      }
    }
    best = std::min(best, std::chrono::duration<double>(Clock::now() - start).count());
  }
  return best / 2;
}

Status run_worker(const Options& o) {
  TESSEL_ASSIGN_OR_RETURN(train::TrainConfig config, train::load_train_config(o.config));
  TESSEL_ASSIGN_OR_RETURN(auto group, dist::ProcessGroup::from_env());
  constexpr size_t kBig = 512 << 10;
  TESSEL_ASSIGN_OR_RETURN(double small, one_way_seconds(*group, 8));
  TESSEL_ASSIGN_OR_RETURN(double big, one_way_seconds(*group, kBig));
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
    if (s / 2 < o.warmup) continue;
    (overlap ? on : off).push_back(t);
    (overlap ? exposed_on : exposed_off).push_back(wait);
  }
  double comm_alone = 1e30;
  for (int i = 0; i < 3; ++i) {
    TESSEL_ASSIGN_OR_RETURN(double ms, run->data_parallel().time_collectives_alone());
    comm_alone = std::min(comm_alone, ms);
  }
  if (group->rank() != 0) return ok_status();
  const plan::ComputeProfile profile = plan::median_profile(off, run->bucket_bytes());
  nlohmann::json buckets = nlohmann::json::array();
  for (const plan::BucketProfile& b : profile.buckets)
    buckets.push_back({{"bytes", b.bytes}, {"ready_s", b.ready_s}});
  auto steps_of = [](const std::vector<plan::StepTimes>& v) {
    std::vector<double> out;
    for (const plan::StepTimes& t : v)
      out.push_back(t.step_s);
    return median(out);
  };
  nlohmann::json row = {
      {"ranks", group->size()},
      {"latency_s", small},
      {"bytes_per_s", double(kBig) / std::max(1e-9, big - small)},
      {"forward_s", profile.forward_s},
      {"backward_s", profile.backward_s},
      {"optimizer_s", profile.optimizer_s},
      {"buckets", buckets},
      {"comm_alone_s", comm_alone / 1e3},
      {"measured",
       {{"overlap", {{"step_s", steps_of(on)}, {"exposed_s", median(exposed_on)}}},
        {"no_overlap", {{"step_s", steps_of(off)}, {"exposed_s", median(exposed_off)}}}}}};
  std::printf("PLAN %s\n", row.dump().c_str());
  std::fflush(stdout);
  return ok_status();
}

double load_average() {
  std::ifstream loadavg("/proc/loadavg");
  double one_minute = 0;
  loadavg >> one_minute;
  return one_minute;
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
      return row;
    }
  }
  return internal_error("{} ranks: rank 0 printed no result\n{}", nranks, output);
}

double error_percent(double predicted, double measured) {
  return measured > 0 ? 100.0 * (predicted - measured) / measured : 0.0;
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
  if (!o.json)
    fmt::print(
        "tessel bench plan: {} on simulated machines (one rank each, mpi over TCP), {} "
        "timed steps of each kind after {} warm-up; {} cores, load average {:.1f}\n\n"
        "{:<10} {:>5} {:<8} {:>8} {:>9} {:>9} {:>9} {:>7} {:>10} {:>10} {:>7} {:>9} "
        "{:>9}\n",
        o.config, o.steps, o.warmup, std::thread::hardware_concurrency(), load_average(), "link",
        "ranks", "overlap", "alpha_us", "MB/s", "step_ms", "pred_ms", "err", "exposed_ms",
        "pred_ms", "err", "comm_ms", "pred_ms");
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
      plan::ComputeProfile profile;
      profile.forward_s = r["forward_s"];
      profile.backward_s = r["backward_s"];
      profile.optimizer_s = r["optimizer_s"];
      for (const auto& b : r["buckets"])
        profile.buckets.push_back({b["bytes"], b["ready_s"]});
      plan::Network network{.ranks = n,
                            .link = {.bytes_per_s = r["bytes_per_s"], .latency_s = r["latency_s"]}};
      double predicted_comm = 0;
      for (const plan::BucketProfile& b : profile.buckets)
        predicted_comm += plan::all_reduce_seconds(b.bytes, network);
      for (const char* key : {"no_overlap", "overlap"}) {
        const bool overlap = std::string(key) == "overlap";
        const plan::StepPrediction p = plan::predict_step(profile, network, overlap);
        const double step = r["measured"][key]["step_s"], exposed = r["measured"][key]["exposed_s"];
        nlohmann::json out = {{"link", text},
                              {"shaping", r["shaping"]},
                              {"ranks", n},
                              {"overlap", overlap},
                              {"latency_us", double(r["latency_s"]) * 1e6},
                              {"measured_mb_per_s", double(r["bytes_per_s"]) / 1e6},
                              {"step_ms", step * 1e3},
                              {"predicted_step_ms", p.step_s * 1e3},
                              {"exposed_ms", exposed * 1e3},
                              {"predicted_exposed_ms", p.exposed_s * 1e3},
                              {"comm_alone_ms", double(r["comm_alone_s"]) * 1e3},
                              {"predicted_comm_ms", predicted_comm * 1e3},
                              {"compute_ms", p.compute_s * 1e3},
                              {"load_average", load_average()}};
        if (o.json) {
          fmt::print("{}\n", out.dump());
        } else {
          fmt::print(
              "{:<10} {:>5} {:<8} {:>8.0f} {:>9.2f} {:>9.1f} {:>9.1f} {:>6.1f}% {:>10.1f} "
              "{:>10.1f} {:>6.1f}% {:>9.1f} {:>9.1f}\n",
              text, n, overlap ? "on" : "off", double(r["latency_s"]) * 1e6,
              double(r["bytes_per_s"]) / 1e6, step * 1e3, p.step_s * 1e3,
              error_percent(p.step_s, step), exposed * 1e3, p.exposed_s * 1e3,
              error_percent(p.exposed_s, exposed), double(r["comm_alone_s"]) * 1e3,
              predicted_comm * 1e3);
        }
        std::fflush(stdout);
      }
    }
  }
  if (!o.json) fmt::print("\nload average now {:.1f}\n", load_average());
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
