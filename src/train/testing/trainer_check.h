// What the trainer's tests share: a fresh scratch folder per test and process, and trainer
// options that print nothing. Test-only.
#pragma once

#include <fmt/format.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "train/trainer.h"

namespace tessel::train::check {

// <tmp>/tessel_<suite>_<name>_<pid>, emptied and created: tests running at once (ctest -j)
// never share one.
inline std::string temp_folder(const std::string& suite, const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() /
             fmt::format("tessel_{}_{}_{}", suite, name, getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

inline TrainerOptions quiet() {
  TrainerOptions options;
  options.progress = nullptr;
  return options;
}

}  // namespace tessel::train::check
