// fork + exec with a pipe for the output (see subprocess.h).
#include "support/subprocess.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string_view>

namespace tessel {

ProgramRun run_program(const std::vector<std::string>& argv,
                       const std::vector<std::pair<std::string, std::string>>& extra_env) {
  ProgramRun result;
  if (argv.empty()) return result;
  // Everything the child needs is made before fork(): in a process with other threads the child
  // may only call async-signal-safe functions until it execs. An allocation there can wait forever
  // on a lock another thread held at the fork (seen under ASan: a tuner test's child stuck in
  // operator new for 15 minutes).
  std::vector<char*> args;
  for (const std::string& a : argv)
    args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::vector<std::string> env_entries;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string_view entry(*e);
    const std::string_view key = entry.substr(0, entry.find('='));
    bool replaced = false;
    for (const auto& [extra_key, value] : extra_env)
      replaced = replaced || key == extra_key;
    if (!replaced) env_entries.emplace_back(entry);
  }
  for (const auto& [key, value] : extra_env)
    env_entries.push_back(key + "=" + value);
  std::vector<char*> envp;
  for (std::string& entry : env_entries)
    envp.push_back(entry.data());
  envp.push_back(nullptr);
  const std::string cannot_run = "cannot run " + argv[0] + ": ";

  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    result.output = "pipe() failed";
    return result;
  }
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    result.output = "fork() failed";
    return result;
  }
  if (pid == 0) {
    ::dup2(fds[1], 1);
    ::dup2(fds[1], 2);
    ::execvpe(args[0], args.data(), envp.data());
    const char* why = ::strerrordesc_np(errno);  // a static string: safe here, unlike strerror
    [[maybe_unused]] ssize_t written = ::write(2, cannot_run.data(), cannot_run.size());
    written = ::write(2, why ? why : "?", why ? std::strlen(why) : 1);
    written = ::write(2, "\n", 1);
    ::_exit(127);
  }
  ::close(fds[1]);
  char buffer[4096];
  ssize_t n;
  while ((n = ::read(fds[0], buffer, sizeof buffer)) > 0 || (n < 0 && errno == EINTR))
    if (n > 0) result.output.append(buffer, static_cast<size_t>(n));
  ::close(fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  result.signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
  return result;
}

std::string signal_name(int signal) {
  const char* abbrev = ::sigabbrev_np(signal);
  return abbrev ? "SIG" + std::string(abbrev) : "signal " + std::to_string(signal);
}

std::string find_program_in_path(const std::vector<std::string>& names) {
  const char* path = std::getenv("PATH");
  for (const std::string& name : names) {
    if (name.find('/') != std::string::npos) {
      if (::access(name.c_str(), X_OK) == 0) return name;
      continue;
    }
    std::istringstream dirs(path ? path : "");
    std::string dir;
    while (std::getline(dirs, dir, ':')) {
      std::string candidate = (dir.empty() ? "." : dir) + "/" + name;
      if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    }
  }
  return {};
}

}  // namespace tessel
