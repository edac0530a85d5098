// `tessel plan CONFIG.toml [--ranks N] [--link 25GB/s,5us] [--json] [--only SECTION]`: what a
// training config would cost. The command is a list of sections (cli/plan_section.h), each
// printing one projection (text) or one JSON object under its name (--json): first the memory
// plan (cmd_plan_memory.cpp, plan/memory_plan.h: the peak and its breakdown at the configured
// batch, from small recorded batches), then the step-time section (plan/step_model.h) on N ranks:
// it measures the config's compute here (forward, backward with the buckets' readiness,
// optimizer), optionally scaled to a faster device (--speedup), and predicts the step time and
// exposed communication for the network given, with and without overlap, beside the seed's
// claim (35% -> 12% communication overhead on a 128-card super-node). The step-time section runs
// full-batch steps; `--only memory` plans a config that may not fit without running one.
#include <cstdio>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/plan_section.h"
#include "plan/profile.h"
#include "plan/step_model.h"
#include "train/train_config.h"

namespace tessel::cli {

namespace {

nlohmann::json prediction_json(const plan::StepPrediction& p) {
  return {{"step_ms", p.step_s * 1e3},
          {"compute_ms", p.compute_s * 1e3},
          {"comm_ms", p.comm_s * 1e3},
          {"exposed_comm_ms", p.exposed_s * 1e3},
          {"overhead", p.overhead()}};
}

Expected<nlohmann::json> step_time_section(const train::TrainConfig& config, const PlanArgs& a) {
  TESSEL_ASSIGN_OR_RETURN(plan::Network network, [&]() -> Expected<plan::Network> {
    plan::Network n;
    n.ranks = a.ranks;
    TESSEL_ASSIGN_OR_RETURN(n.link, plan::parse_link(a.link));
    TESSEL_ASSIGN_OR_RETURN(n.algorithm, plan::parse_algorithm(a.algorithm));
    n.ranks_per_machine = a.ranks_per_machine;
    TESSEL_ASSIGN_OR_RETURN(n.local, plan::parse_link(a.local_link));
    return n;
  }());
  TESSEL_ASSIGN_OR_RETURN(plan::ComputeProfile measured, plan::profile_config(config, 1, a.steps));
  const plan::ComputeProfile profile = plan::scaled(measured, a.speedup);
  nlohmann::json buckets = nlohmann::json::array();
  for (const plan::BucketProfile& b : profile.buckets)
    buckets.push_back({{"bytes", b.bytes},
                       {"ready_ms", b.ready_s * 1e3},
                       {"all_reduce_ms", plan::all_reduce_seconds(b.bytes, network) * 1e3},
                       {"algorithm", plan::algorithm_name(plan::algorithm_for(b.bytes, network))}});
  return nlohmann::json{
      {"ranks", network.ranks},
      {"link", plan::describe(network.link)},
      {"algorithm", a.algorithm},
      {"ranks_per_machine", network.ranks_per_machine},
      {"local_link", plan::describe(network.local)},
      {"speedup", a.speedup},
      {"measured_here",
       {{"forward_ms", measured.forward_s * 1e3},
        {"backward_ms", measured.backward_s * 1e3},
        {"optimizer_ms", measured.optimizer_s * 1e3}}},
      {"gradient_mb", profile.gradient_bytes() / 1e6},
      {"buckets", buckets},
      {"overlap", prediction_json(plan::predict_step(profile, network, true))},
      {"no_overlap", prediction_json(plan::predict_step(profile, network, false))},
      {"seed_claim", {{"no_overlap", 0.35}, {"overlap", 0.12}, {"ranks", 128}}}};
}

void print_step_time(const nlohmann::json& j) {
  const std::string algorithm = j["algorithm"];
  fmt::print("step time on {} ranks, links {}, all-reduce {}{}\n", int(j["ranks"]),
             std::string(j["link"]), algorithm,
             algorithm == "hierarchical"
                 ? fmt::format(" ({} ranks per machine, {} inside)", int(j["ranks_per_machine"]),
                               std::string(j["local_link"]))
                 : std::string());
  const auto& m = j["measured_here"];
  fmt::print(
      "  compute measured here: forward {:.1f} ms, backward {:.1f} ms, optimizer {:.1f} ms"
      "{}\n",
      double(m["forward_ms"]), double(m["backward_ms"]), double(m["optimizer_ms"]),
      double(j["speedup"]) != 1.0 ? fmt::format(" (projected {}x faster)", double(j["speedup"]))
                                  : std::string());
  fmt::print("  gradients {:.2f} MB in {} buckets\n", double(j["gradient_mb"]),
             j["buckets"].size());
  fmt::print("  {:<12} {:>10} {:>11} {:>9} {:>11} {:>9}\n", "", "step_ms", "compute_ms", "comm_ms",
             "exposed_ms", "overhead");
  for (const char* key : {"no_overlap", "overlap"}) {
    const auto& p = j[key];
    fmt::print("  {:<12} {:>10.2f} {:>11.2f} {:>9.2f} {:>11.2f} {:>8.1f}%\n", key,
               double(p["step_ms"]), double(p["compute_ms"]), double(p["comm_ms"]),
               double(p["exposed_comm_ms"]), 100 * double(p["overhead"]));
  }
  fmt::print("  seed's claim (128-card super-node): 35.0% without overlap -> 12.0% with it\n");
}

}  // namespace

// Every section of `tessel plan`, in the order printed. Add a section here (its code in a file
// of its own, cmd_plan_<name>.cpp) to make it part of the plan.
std::vector<PlanSection> plan_sections() {
  return {memory_plan_section(), {"step_time", step_time_section, print_step_time}};
}

void add_plan_command(CLI::App& app) {
  auto args = std::make_shared<PlanArgs>();
  CLI::App* cmd = app.add_subcommand(
      "plan", "project a training config's peak memory, and its step time on N ranks");
  cmd->add_option("config", args->config_path, "the training config (TOML)")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("--ranks", args->ranks, "data-parallel ranks")->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--link", args->link,
                  "bandwidth,latency of each link between machines (25GB/s,5us; 200Gbit/s,2us)");
  cmd->add_option("--algorithm", args->algorithm,
                  "all-reduce: auto (as the mpi backend's libnbc picks), ring, doubling, "
                  "hierarchical");
  cmd->add_option("--ranks-per-machine", args->ranks_per_machine, "hierarchical: ranks a machine")
      ->check(CLI::Range(1, 1 << 16));
  cmd->add_option("--local-link", args->local_link, "hierarchical: the link inside a machine");
  cmd->add_option("--speedup", args->speedup,
                  "project compute this many times faster than measured here (a GPU: 50)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--steps", args->steps, "timed steps of the compute measurement")
      ->check(CLI::Range(1, 1000));
  cmd->add_flag("--json", args->json, "one JSON object, a key per section");
  cmd->add_option("--only", args->only, "one section: memory or step_time")
      ->check(CLI::IsMember({"memory", "step_time"}));
  cmd->callback([args] {
    auto config = train::load_train_config(args->config_path);
    if (!config.ok()) {
      fmt::print(stderr, "tessel plan: {}\n", config.status().to_string());
      exit_code = 1;
      return;
    }
    nlohmann::json all;
    for (const PlanSection& section : plan_sections()) {
      if (!args->only.empty() && section.name != args->only) continue;
      auto result = section.run(*config, *args);
      if (!result.ok()) {
        fmt::print(stderr, "tessel plan: {}: {}\n", section.name, result.status().to_string());
        exit_code = 1;
        return;
      }
      if (args->json)
        all[section.name] = *result;
      else
        section.print(*result);
    }
    if (args->json) fmt::print("{}\n", all.dump());
  });
}

}  // namespace tessel::cli
