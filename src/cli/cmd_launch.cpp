// `tessel launch -n N [--backend shm|mpi] [--hosts a,b [--netns SUBNET]] -- CMD ARGS...`: runs N
// ranks of CMD on this machine, or through mpirun on the hosts given (dist/launcher.h), prefixing
// their output with the rank; exits non-zero if any rank fails.
//
// `--netns SUBNET` runs on machines simulated in network namespaces (dist/netns_cluster.h): the
// hosts are namespace names, mpirun starts its daemons in them with `tessel netns-exec` instead
// of ssh, and MPI uses TCP alone, on SUBNET. `tessel netns-exec HOST CMD` is that agent.
#include <unistd.h>

#include <cstdio>

#include "cli/commands.h"
#include "cli/self_path.h"
#include "dist/launcher.h"
#include "dist/netns_cluster.h"

namespace tessel::cli {

namespace {

void add_netns_exec_command(CLI::App& app) {
  struct Args {
    std::string host;
    std::vector<std::string> command;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand(
      "netns-exec", "run a shell command on a simulated machine (mpirun's rsh agent)");
  cmd->group("");  // for mpirun, not for people
  cmd->prefix_command();
  cmd->add_option("host", args->host, "the namespace")->required();
  cmd->callback([cmd, args] {
    // mpirun calls its agent as `AGENT [ssh options] HOST COMMAND...`: skip the options.
    std::vector<std::string> rest = cmd->remaining();
    std::string host = args->host;
    while (!host.empty() && host[0] == '-' && !rest.empty()) {
      host = rest.front();
      rest.erase(rest.begin());
    }
    Status s = dist::exec_in_namespace(host, rest);
    std::fprintf(stderr, "tessel netns-exec: %s\n", s.to_string().c_str());
    exit_code = 1;
  });
}

}  // namespace

void add_launch_command(CLI::App& app) {
  struct Args {
    int nranks = 1;
    std::string backend = "shm";
    double grace_s = 3.0;
    bool keep_going = false;
    std::vector<std::string> hosts;
    std::string netns_subnet;
    std::vector<std::string> command;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("launch", "run N ranks of a command, here or on hosts");
  cmd->add_option("-n,--nranks", args->nranks, "number of ranks")
      ->required()
      ->check(CLI::Range(1, 4096));
  cmd->add_option("--backend", args->backend,
                  "shm (default; mpi with --hosts) or mpi (runs mpirun)")
      ->check(CLI::IsMember({"shm", "mpi"}));
  cmd->add_option("--hosts", args->hosts, "machines to run on, through mpirun (a,b,...)")
      ->delimiter(',');
  cmd->add_option("--netns", args->netns_subnet,
                  "the hosts are network namespaces on this machine on this subnet (10.1.2.0/24)")
      ->needs("--hosts");
  cmd->add_option("--grace", args->grace_s,
                  "seconds between SIGTERM and SIGKILL when stopping the ranks");
  cmd->add_flag("--keep-going", args->keep_going, "let the other ranks run on when one fails");
  cmd->add_option("command", args->command, "the program and its arguments (after --)")->required();
  cmd->callback([args] {
    dist::LaunchOptions options;
    options.nranks = args->nranks;
    options.backend =
        args->hosts.empty() ? *dist::parse_backend(args->backend) : dist::Backend::kMpi;
    options.hosts = args->hosts;
    if (!args->netns_subnet.empty()) {
      options.rsh_agent = {self_path(), "netns-exec"};
      options.mpirun_args = dist::netns_mpirun_args(args->netns_subnet);
    }
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
  add_netns_exec_command(app);
}

}  // namespace tessel::cli
