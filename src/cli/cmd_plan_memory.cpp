// `tessel plan`'s memory section, and the memory check `tessel train` makes before its first step
// when [train] memory_limit is set: the static memory plan of plan/memory_plan.h for the config.
#include <fmt/format.h>

#include "cli/plan_section.h"
#include "plan/memory_plan.h"

namespace tessel::cli {
namespace {

// The limit [train] memory_limit names, in bytes (the cgroup's for "cgroup"); 0: none.
int64_t memory_limit_of(const train::TrainConfig& config) {
  return config.memory_limit < 0 ? plan::cgroup_memory_limit() : config.memory_limit;
}

std::string mib(int64_t bytes) {
  return fmt::format("{:.1f} MiB", double(bytes) / (1 << 20));
}

Expected<plan::MemoryPlan> config_plan(const train::TrainConfig& config) {
  TESSEL_ASSIGN_OR_RETURN(auto target, plan::config_memory_target(config));
  return plan::plan_memory(*target);
}

Expected<nlohmann::json> memory_section(const train::TrainConfig& config, const PlanArgs&) {
  TESSEL_ASSIGN_OR_RETURN(plan::MemoryPlan p, config_plan(config));
  nlohmann::json j = plan::memory_plan_json(p);
  if (config.memory_limit != 0) {
    const int64_t limit = memory_limit_of(config);
    j["memory_limit_bytes"] = limit;
    if (limit > 0) j["fits"] = p.predicted_rss_bytes <= limit;
  }
  return j;
}

void print_memory(const nlohmann::json& j) {
  fmt::print("{}", plan::describe(j));
  if (!j.contains("memory_limit_bytes")) return;
  const int64_t limit = j["memory_limit_bytes"];
  if (limit <= 0)
    fmt::print("  memory_limit = \"cgroup\", and this process's cgroup has no memory limit\n");
  else
    fmt::print("  {} the memory limit of {}\n", j["fits"].get<bool>() ? "fits" : "DOES NOT FIT",
               mib(limit));
}

}  // namespace

PlanSection memory_plan_section() {
  return {"memory", memory_section, print_memory};
}

int check_memory_limit(const train::TrainConfig& config) {
  if (config.memory_limit == 0) return 0;
  const int64_t limit = memory_limit_of(config);
  if (limit <= 0) {
    fmt::print(stderr,
               "memory plan: memory_limit = \"cgroup\", but this process's cgroup has no memory "
               "limit; not checked\n");
    return 0;
  }
  Expected<plan::MemoryPlan> p = config_plan(config);
  if (!p.ok()) {
    fmt::print(stderr, "error: {}: [train] memory_limit: the memory plan failed: {}\n",
               config.source, p.status().message());
    return 1;
  }
  if (p->predicted_rss_bytes <= limit) {
    fmt::print("memory plan: predicted peak {} of the {} limit (tensors {})\n",
               mib(p->predicted_rss_bytes), mib(limit), mib(p->peak_bytes));
    return 0;
  }
  fmt::print(stderr,
             "error: {}: the run will not fit: the memory plan predicts a peak of {} resident, "
             "over [train] memory_limit {}; nothing was trained\n{}",
             config.source, mib(p->predicted_rss_bytes), mib(limit), plan::describe(*p));
  return 1;
}

}  // namespace tessel::cli
