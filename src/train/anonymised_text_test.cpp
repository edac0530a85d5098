// The text data source with anonymise_key_file: the model trains on the text with its personal
// data replaced by the same pseudonyms `tessel anonymise` writes with that key (the reference:
// secure::Anonymiser on the raw text), and none of the raw identifiers reach the tokens.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "secure/anonymise.h"
#include "train/data_source.h"

namespace tessel::train {
namespace {

TEST(AnonymisedText, TrainsOnPseudonymsOnly) {
  const auto folder =
      std::filesystem::temp_directory_path() / fmt::format("tessel_anonymised_text_{}", getpid());
  std::filesystem::create_directories(folder);
  std::string raw;
  for (int i = 0; i < 200; ++i)
    raw += fmt::format("line {}: Ada Lovelace wrote to ada{}@example.org from 10.0.{}.7\n", i,
                       i % 7, i % 5);
  std::ofstream(folder / "text.txt") << raw;
  std::ofstream(folder / "names.txt") << "# people\nAda Lovelace\n";
  const secure::SecretKey key = secure::SecretKey::generate();
  ASSERT_TRUE(key.save((folder / "k.key").string()).ok());

  const std::string table = fmt::format(
      "name = \"text\"\npath = \"{}\"\nblock_size = 8\nanonymise_key_file = \"{}\"\n"
      "anonymise_names = \"{}\"\n",
      (folder / "text.txt").string(), (folder / "k.key").string(), (folder / "names.txt").string());
  Expected<DataConfig> config = parse_data_config(Config::parse(table, "t.toml").value());
  ASSERT_TRUE(config.ok()) << config.status().to_string();
  Expected<std::unique_ptr<DataSource>> source = DataSource::open(*config, 1, "t.toml");
  ASSERT_TRUE(source.ok()) << source.status().to_string();
  const CharDataset& text = *(*source)->text();
  std::string seen;
  for (const char* split : {"train", "val"})
    for (uint8_t token : **text.split(split))
      seen += text.vocabulary()[token];

  secure::Anonymiser reference(key, {.names = {"Ada Lovelace"}});
  EXPECT_EQ(seen, reference.anonymise(raw));
  EXPECT_EQ(reference.report().to_string(), "email 200, ipv4 200, name 200");
  EXPECT_EQ(seen.find("@example"), std::string::npos);
  EXPECT_EQ(seen.find("Lovelace"), std::string::npos);
  EXPECT_EQ(seen.find("10.0."), std::string::npos);
  std::filesystem::remove_all(folder);
}

}  // namespace
}  // namespace tessel::train
