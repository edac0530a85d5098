// `tessel bench`: the parent of the benchmarks. Each benchmark is a sub-subcommand in its own
// cmd_bench_*.cpp (gemm, comm, ...) that main.cpp adds to the app this returns.
#include "cli/commands.h"

namespace tessel::cli {

CLI::App& add_bench_command(CLI::App& app) {
  CLI::App* bench = app.add_subcommand(
      "bench", "Benchmarks that print tessel's speed next to named peers measured in the same run");
  bench->require_subcommand(1);
  return *bench;
}

}  // namespace tessel::cli
