// Comparing the settings of a job's ranks at start-up (see shared_settings.h).
#include "train/shared_settings.h"

#include <cstring>

#include "support/hash.h"

namespace tessel::train {
namespace {

// Each value travels in a fixed slot; a longer one keeps its start and a hash of the whole.
constexpr size_t kSlot = 96;

std::string fit_slot(const std::string& value) {
  if (value.size() < kSlot) return value;
  const std::string tail = " ... #" + hash_hex(hash_text(value));
  return value.substr(0, kSlot - 1 - tail.size()) + tail;
}

}  // namespace

Settings shared_settings(const TrainConfig& c, const nn::FlatParameters& params,
                         int64_t total_steps) {
  int64_t count = 0, tensors = 0;
  Hasher shapes;
  for (const auto& [name, tensor] : params.named_tensors()) {
    count += tensor.numel();
    ++tensors;
    shapes.add_field(name).add_field(shape_string(tensor.shape()));
  }
  const std::string model_name = c.model ? c.model->get<std::string>("name").value_or("?") : "?";
  return {
      {"model", fmt::format("{}: {} parameters in {} tensors (shapes #{})", model_name, count,
                            tensors, shapes.hex_digest())},
      {"data.name", c.data.name},
      {"data.batch_size", std::to_string(c.data.batch_size)},
      {"train.grad_accum_steps", std::to_string(c.grad_accum_steps)},
      {"train.steps", std::to_string(total_steps)},
      {"train.precision", c.precision},
      {"train.clip_grad_norm", fmt::format("{}", c.clip_grad_norm)},
      {"optimizer.name", c.optimizer.name},
      {"optimizer.lr", fmt::format("{}", c.optimizer.lr())},
      {"distributed.zero_stage", std::to_string(c.distributed.zero_stage)},
      {"distributed.split", c.distributed.uneven ? "uneven" : "even"},
      {"seed", std::to_string(c.seed)},
  };
}

Status check_shared_settings(dist::ProcessGroup& group, const Settings& settings,
                             const std::string& source) {
  const size_t n = settings.size();
  const int ranks = group.size();
  std::vector<char> mine(n * kSlot, '\0'), all(n * kSlot * size_t(ranks), '\0');
  for (size_t i = 0; i < n; ++i) {
    const std::string v = fit_slot(settings[i].second);
    std::memcpy(&mine[i * kSlot], v.data(), v.size());
  }
  TESSEL_ASSIGN_OR_RETURN(dist::Work work, group.all_gather(mine.data(), all.data(), mine.size(),
                                                            dist::DataType::kUint8));
  Status gathered = work.wait();
  if (!gathered.ok()) return gathered.with_context("{}: comparing the ranks' settings", source);
  auto value = [&](int rank, size_t i) {
    const char* slot = &all[(size_t(rank) * n + i) * kSlot];
    return std::string(slot, strnlen(slot, kSlot));
  };
  std::string differences;
  for (size_t i = 0; i < n; ++i) {
    bool same = true;
    for (int r = 1; r < ranks; ++r)
      same &= value(r, i) == value(0, i);
    if (same) continue;
    std::string each;
    for (int r = 0; r < ranks; ++r)
      each += fmt::format("{}rank {}: {}", each.empty() ? "" : "; ", r, value(r, i));
    differences +=
        fmt::format("{}'{}': {}", differences.empty() ? "" : ", and in ", settings[i].first, each);
  }
  if (differences.empty()) return ok_status();
  return invalid_argument("{}: the ranks of this job differ in {}", source, differences);
}

}  // namespace tessel::train
