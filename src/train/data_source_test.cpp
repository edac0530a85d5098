// The trainer's data sources: [data] keys and their errors, text windows read back against the
// file's bytes (training from the first 90%, evaluation from the rest, the same windows at every
// evaluation), a missing text file's message, synthetic images (shape, range, seeded).
#include "train/data_source.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>

namespace tessel::train {
namespace {

Expected<DataConfig> parse(const std::string& toml) {
  TESSEL_ASSIGN_OR_RETURN(Config config, Config::parse(toml, "run.toml"));
  TESSEL_ASSIGN_OR_RETURN(Config data, config.table("data"));
  return parse_data_config(data);
}

std::string error_of(const Expected<DataConfig>& c) {
  return c.ok() ? "(no error)" : c.status().message();
}

// A text file of `bytes` in a fresh folder; removed with the folder at the end of the test.
class TextFile {
 public:
  explicit TextFile(const std::string& bytes) {
    folder_ = std::filesystem::temp_directory_path() /
              fmt::format("tessel_data_source_test_{}", getpid());
    std::filesystem::create_directories(folder_);
    path_ = (folder_ / "text.txt").string();
    std::ofstream(path_, std::ios::binary) << bytes;
  }
  ~TextFile() { std::filesystem::remove_all(folder_); }
  const std::string& path() const { return path_; }

