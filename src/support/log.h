// Levelled logging to stderr. The level comes from TESSEL_LOG (error, warn, info, debug, trace;
// default warn) or from set_log_level(). Messages use fmt syntax:
//
//   log_info("compiled {} in {:.1f} ms", name, ms);
#pragma once

#include <fmt/format.h>

#include <string_view>
#include <utility>

#include "support/status.h"

namespace tessel {

enum class LogLevel { kError = 0, kWarn, kInfo, kDebug, kTrace };

LogLevel log_level();
void set_log_level(LogLevel level);
Expected<LogLevel> parse_log_level(std::string_view name);
bool log_enabled(LogLevel level);
void log_write(LogLevel level, std::string_view message);

#define TESSEL_DEFINE_LOG_FN(fn, level)                               \
  template <typename... Args>                                         \
  void fn(fmt::format_string<Args...> f, Args&&... args) {            \
    if (log_enabled(level))                                           \
      log_write(level, fmt::format(f, std::forward<Args>(args)...));  \
  }
TESSEL_DEFINE_LOG_FN(log_error, LogLevel::kError)
TESSEL_DEFINE_LOG_FN(log_warn, LogLevel::kWarn)
TESSEL_DEFINE_LOG_FN(log_info, LogLevel::kInfo)
TESSEL_DEFINE_LOG_FN(log_debug, LogLevel::kDebug)
TESSEL_DEFINE_LOG_FN(log_trace, LogLevel::kTrace)
#undef TESSEL_DEFINE_LOG_FN

}  // namespace tessel
