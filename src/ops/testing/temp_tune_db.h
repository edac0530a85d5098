// A test fixture with a tuning database file of its own (removed after the test, with SQLite's
// -wal and -shm files) and the process's choices switched back to no database.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "tune/choices.h"

namespace tessel::ops::testing {

class TempTuneDbTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
    file_ = (std::filesystem::temp_directory_path() /
             ("tessel_" + std::string(info->test_suite_name()) + "_" + std::to_string(getpid()) +
              ".db"))
                .string();
    remove_files();
  }
  void TearDown() override {
    tune::TuneChoices::global().use_database("");
    remove_files();
  }
  void remove_files() {
    for (const char* suffix : {"", "-wal", "-shm"})
      std::filesystem::remove(file_ + suffix);
  }
  std::string file_;
};

}  // namespace tessel::ops::testing
