// Every training config in examples/ runs from a fresh clone of the repository alone (issue 13):
// it loads, names no file outside the repository (no `../shared`), and the data it reads is in
// the repository (data/, for the text examples) or where the Debian package scripts/setup.sh
// installs puts it (dataset-fashion-mnist: /usr/share/datasets/fashion-mnist); synthetic data
// needs nothing. Paths are relative to the repository root, where the README runs them.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "data/mnist.h"
#include "train/train_config.h"

namespace tessel::train {
namespace {

namespace fs = std::filesystem;

std::string read_text(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(Examples, EveryTrainingConfigLoadsAndFindsItsDataInTheRepository) {
  const char* source = std::getenv("TESSEL_SOURCE_DIR");
  ASSERT_NE(source, nullptr) << "ctest sets TESSEL_SOURCE_DIR";
  const fs::path root(source);
  int configs = 0;
  for (const fs::directory_entry& e : fs::directory_iterator(root / "examples")) {
    if (e.path().extension() != ".toml") continue;
    const std::string text = read_text(e.path());
    EXPECT_EQ(text.find("../"), std::string::npos) << e.path() << " names a path outside";
    if (text.find("[model]") == std::string::npos) continue;  // a [target] table only
    SCOPED_TRACE(e.path().string());
    ++configs;
    Expected<TrainConfig> config = load_train_config(e.path().string());
    ASSERT_TRUE(config.ok()) << config.status().to_string();
    const DataConfig& data = config->data;
    if (data.name == "text") {
      EXPECT_TRUE(fs::is_regular_file(root / data.path))
          << data.path << " is not in the repository";
    } else if (data.name == "fashion_mnist") {
      // The loader fills in the package's folder when the config names none.
      const fs::path dir = data.path.empty() ? fs::path(kFashionMnistDir) : fs::path(data.path);
      EXPECT_EQ(dir, fs::path(kFashionMnistDir)) << "Fashion-MNIST comes from Debian's package";
      if (!fs::is_directory(dir))
        std::printf("no %s here: apt-get install dataset-fashion-mnist\n", dir.c_str());
    } else {
      EXPECT_EQ(data.name, "synthetic") << "a data source this test does not know";
    }
  }
  EXPECT_GE(configs, 7);
}

}  // namespace
}  // namespace tessel::train
