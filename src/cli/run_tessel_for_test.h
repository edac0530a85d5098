// For the tests that run the built `tessel` command as a user would (TESSEL_CLI_PATH, set by
// src/cli/CMakeLists.txt): its exit code and what it printed, stdout and stderr together.
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <string>

namespace tessel::cli::testing {

struct CliRun {
  int exit_code = -1;  // -1: it did not start, or a signal ended it
  std::string output;
};

// Runs `tessel ARGUMENTS` through the shell (arguments are quoted by the caller).
inline CliRun run_tessel(const std::string& arguments) {
  CliRun r;
  const std::string command = std::string("'") + TESSEL_CLI_PATH + "' " + arguments + " 2>&1";
  std::FILE* pipe = ::popen(command.c_str(), "r");
  if (!pipe) return r;
  char buffer[4096];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof(buffer), pipe)) > 0)
    r.output.append(buffer, n);
  const int status = ::pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

}  // namespace tessel::cli::testing
