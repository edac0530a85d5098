// Character-level text dataset: vocabulary, encode/decode and the split, on a small text and on
// Tiny Shakespeare (read independently here) when it is present.
#include "data/text_dataset.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>

#include "data/test_files.h"

namespace tessel {
namespace {

using testing::expect_contains;

TEST(CharDataset, VocabularyEncodeDecodeAndSplit) {
  Expected<CharDataset> ds = CharDataset::from_text("hello world", 0.5);
  ASSERT_TRUE(ds.ok()) << ds.status().to_string();
  EXPECT_EQ(ds->vocabulary(), " dehlorw");
  EXPECT_EQ(ds->vocab_size(), 8);
  EXPECT_EQ(*ds->encode("hold"), (std::vector<int64_t>{3, 5, 4, 1}));
  EXPECT_EQ(*ds->decode({7, 5, 6, 4, 1}), "world");
  // floor(0.5 * 11) = 5 training tokens: "hello"; the rest " world".
  EXPECT_EQ((*ds->split("train"))->size(), 5u);
  EXPECT_EQ((*ds->split("val"))->size(), 6u);
  EXPECT_EQ((*ds->split("val"))->front(), 0);  // ' '

  Expected<std::vector<int64_t>> bad = ds->encode("help!");
  ASSERT_FALSE(bad.ok());
  expect_contains(bad.status().message(), {"byte 0x70 at position 3", "<text>"});
  Expected<std::string> out = ds->decode({1, 8});
  ASSERT_FALSE(out.ok());
  expect_contains(out.status().message(), {"token 8 at position 1", "[0, 8)"});
  EXPECT_FALSE(ds->split("test").ok());
  EXPECT_FALSE(CharDataset::from_text("", 0.9).ok());
  EXPECT_FALSE(CharDataset::from_text("abc", 0.0).ok());
}

TEST(CharDataset, MissingFileNamesIt) {
  Expected<CharDataset> ds = CharDataset::from_file("/nonexistent/input.txt");
  ASSERT_FALSE(ds.ok());
  expect_contains(ds.status().message(), {"/nonexistent/input.txt"});
}

// Tiny Shakespeare ships in the repository's data/ (data/README.md).
std::string shakespeare_path() {
  const char* source = std::getenv("TESSEL_SOURCE_DIR");
  if (source == nullptr) return "";
  const std::string path = std::string(source) + "/data/tinyshakespeare/input.txt";
  return std::ifstream(path).good() ? path : "";
}

TEST(CharDataset, TinyShakespeareAgainstTheFileReadHere) {
  const std::string path = shakespeare_path();
  if (path.empty()) {
    GTEST_SKIP() << "Tiny Shakespeare not found: TESSEL_SOURCE_DIR (set by ctest) is "
                 << (std::getenv("TESSEL_SOURCE_DIR") ? std::getenv("TESSEL_SOURCE_DIR") : "unset")
                 << " and data/tinyshakespeare/input.txt is not in it";
  }
  std::stringstream buffer;
  buffer << std::ifstream(path, std::ios::binary).rdbuf();
  const std::string text = buffer.str();
  std::set<unsigned char> distinct(text.begin(), text.end());

  Expected<CharDataset> ds = CharDataset::from_file(path, 0.9);
  ASSERT_TRUE(ds.ok()) << ds.status().to_string();
  EXPECT_EQ(ds->vocab_size(), static_cast<int64_t>(distinct.size()));
  EXPECT_EQ(ds->vocab_size(), 65);  // as nanoGPT's shakespeare_char reports
  const std::vector<uint8_t>& train = **ds->split("train");
  const std::vector<uint8_t>& val = **ds->split("val");
  EXPECT_EQ(train.size() + val.size(), text.size());
  EXPECT_EQ(train.size(), static_cast<size_t>(0.9 * text.size()));
  // Every token decodes to the byte at its place in the file.
  std::vector<int64_t> all(train.begin(), train.end());
  all.insert(all.end(), val.begin(), val.end());
  EXPECT_EQ(*ds->decode(all), text);
  EXPECT_EQ(text.substr(0, 14), "First Citizen:");
}

}  // namespace
}  // namespace tessel
