// `tessel info [--json] [--measure]`: what hardware is here and what tessel will use on it.
// The figures it measures (bandwidth, peak rates) are cached per CPU model; --measure redoes them.
#include <cstdio>

#include "cli/commands.h"
#include "hw/hardware_report.h"

namespace tessel::cli {

void add_info_command(CLI::App& app) {
  struct Options {
    bool json = false;
    bool measure = false;
  };
  auto options = std::make_shared<Options>();
  CLI::App* info = app.add_subcommand("info",
                                      "Show the CPU, its measured figures, and the OpenCL "
                                      "and CUDA devices tessel can use");
  info->add_flag("--json", options->json, "Print one JSON object instead of the text report");
  info->add_flag("--measure", options->measure,
                 "Measure bandwidth and peak rates again instead of using the cached figures");
  info->callback([options] {
    HardwareReport report = collect_hardware_report({.remeasure = options->measure});
    if (options->json) {
      std::printf("%s\n", hardware_report_json(report).dump(2).c_str());
    } else {
      std::fputs(hardware_report_text(report).c_str(), stdout);
    }
    exit_code = 0;
  });
}

}  // namespace tessel::cli
