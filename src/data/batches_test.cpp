// Batch sources: contents against the dataset, epochs as permutations, reproducibility from the
// seed, and resume from a saved position.
#include "data/batches.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "data/test_files.h"

namespace tessel {
namespace {

// n images of 2 x 2 whose pixels are all equal to the example index, label = index % 10.
ImageDataset counting_dataset(int64_t n) {
  ImageDataset ds;
  std::vector<uint8_t> pixels;
  std::vector<int64_t> labels;
  for (int64_t i = 0; i < n; ++i) {
    for (int j = 0; j < 4; ++j)
      pixels.push_back(static_cast<uint8_t>(i));
    labels.push_back(i % 10);
  }
  ds.images = *Tensor::from_vector(pixels, {n, 2, 2});
  ds.labels = *Tensor::from_vector(labels, {n});
  return ds;
}

// The example index of each row of a batch, recovered from its pixels (mean 0, std 1/255).
std::vector<int64_t> examples_of(const Batch& b) {
  std::vector<float> x = *b.inputs.to_vector<float>();
  std::vector<int64_t> out;
  for (size_t i = 0; i < x.size(); i += 4)
    out.push_back(static_cast<int64_t>(std::lround(x[i])));
  return out;
}

TEST(ImageBatches, EachEpochIsAShuffledPermutationWithMatchingLabels) {
  auto source =
      ImageBatches::make(counting_dataset(23), {.batch_size = 5, .seed = 11, .std = 1.0f / 255.0f});
  ASSERT_TRUE(source.ok()) << source.status().to_string();
  EXPECT_EQ((*source)->batches_per_epoch(), 5);
  std::vector<std::vector<int64_t>> epochs(2);
  for (int e = 0; e < 2; ++e) {
    for (int b = 0; b < 5; ++b) {
      Expected<Batch> batch = (*source)->next();
      ASSERT_TRUE(batch.ok());
      const int64_t rows = b < 4 ? 5 : 3;
      EXPECT_EQ(batch->inputs.shape(), (Shape{rows, 2, 2}));
      EXPECT_EQ(batch->targets.shape(), (Shape{rows}));
      std::vector<int64_t> examples = examples_of(*batch);
      std::vector<int64_t> labels = *batch->targets.to_vector<int64_t>();
      for (size_t i = 0; i < examples.size(); ++i)
        EXPECT_EQ(labels[i], examples[i] % 10);
      epochs[e].insert(epochs[e].end(), examples.begin(), examples.end());
    }
    EXPECT_EQ((*source)->position(), (DataPosition{static_cast<uint64_t>(e + 1), 0, Pcg32()}));
  }
  for (auto& order : epochs) {
    std::vector<int64_t> sorted = order;
    std::sort(sorted.begin(), sorted.end());
    for (int64_t i = 0; i < 23; ++i)
      ASSERT_EQ(sorted[i], i);
  }
  EXPECT_NE(epochs[0], epochs[1]);
  // The order is the documented one: shuffled_indices(n, Pcg32(seed, epoch)).
  Pcg32 rng(11, 1);
  EXPECT_EQ(epochs[1], shuffled_indices(23, rng));
}

TEST(ImageBatches, UnshuffledDropLastAndNormalisation) {
  auto source = ImageBatches::make(
      counting_dataset(7),
      {.batch_size = 3, .shuffle = false, .drop_last = true, .mean = 0.5f, .std = 2.0f});
  ASSERT_TRUE(source.ok());
  EXPECT_EQ((*source)->batches_per_epoch(), 2);
  Batch a = *(*source)->next(), b = *(*source)->next(), c = *(*source)->next();
  EXPECT_EQ(*a.targets.to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(*b.targets.to_vector<int64_t>(), (std::vector<int64_t>{3, 4, 5}));
  EXPECT_EQ(*c.targets.to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 2}));  // next epoch
  EXPECT_NEAR(b.inputs.at<float>({1, 0, 0}), (4 / 255.0 - 0.5) / 2.0, 1e-6);

