// /proc and kill(2) based process identity and liveness (process_info.h).
#include "dist/process_info.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

namespace tessel::dist {

namespace {

// Reads state (field 3) and start time (field 22) of /proc/<pid>/stat. The command name (field
// 2) is in parentheses and may hold spaces, so parsing starts after the last ')'.
bool read_stat(int pid, char* state, uint64_t* start_time) {
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/%d/stat", pid);
  std::ifstream file(path);
  if (!file) return false;
  std::string text((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  size_t close = text.rfind(')');
  if (close == std::string::npos) return false;
  std::istringstream rest(text.substr(close + 1));
  std::string field;
  rest >> field;  // field 3: state
  if (field.empty()) return false;
  *state = field[0];
  for (int index = 4; index <= 22; ++index)
    rest >> field;
  *start_time = std::strtoull(field.c_str(), nullptr, 10);
  return true;
}

}  // namespace

ProcessId this_process() {
  ProcessId id;
  id.pid = static_cast<int>(::getpid());
  char state = 0;
  read_stat(id.pid, &state, &id.start_time);
  struct stat ns {};
  if (::stat("/proc/self/ns/pid", &ns) == 0) id.pid_namespace = ns.st_ino;
  return id;
}

Liveness check_process(const ProcessId& id, std::string* why) {
  auto gone = [&](const char* reason) {
    if (why) *why = reason;
    return Liveness::kGone;
  };
  static const uint64_t my_namespace = this_process().pid_namespace;
  if (id.pid <= 0 || id.pid_namespace == 0 || id.pid_namespace != my_namespace)
    return Liveness::kUnknown;
  if (::kill(id.pid, 0) != 0 && errno == ESRCH) return gone("the process no longer exists");
  char state = 0;
  uint64_t start_time = 0;
  if (!read_stat(id.pid, &state, &start_time)) {
    if (::kill(id.pid, 0) != 0 && errno == ESRCH) return gone("the process no longer exists");
    return Liveness::kUnknown;
  }
  if (state == 'Z' || state == 'X') return gone("it exited or was killed (now a zombie)");
  if (id.start_time != 0 && start_time != id.start_time)
    return gone("the process no longer exists (its pid belongs to another process now)");
  return Liveness::kAlive;
}

std::string host_identity() {
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  std::string boot_id;
  std::ifstream file("/proc/sys/kernel/random/boot_id");
  std::getline(file, boot_id);
  return std::string(host) + "/" + boot_id;
}

}  // namespace tessel::dist
