// The path of this program, for starting copies of it (bench workers, tune trials, ranks).
#pragma once

#include <unistd.h>

#include <string>

namespace tessel::cli {

// /proc/self/exe's target. When the binary was replaced since this process started (a rebuild
// during a long `tessel tune`), that path names a different program or none ("... (deleted)"),
// so the children run /proc/<pid>/exe instead: this process's own binary for as long as it lives.
inline std::string self_path() {
  char self[4096] = {};
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) return "tessel";
  std::string path(self, static_cast<size_t>(n));
  const std::string deleted = " (deleted)";
  if (path.size() > deleted.size() && path.ends_with(deleted))
    return "/proc/" + std::to_string(::getpid()) + "/exe";
  return path;
}

}  // namespace tessel::cli
