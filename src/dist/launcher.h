// Starts the ranks of a job on this machine (`tessel launch`, and the multi-process tests).
//
// shm: the launcher hosts the rendezvous store on loopback and starts N copies of the command
// with TESSEL_RANK, TESSEL_WORLD_SIZE, TESSEL_LOCAL_RANK, TESSEL_MASTER_ADDR/PORT,
// TESSEL_USE_AGENT_STORE=1, TESSEL_BACKEND and TESSEL_JOB_ID set. mpi: it runs mpirun with
// TESSEL_BACKEND=mpi. Each line a rank prints is prefixed with "[rank N] ". When a rank fails
// (non-zero exit or a signal) the others get SIGTERM, then SIGKILL after a grace period, unless
// `kill_on_failure` is off. Shared memory a crashed job left in /dev/shm is removed at the end.
//
// Across machines (mpi only): `hosts` go to mpirun as --host, ranks filling one host before the
// next (consecutive ranks share a machine, which hierarchical collectives rely on); mpirun starts
// its daemons there with ssh, or with `rsh_agent` (simulated machines: `tessel netns-exec`,
// dist/netns_cluster.h). When a rank dies, mpirun's report of it ("process rank 1 ... on node
// X exited on signal 9") becomes the first failure.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "dist/comm_init.h"
#include "support/status.h"

namespace tessel::dist {

struct LaunchOptions {
  int nranks = 1;
  Backend backend = Backend::kShm;
  std::vector<std::string> command;                      // program and arguments
  std::vector<std::pair<std::string, std::string>> env;  // added to every rank's environment
  bool kill_on_failure = true;
  double kill_grace_s = 3.0;
  // Keep each rank's output in RankOutcome::output instead of writing it to this process's
  // stdout and stderr (tests).
  bool capture = false;
  // Forward SIGINT and SIGTERM received by this process to the ranks (the CLI).
  bool forward_signals = false;
  // Kill every rank (SIGKILL) once this many seconds have passed; 0: no limit.
  double deadline_s = 0;
  // mpi only: the machines to run on (empty: this one), the program (and its first arguments)
  // that mpirun starts its daemons with instead of ssh, and more mpirun arguments ("--mca" ...).
  std::vector<std::string> hosts;
  std::vector<std::string> rsh_agent;
  std::vector<std::string> mpirun_args;
};

struct RankOutcome {
  int rank = 0;
  int pid = 0;
  int exit_code = 0;   // valid when signal == 0
  int signal = 0;      // the signal that ended it, or 0
  double seconds = 0;  // from start to exit
  std::string output;  // stdout then stderr, prefixed, when capturing
  bool failed() const { return signal != 0 || exit_code != 0; }
  std::string describe() const;  // "rank 1 (pid 42) was killed by signal 9 (Killed)"
};

struct LaunchResult {
  std::vector<RankOutcome> ranks;   // one per rank (one for all of them under mpirun)
  int exit_code = 0;                // 0, or the first failure's code (128 + signal if killed)
  std::string first_failure;        // what failed first, or ""
  bool deadline_passed = false;     // the ranks were killed because deadline_s passed
  int leaked_segments_removed = 0;  // /dev/shm entries of this job removed at the end
};

Expected<LaunchResult> launch(const LaunchOptions& options);

}  // namespace tessel::dist
