// What the benchmarks that start their own jobs of ranks or workers (`tessel bench ddp`, `bench
// hetero`, `bench plan`, `bench train`, `bench memory`) share: this program's path (the workers are
// this program with --worker), the machine's load (printed beside every figure: the machine is
// shared) and the JSON rows the workers print.
#pragma once

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/self_path.h"

namespace tessel::cli {

// The 1-minute load average: the figures mean little when it is far above the number of cores.
inline double load_average() {
  std::ifstream loadavg("/proc/loadavg");
  double one_minute = 0.0;
  loadavg >> one_minute;
  return one_minute;
}

// `uptime`'s line (the load beside a benchmark's figures), without its newline.
inline std::string uptime() {
  std::string out;
  if (FILE* p = ::popen("uptime", "r")) {
    char line[256];
    while (std::fgets(line, sizeof(line), p))
      out += line;
    ::pclose(p);
  }
  while (!out.empty() && (out.back() == '\n' || out.back() == ' '))
    out.pop_back();
  return out;
}

// Every JSON object in a rank's output, one per line (a line may carry the launcher's prefix).
inline std::vector<nlohmann::json> json_rows(const std::string& output) {
  std::vector<nlohmann::json> rows;
  std::istringstream lines(output);
  std::string line;
  while (std::getline(lines, line)) {
    const size_t brace = line.find('{');
    if (brace != std::string::npos) rows.push_back(nlohmann::json::parse(line.substr(brace)));
  }
  return rows;
}

// The last line of `output` that parses as a JSON object (a worker's result after its log lines).
inline std::optional<nlohmann::json> last_json_line(const std::string& output) {
  std::optional<nlohmann::json> found;
  std::istringstream lines(output);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.empty() || line[0] != '{') continue;
    auto row = nlohmann::json::parse(line, nullptr, false);
    if (!row.is_discarded() && row.is_object()) found = row;
  }
  return found;
}

}  // namespace tessel::cli
