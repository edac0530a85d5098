// Config: typed values, defaults, sub-tables, and the exact message for each kind of mistake
// (missing key, wrong type, wrong element type, unknown key with a suggestion, syntax error,
// missing file), each naming the file, the full key and where it is.
#include "support/config.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include "support/atomic_file.h"

namespace tessel {
namespace {

constexpr const char* kText = R"(name = "mnist"
seed = 42
verbose = true

[optimizer]
lr = 0.001
momentum = 0
kind = "adamw"
lrr = 1

[model]
dims = [784, 512, 10]
scales = [1, 0.5]
names = ["fc1", "fc2"]
bad = [1, "two"]
)";

Config sample() {
  Expected<Config> cfg = Config::parse(kText, "train.toml");
  EXPECT_TRUE(cfg.ok()) << cfg.status().to_string();
  return *cfg;
}

TEST(Config, TypedValues) {
  Config cfg = sample();
  EXPECT_EQ(*cfg.get<std::string>("name"), "mnist");
  EXPECT_EQ(*cfg.get<int64_t>("seed"), 42);
  EXPECT_EQ(*cfg.get<bool>("verbose"), true);
  EXPECT_EQ(*cfg.get<double>("optimizer.lr"), 0.001);
  EXPECT_EQ(*cfg.get<double>("optimizer.momentum"), 0.0);  // an integer where a number is wanted
  EXPECT_EQ(*cfg.get<std::vector<int64_t>>("model.dims"), (std::vector<int64_t>{784, 512, 10}));
  EXPECT_EQ(*cfg.get<std::vector<double>>("model.scales"), (std::vector<double>{1.0, 0.5}));
  EXPECT_EQ(*cfg.get<std::vector<std::string>>("model.names"),
            (std::vector<std::string>{"fc1", "fc2"}));
  EXPECT_TRUE(cfg.has("optimizer.kind"));
  EXPECT_FALSE(cfg.has("optimizer.beta1"));
  EXPECT_FALSE(cfg.has("seed.x"));
  EXPECT_EQ(*cfg.get_or<int64_t>("train.epochs", 10), 10);
  EXPECT_EQ(*cfg.get_or<int64_t>("seed", 10), 42);
  EXPECT_EQ(cfg.keys(),
            (std::vector<std::string>{"model", "name", "optimizer", "seed", "verbose"}));
}

TEST(Config, MistakesNameFileKeyAndPlace) {
  Config cfg = sample();
  Expected<double> missing = cfg.get<double>("optimizer.beta1");
  EXPECT_EQ(missing.status().code(), Code::kNotFound);
  EXPECT_EQ(missing.status().message(), "train.toml: missing key 'optimizer.beta1'");

  Expected<int64_t> wrong = cfg.get<int64_t>("optimizer.lr");
  EXPECT_EQ(wrong.status().code(), Code::kInvalidArgument);
  EXPECT_EQ(wrong.status().message(),
            "train.toml:6:6: key 'optimizer.lr': expected an integer, got a float (0.001)");
  EXPECT_EQ(cfg.get<double>("optimizer.kind").status().message(),
            "train.toml:8:8: key 'optimizer.kind': expected a number, got a string (\"adamw\")");
  EXPECT_EQ(cfg.get_or<bool>("seed", false).status().message(),
            "train.toml:2:8: key 'seed': expected true or false, got an integer (42)");
  EXPECT_EQ(cfg.get<std::vector<int64_t>>("model.bad").status().message(),
            "train.toml:15:11: key 'model.bad[1]': expected an integer, got a string (\"two\")");
  EXPECT_EQ(cfg.get<std::vector<int64_t>>("seed").status().message(),
            "train.toml:2:8: key 'seed': expected an array of integers, got an integer (42)");
  EXPECT_EQ(cfg.get<double>("seed.lr").status().message(),
            "train.toml:2:8: key 'seed.lr': 'seed' is an integer, not a table");
}

TEST(Config, SubTablesAndUnknownKeys) {
  Config cfg = sample();
  Config opt = *cfg.table("optimizer");
  EXPECT_EQ(opt.path(), "optimizer");
  EXPECT_EQ(*opt.get<double>("lr"), 0.001);
  EXPECT_EQ(opt.get<bool>("lr").status().message(),
            "train.toml:6:6: key 'optimizer.lr': expected true or false, got a float (0.001)");

  Status unknown = opt.check_keys({"lr", "momentum", "kind", "weight_decay"});
  EXPECT_EQ(unknown.code(), Code::kInvalidArgument);
  EXPECT_EQ(unknown.message(),
            "train.toml:9:1: unknown key 'optimizer.lrr' (did you mean 'lr'?); allowed in "
            "[optimizer]: lr, momentum, kind, weight_decay");
  EXPECT_TRUE(opt.check_keys({"lr", "lrr", "momentum", "kind"}).ok());
  EXPECT_EQ(cfg.check_keys({"name", "seed", "optimizer", "model"}).message(),
            "train.toml:3:1: unknown key 'verbose'; allowed in the top level: name, seed, "
            "optimizer, model");

  EXPECT_EQ(cfg.table("data").status().message(), "train.toml: missing table [data]");
  EXPECT_EQ(cfg.table("seed").status().message(),
            "train.toml:2:8: key 'seed': expected a table, got an integer (42)");
}

TEST(Config, SyntaxErrorsAndFiles) {
  Expected<Config> bad = Config::parse("a = 1\nb = [1, 2\n", "broken.toml");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), Code::kInvalidArgument);
  EXPECT_EQ(bad.status().message().rfind("broken.toml:", 0), 0u) << bad.status().message();
  EXPECT_NE(bad.status().message().find("broken.toml:2:"), std::string::npos)
      << bad.status().message();

  const std::string path =
      ::testing::TempDir() + "tessel_config_test_" + std::to_string(getpid()) + ".toml";
  ASSERT_TRUE(write_file_atomic(path, "[train]\nepochs = 3\n").ok());
  Expected<Config> loaded = Config::load(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  EXPECT_EQ(loaded->source(), path);
  EXPECT_EQ(*loaded->get<int64_t>("train.epochs"), 3);
  EXPECT_EQ(loaded->get<int64_t>("train.batch").status().message(),
            path + ": missing key 'train.batch'");
  unlink(path.c_str());

  Expected<Config> absent = Config::load("/nonexistent/x.toml");
  EXPECT_EQ(absent.status().code(), Code::kIoError);
  EXPECT_EQ(absent.status().message(),
            "config: open /nonexistent/x.toml: No such file or directory");
}

}  // namespace
}  // namespace tessel
