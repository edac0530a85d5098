// Running another program and capturing what it prints (stdout and stderr together): the C++
// compiler for the CPU JIT, ptxas for CUDA kernel resources, a child `tessel` in benches.
//
//   ProgramRun r = run_program({"ptxas", "--version"});
//   if (r.exit_code != 0) return unavailable("ptxas: {}", r.output);
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace tessel {

struct ProgramRun {
  int exit_code = -1;  // -1: it did not start, or a signal ended it
  int signal = 0;      // the signal that ended it (SIGSEGV, SIGKILL ...); 0 when it exited
  std::string output;  // stdout and stderr, interleaved as written
};

// Runs argv[0] (looked up in PATH when it has no '/') with `extra_env` added to the environment,
// and waits for it.
ProgramRun run_program(const std::vector<std::string>& argv,
                       const std::vector<std::pair<std::string, std::string>>& extra_env = {});

// "SIGSEGV" for 11, "signal 99" for a number that names none.
std::string signal_name(int signal);

// The first executable among `names` in the folders of $PATH (or a name with a '/' that is
// executable itself); empty when there is none.
std::string find_program_in_path(const std::vector<std::string>& names);

}  // namespace tessel
