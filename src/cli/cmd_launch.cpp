// `tessel launch -n N [--backend shm|mpi] -- CMD ARGS...`: runs N ranks of CMD on this machine
// (dist/launcher.h), prefixing their output with the rank; exits non-zero if any rank fails.
#include <cstdio>

#include "cli/commands.h"
#include "dist/launcher.h"

namespace tessel::cli {

void add_launch_command(CLI::App& app) {
  struct Args {
    int nranks = 1;
    std::string backend = "shm";
    double grace_s = 3.0;
    bool keep_going = false;
    std::vector<std::string> command;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("launch", "run N ranks of a command on this machine");
  cmd->add_option("-n,--nranks", args->nranks, "number of ranks")
      ->required()
      ->check(CLI::Range(1, 4096));
  cmd->add_option("--backend", args->backend, "shm (default) or mpi (runs mpirun)")
      ->check(CLI::IsMember({"shm", "mpi"}));
  cmd->add_option("--grace", args->grace_s,
                  "seconds between SIGTERM and SIGKILL when stopping the ranks");
  cmd->add_flag("--keep-going", args->keep_going, "let the other ranks run on when one fails");
  cmd->add_option("command", args->command, "the program and its arguments (after --)")->required();
  cmd->callback([args] {
    dist::LaunchOptions options;
    options.nranks = args->nranks;
    options.backend = *dist::parse_backend(args->backend);
    options.command = args->command;
    options.kill_grace_s = args->grace_s;
    options.kill_on_failure = !args->keep_going;
    options.forward_signals = true;
    auto result = dist::launch(options);
    if (!result.ok()) {
      std::fprintf(stderr, "tessel launch: %s\n", result.status().to_string().c_str());
      exit_code = 1;
      return;
    }
    if (!result->first_failure.empty())
      std::fprintf(stderr, "tessel launch: %s%s\n", result->first_failure.c_str(),
                   options.kill_on_failure && args->nranks > 1 ? "; stopped the other ranks" : "");
    if (result->leaked_segments_removed > 0)
      std::fprintf(stderr, "tessel launch: removed %d shared-memory segments left in /dev/shm\n",
                   result->leaked_segments_removed);
    exit_code = result->exit_code;
  });
}

}  // namespace tessel::cli
