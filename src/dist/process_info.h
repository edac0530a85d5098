// Who a process is and whether it still runs: the facts behind fast dead-rank detection.
// A pid alone is not enough (pids are reused, and a killed child stays a zombie until its parent
// reaps it), so a process is named by its pid and its start time, and a zombie counts as dead.
#pragma once

#include <cstdint>
#include <string>

namespace tessel::dist {

struct ProcessId {
  int pid = 0;
  uint64_t start_time = 0;     // clock ticks after boot, field 22 of /proc/<pid>/stat
  uint64_t pid_namespace = 0;  // inode of /proc/self/ns/pid: pids mean something only inside it
};

ProcessId this_process();

enum class Liveness {
  kAlive,
  kGone,     // no such process, a zombie, or the pid now belongs to another process
  kUnknown,  // cannot tell (no /proc, another pid namespace): rely on heartbeats
};
// Checked from this process; a process in another pid namespace is kUnknown.
// `why` receives a short reason for kGone: "the process no longer exists", "it exited and is a
// zombie", "its pid now belongs to another process".
Liveness check_process(const ProcessId& id, std::string* why = nullptr);

// Identifies this machine for "are all ranks on one host": host name plus the kernel's boot id.
std::string host_identity();

}  // namespace tessel::dist
