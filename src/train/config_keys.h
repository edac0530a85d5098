// Checked reads of config keys shared by the trainer's parsers (train_config.cpp,
// data_source.cpp): a value outside what is allowed is an error naming the file, the full key
// and what is allowed.
#pragma once

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "support/config.h"

namespace tessel::train {

// "data.path" for key "path" of the [data] table.
inline std::string full_key(const Config& table, const std::string& key) {
  return table.path().empty() ? key : table.path() + "." + key;
}

inline std::string join_names(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names)
    out += (out.empty() ? "" : ", ") + n;
  return out;
}

// A string key whose value must be one of `allowed`; required unless there is a fallback.
inline Expected<std::string> get_choice(const Config& table, const std::string& key,
                                        const std::vector<std::string>& allowed,
                                        std::optional<std::string> fallback = std::nullopt) {
  std::string value;
  if (fallback) {
    TESSEL_ASSIGN_OR_RETURN(value, table.get_or<std::string>(key, *fallback));
  } else {
    TESSEL_ASSIGN_OR_RETURN(value, table.get<std::string>(key));
  }
  if (std::find(allowed.begin(), allowed.end(), value) == allowed.end())
    return invalid_argument("{}: key '{}': '{}' is not allowed; allowed: {}", table.source(),
                            full_key(table, key), value, join_names(allowed));
  return value;
}

// A number key with a lower bound (the fallback, when the key is missing, is not checked). A
// float must be finite: nan passes no comparison and inf trains to nan, both silently.
template <typename T>
Expected<T> get_at_least(const Config& table, const std::string& key, T fallback, T minimum) {
  if (!table.has(key)) return fallback;
  TESSEL_ASSIGN_OR_RETURN(T value, table.get<T>(key));
  if constexpr (std::is_floating_point_v<T>) {
    if (!std::isfinite(value))
      return invalid_argument("{}: key '{}': must be a finite number, got {}", table.source(),
                              full_key(table, key), value);
  }
  if (value < minimum)
    return invalid_argument("{}: key '{}': must be >= {}, got {}", table.source(),
                            full_key(table, key), minimum, value);
  return value;
}

}  // namespace tessel::train
