// Test-only: finds shared-memory segments that a test's ranks left behind in /dev/shm.
//
// Segments are named tessel-<job>-<pid>-<random>, <pid> being the process that created it. Tests
// run in parallel (ctest -j), so /dev/shm also holds the live segments of other tests, which come
// and go while a test runs: a leak is a segment that was not there before the test and whose
// creator has exited, since a live communicator's creator is still running.
#pragma once

#include <dirent.h>
#include <signal.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace tessel::dist::testing {

inline std::vector<std::string> tessel_shm_entries() {
  std::vector<std::string> names;
  if (DIR* dir = opendir("/dev/shm")) {
    while (dirent* e = readdir(dir))
      if (std::strncmp(e->d_name, "tessel-", 7) == 0) names.push_back(e->d_name);
    closedir(dir);
  }
  return names;
}

// The creator's pid from tessel-<job>-<pid>-<random>, or 0 when the name has another shape.
inline long shm_creator_pid(const std::string& name) {
  size_t last = name.rfind('-');
  if (last == std::string::npos || last == 0) return 0;
  size_t before = name.rfind('-', last - 1);
  if (before == std::string::npos) return 0;
  return std::strtol(name.c_str() + before + 1, nullptr, 10);
}

// Entries now present that were not in `before` and whose creator no longer runs.
inline std::vector<std::string> leaked_shm_entries(const std::vector<std::string>& before) {
  std::vector<std::string> leaked;
  for (const std::string& name : tessel_shm_entries()) {
    if (std::find(before.begin(), before.end(), name) != before.end()) continue;
    long pid = shm_creator_pid(name);
    bool creator_alive = pid > 0 && (kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM);
    if (!creator_alive) leaked.push_back(name);
  }
  return leaked;
}

}  // namespace tessel::dist::testing