 private:
  std::filesystem::path folder_;
  std::string path_;
};

std::string sample_text() {
  std::string text;
  for (int i = 0; i < 400; ++i)
    text += fmt::format("line {} of the sample; ", i * 7919 % 1000);
  return text;
}

TEST(DataConfig, ReadsEachKindsKeysAndNamesTheWrongOnes) {
  auto text = parse("[data]\nname = \"text\"\npath = \"a.txt\"\nblock_size = 32\n");
  ASSERT_TRUE(text.ok()) << error_of(text);
  EXPECT_EQ(text->path, "a.txt");
  EXPECT_EQ(text->block_size, 32);
  EXPECT_DOUBLE_EQ(text->val_fraction, 0.1);
  EXPECT_EQ(text->eval_batches, 20);
  auto synthetic = parse("[data]\nname = \"synthetic\"\nshape = [3, 32, 32]\nclasses = 100\n");
  ASSERT_TRUE(synthetic.ok()) << error_of(synthetic);
  EXPECT_EQ(synthetic->shape, (Shape{3, 32, 32}));
  EXPECT_EQ(synthetic->classes, 100);
  EXPECT_EQ(synthetic->samples, 1024);

  EXPECT_EQ(error_of(parse("[data]\nname = \"text\"\npath = \"a\"\nblock_size = 8\nshape = [1]\n")),
            "run.toml:5:1: unknown key 'data.shape'; allowed in [data]: name, batch_size, "
            "eval_batch_size, path, block_size, val_fraction, eval_batches, anonymise_key_file, "
            "anonymise_names");
  EXPECT_EQ(error_of(parse("[data]\nname = \"text\"\npath = \"a\"\nblock_size = 0\n")),
            "run.toml: key 'data.block_size': must be >= 1, got 0");
  EXPECT_EQ(error_of(parse("[data]\nname = \"text\"\npath = \"a\"\nblock_size = 8\n"
                           "val_fraction = 1.0\n")),
            "run.toml: key 'data.val_fraction': must be in (0, 1), got 1");
  EXPECT_EQ(error_of(parse("[data]\nname = \"synthetic\"\nshape = [3, 0]\n")),
            "run.toml: key 'data.shape': expected a list of sizes >= 1, e.g. [3, 32, 32]");
  EXPECT_EQ(error_of(parse("[data]\nname = \"images\"\n")),
            "run.toml: key 'data.name': 'images' is not allowed; allowed: fashion_mnist, mnist, "
            "text, synthetic");
}

TEST(TextSource, WindowsComeFromTheirSplitAndTargetsAreTheNextBytes) {
  const std::string bytes = sample_text();
  TextFile file(bytes);
  DataConfig c{.name = "text",
               .batch_size = 4,
               .eval_batch_size = 3,
               .path = file.path(),
               .block_size = 16,
               .val_fraction = 0.1,
               .eval_batches = 2};
  auto source = DataSource::open(c, /*seed=*/5, "run.toml").value();
  EXPECT_EQ(source->task(), DataTask::kLanguageModel);
  EXPECT_EQ(source->example_shape(), (Shape{16}));
  std::set<char> distinct(bytes.begin(), bytes.end());
  EXPECT_EQ(source->classes(), static_cast<int64_t>(distinct.size()));
  EXPECT_EQ(source->batches_per_epoch(), 0);
  EXPECT_EQ(source->throughput_per_batch(), 4 * 16);
  const CharDataset& text = *source->text();

  // Every window, decoded, is a run of the file's bytes inside its split; targets follow by one.
  const size_t n_train = static_cast<size_t>(0.9 * bytes.size());
  auto check = [&](BatchSource& batches, size_t begin, size_t end, int64_t rows) {
    Batch b = batches.next().value();
    ASSERT_EQ(b.inputs.shape(), (Shape{rows, 16}));
    std::vector<int64_t> x = b.inputs.to_vector<int64_t>().value();
    std::vector<int64_t> y = b.targets.to_vector<int64_t>().value();
    for (int64_t r = 0; r < rows; ++r) {
      std::vector<int64_t> row(x.begin() + r * 16, x.begin() + (r + 1) * 16);
      std::vector<int64_t> next(y.begin() + r * 16, y.begin() + (r + 1) * 16);
      const std::string window = text.decode(row).value(), shifted = text.decode(next).value();
      const size_t at = bytes.find(window + shifted.back(), begin);
      ASSERT_NE(at, std::string::npos) << window;
      EXPECT_LE(at + 17, end) << window;
      EXPECT_EQ(bytes.substr(at + 1, 16), shifted);
    }
  };
  auto train = source->train_batches().value();
  for (int i = 0; i < 5; ++i)
    check(*train, 0, n_train, 4);
  auto eval = source->eval_batches().value();
  for (int i = 0; i < 2; ++i)
    check(*eval, n_train, bytes.size(), 3);

  // Evaluation sees the same windows every time; training continues from a restored position.
  auto first = source->eval_batches().value()->next().value();
  auto again = source->eval_batches().value()->next().value();
  EXPECT_EQ(first.inputs.to_vector<int64_t>().value(), again.inputs.to_vector<int64_t>().value());
  const DataPosition saved = train->position();
  auto expected = train->next().value().inputs.to_vector<int64_t>().value();
  auto resumed = source->train_batches().value();
  ASSERT_TRUE(resumed->restore(saved).ok());
  EXPECT_EQ(resumed->next().value().inputs.to_vector<int64_t>().value(), expected);
}

TEST(TextSource, AMissingFileSaysWhereItLooked) {
  DataConfig c{.name = "text", .path = "no/such/shakespeare.txt", .block_size = 8};
  auto missing = DataSource::open(c, 0, "run.toml");
  ASSERT_FALSE(missing.ok());
  const std::string where = (std::filesystem::current_path() / "no/such/shakespeare.txt").string();
  EXPECT_EQ(missing.status().message(),
            fmt::format("run.toml: key 'data.path': no text file 'no/such/shakespeare.txt' "
                        "(looked for {}, relative to the working directory {})",
                        where, std::filesystem::current_path().string()));
  c.path = "/no/such/shakespeare.txt";
  EXPECT_EQ(DataSource::open(c, 0, "run.toml").status().message(),
            "run.toml: key 'data.path': no text file '/no/such/shakespeare.txt'");
}

TEST(TextSource, ASplitShorterThanAWindowIsAnError) {
  TextFile file("0123456789abcdefghij");  // 18 train bytes, 2 validation bytes
  DataConfig c{.name = "text", .path = file.path(), .block_size = 4};
  auto s = DataSource::open(c, 0, "run.toml");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("the val split has 2 tokens"), std::string::npos)
      << s.status().message();
}

TEST(SyntheticSource, SeededImagesOfTheShapeWithLabelsInRange) {
  DataConfig c{.name = "synthetic",
               .batch_size = 8,
               .eval_batch_size = 5,
               .shape = {3, 4, 5},
               .classes = 7,
               .samples = 64,
               .eval_samples = 10};
  auto a = DataSource::open(c, 1, "run.toml").value();
  auto b = DataSource::open(c, 1, "run.toml").value();
  auto other = DataSource::open(c, 2, "run.toml").value();
  EXPECT_EQ(a->task(), DataTask::kClassification);
  EXPECT_EQ(a->example_shape(), (Shape{3, 4, 5}));
  EXPECT_EQ(a->classes(), 7);
  EXPECT_EQ(a->batches_per_epoch(), 8);
  EXPECT_EQ(a->eval_batch_count(), 2);
  Batch x = a->train_batches().value()->next().value();
  ASSERT_EQ(x.inputs.shape(), (Shape{8, 3, 4, 5}));
  std::vector<float> pixels = x.inputs.to_vector<float>().value();
  // Standardised uniform bytes: within +-sqrt(3) (a bit more for the discreteness), mean ~0.
  double sum = 0.0;
  for (float p : pixels) {
    EXPECT_LE(std::abs(p), 1.74f);
    sum += p;
  }
  EXPECT_LT(std::abs(sum / double(pixels.size())), 0.2);
  const std::vector<int64_t> labels = x.targets.to_vector<int64_t>().value();
  for (int64_t label : labels) {
    EXPECT_GE(label, 0);
    EXPECT_LT(label, 7);
  }
  EXPECT_EQ(pixels, b->train_batches().value()->next().value().inputs.to_vector<float>().value());
  EXPECT_NE(pixels,
            other->train_batches().value()->next().value().inputs.to_vector<float>().value());

  c.samples = 4;  // fewer than a batch
  EXPECT_EQ(DataSource::open(c, 1, "run.toml").status().message(),
            "run.toml: key 'data.samples': 4 samples make no full batch of batch_size 8");
}

}  // namespace
}  // namespace tessel::train
