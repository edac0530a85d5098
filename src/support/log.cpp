// Log level state (read once from TESSEL_LOG) and the single writer, which holds a lock so that
// lines from different threads never interleave.
#include "support/log.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>

namespace tessel {
namespace {

const char* const kNames[] = {"error", "warn", "info", "debug", "trace"};

LogLevel initial_level() {
  const char* env = std::getenv("TESSEL_LOG");
  if (env == nullptr) return LogLevel::kWarn;
  Expected<LogLevel> level = parse_log_level(env);
  if (!level) {
    std::fprintf(stderr, "tessel: ignoring TESSEL_LOG: %s\n", level.status().message().c_str());
    return LogLevel::kWarn;
  }
  return *level;
}

std::atomic<int>& level_storage() {
  static std::atomic<int> level{static_cast<int>(initial_level())};
  return level;
}

}  // namespace

LogLevel log_level() { return static_cast<LogLevel>(level_storage().load()); }
void set_log_level(LogLevel level) { level_storage().store(static_cast<int>(level)); }
bool log_enabled(LogLevel level) { return static_cast<int>(level) <= level_storage().load(); }

Expected<LogLevel> parse_log_level(std::string_view name) {
  for (int i = 0; i < 5; ++i)
    if (name == kNames[i]) return static_cast<LogLevel>(i);
  return invalid_argument("unknown log level '{}': expected error, warn, info, debug or trace",
                          name);
}

void log_write(LogLevel level, std::string_view message) {
  static std::mutex mutex;
  std::lock_guard<std::mutex> lock(mutex);
  std::fprintf(stderr, "[tessel %s] %.*s\n", kNames[static_cast<int>(level)],
               static_cast<int>(message.size()), message.data());
}

}  // namespace tessel
