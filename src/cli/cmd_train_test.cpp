// `tessel train` as a user runs it: options that change the config after it is read are checked
// like the config's own keys (--fuse beside [distributed] is refused before anything starts,
// with exit code 2 and the key named, as a bad TOML key is).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "cli/run_tessel_for_test.h"

namespace {

using tessel::cli::testing::run_tessel;

TEST(TrainCommand, FuseOnTheCommandLineIsCheckedLikeTheKey) {
  const std::filesystem::path config =
      std::filesystem::temp_directory_path() / "tessel_cmd_train_fuse.toml";
  std::ofstream(config) << "[model]\nname = \"mlp\"\nhidden = [8]\n"
                           "[data]\nname = \"fashion_mnist\"\nbatch_size = 8\n"
                           "[optimizer]\nname = \"sgd\"\nlr = 0.1\n"
                           "[train]\nsteps = 1\n[distributed]\n";
  const auto run = run_tessel("train '" + config.string() + "' --fuse");
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_NE(run.output.find("key 'train.fuse' (or --fuse): not yet with [distributed]"),
            std::string::npos)
      << run.output;
  std::filesystem::remove(config);
}

}  // namespace