  EXPECT_FALSE(ImageBatches::make(counting_dataset(2), {.batch_size = 3, .drop_last = true}).ok());
  EXPECT_FALSE(ImageBatches::make(counting_dataset(2), {.batch_size = 0}).ok());
  Status far = (*source)->restore({0, 2, Pcg32()});
  EXPECT_EQ(far.code(), Code::kOutOfRange);
}

TEST(ImageBatches, ResumeFromASavedPositionContinuesIdentically) {
  const ImageBatchOptions options{.batch_size = 4, .seed = 3};
  auto straight = ImageBatches::make(counting_dataset(10), options).value();
  std::vector<std::vector<int64_t>> expected;
  for (int i = 0; i < 9; ++i)
    expected.push_back(examples_of(*straight->next()));

  auto first = ImageBatches::make(counting_dataset(10), options).value();
  for (int i = 0; i < 4; ++i)
    ASSERT_TRUE(first->next().ok());
  const std::string saved = first->position().to_string();
  EXPECT_EQ(saved.substr(0, 16), "epoch=1 batch=1 ");

  auto resumed = ImageBatches::make(counting_dataset(10), options).value();
  ASSERT_TRUE(resumed->restore(*DataPosition::parse(saved)).ok());
  for (int i = 4; i < 9; ++i)
    EXPECT_EQ(examples_of(*resumed->next()), expected[i]) << i;
}

TEST(DataPosition, TextFormRoundTripsAndRejectsGarbage) {
  Pcg32 rng(5, 6);
  rng.next_u32();
  const DataPosition p{7, 123, rng};
  EXPECT_EQ(*DataPosition::parse(p.to_string()), p);
  for (const char* bad :
       {"", "epoch=1", "epoch=x batch=2 rng=pcg32:0:1", "epoch=1 batch=2 rng=z"}) {
    Expected<DataPosition> parsed = DataPosition::parse(bad);
    ASSERT_FALSE(parsed.ok()) << bad;
    testing::expect_contains(parsed.status().message(), {"expected 'epoch=<n> batch=<n>"});
  }
}

TEST(TextBatches, WindowsAreShiftedSlicesOfTheSplit) {
  std::string text;
  for (int i = 0; i < 300; ++i)
    text.push_back(static_cast<char>('a' + (i * 7) % 26));
  CharDataset ds = *CharDataset::from_text(text, 0.9);
  auto source = TextBatches::make(ds, "train", 4, 8, 42);
  ASSERT_TRUE(source.ok()) << source.status().to_string();
  const std::vector<uint8_t>& train = **ds.split("train");
  std::set<int64_t> starts;
  for (int step = 0; step < 20; ++step) {
    Batch b = *(*source)->next();
    ASSERT_EQ(b.inputs.shape(), (Shape{4, 8}));
    ASSERT_EQ(b.targets.shape(), (Shape{4, 8}));
    std::vector<int64_t> x = *b.inputs.to_vector<int64_t>(), y = *b.targets.to_vector<int64_t>();
    for (int r = 0; r < 4; ++r) {
      // Find the window in the training tokens (the text is periodic, so take the first match).
      auto it = std::search(train.begin(), train.end(), x.begin() + r * 8, x.begin() + r * 8 + 8);
      ASSERT_NE(it, train.end());
      const auto s = it - train.begin();
      starts.insert(s);
      for (int t = 0; t < 8; ++t)
        EXPECT_EQ(y[r * 8 + t], train[s + t + 1]);
    }
  }
  EXPECT_GT(starts.size(), 10u);

  Expected<std::unique_ptr<TextBatches>> too_long = TextBatches::make(ds, "val", 2, 30, 1);
  ASSERT_FALSE(too_long.ok());
  testing::expect_contains(
      too_long.status().message(),
      {"the val split has 30 tokens; a window of context 30 needs at least 31"});
}

TEST(TextBatches, SameSeedSameBatchesAndResume) {
  std::string text;
  for (int i = 0; i < 2000; ++i)
    text.push_back(static_cast<char>(' ' + (i * i) % 90));
  CharDataset ds = *CharDataset::from_text(text, 0.9);
  auto a = TextBatches::make(ds, "train", 3, 5, 9).value();
  auto b = TextBatches::make(ds, "train", 3, 5, 9).value();
  std::vector<std::vector<int64_t>> expected;
  for (int i = 0; i < 6; ++i) {
    expected.push_back(*a->next()->inputs.to_vector<int64_t>());
    EXPECT_EQ(*b->next()->inputs.to_vector<int64_t>(), expected.back());
  }
  auto c = TextBatches::make(ds, "train", 3, 5, 9).value();
  for (int i = 0; i < 2; ++i)
    ASSERT_TRUE(c->next().ok());
  const std::string saved = c->position().to_string();
  auto d = TextBatches::make(ds, "train", 3, 5, 1234).value();
  ASSERT_TRUE(d->restore(*DataPosition::parse(saved)).ok());
  for (int i = 2; i < 6; ++i)
    EXPECT_EQ(*d->next()->inputs.to_vector<int64_t>(), expected[i]);
  EXPECT_EQ(d->position().batch, 6u);
}

}  // namespace
}  // namespace tessel
