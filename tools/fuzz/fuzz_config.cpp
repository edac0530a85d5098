// libFuzzer target: TOML text through Config::parse and every typed getter on every key, as the
// trainer's config readers use them. Any input must end in a value or an error; never a crash.
#include <cstdint>
#include <string>
#include <vector>

#include "support/config.h"

using namespace tessel;

namespace {
void walk(const Config& table, int depth) {
  if (depth > 8) return;
  for (const std::string& key : table.keys()) {
    (void)table.get<bool>(key);
    (void)table.get<int64_t>(key);
    (void)table.get<double>(key);
    (void)table.get<std::string>(key);
    (void)table.get<std::vector<int64_t>>(key);
    (void)table.get<std::vector<double>>(key);
    (void)table.get<std::vector<std::string>>(key);
    (void)table.get_or<int64_t>(key + ".x", 1);
    Expected<Config> sub = table.table(key);
    if (sub.ok()) walk(*sub, depth + 1);
  }
  (void)table.check_keys({"name", "lr"});
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  Expected<Config> cfg = Config::parse(text, "f.toml");
  if (cfg.ok()) walk(*cfg, 0);
  return 0;
}
