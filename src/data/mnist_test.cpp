// MNIST-format datasets: a small one written here, the mistakes a folder can hold, and the real
// Fashion-MNIST (when installed) checked against its files decompressed independently.
#include "data/mnist.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <array>
#include <cmath>

#include "data/test_files.h"

namespace tessel {
namespace {

using testing::expect_contains;
using testing::idx_bytes;
using testing::TempDir;

// 5 images of 2 x 3 with pixel (n, i) = n * 40 + i, and labels.
void write_small(const TempDir& dir, const std::string& labels, uint32_t n_labels = 5) {
  std::string pixels;
  for (int n = 0; n < 5; ++n)
    for (int i = 0; i < 6; ++i)
      pixels.push_back(static_cast<char>(n * 40 + i));
  testing::write_gzip(dir.file("train-images-idx3-ubyte.gz"), idx_bytes(0x08, {5, 2, 3}, pixels));
  testing::write_plain(dir.file("train-labels-idx1-ubyte"), idx_bytes(0x08, {n_labels}, labels));
}

TEST(Mnist, LoadsImagesAndLabels) {
  TempDir dir;
  write_small(dir, std::string{3, 0, 9, 1, 1});
  Expected<ImageDataset> ds = load_mnist(dir.path(), "train");
  ASSERT_TRUE(ds.ok()) << ds.status().to_string();
  EXPECT_EQ(ds->size(), 5);
  EXPECT_EQ(ds->images.shape(), (Shape{5, 2, 3}));
  EXPECT_EQ(ds->labels.dtype(), DType::kI64);
  EXPECT_EQ(*ds->labels.to_vector<int64_t>(), (std::vector<int64_t>{3, 0, 9, 1, 1}));
  EXPECT_EQ(ds->images.at<uint8_t>({3, 1, 2}), 3 * 40 + 5);
  EXPECT_EQ(ds->images_path, dir.file("train-images-idx3-ubyte.gz"));
  EXPECT_EQ(ds->labels_path, dir.file("train-labels-idx1-ubyte"));

  Expected<Tensor> x = normalize_images(ds->images, 0.5f, 0.25f);
  ASSERT_TRUE(x.ok());
  EXPECT_EQ(x->dtype(), DType::kF32);
  EXPECT_NEAR(x->at<float>({3, 1, 2}), (125.0 / 255.0 - 0.5) / 0.25, 1e-6);
  EXPECT_NEAR(x->at<float>({0, 0, 0}), -2.0, 1e-6);
}

TEST(Mnist, MissingFilesListEveryPathLookedAt) {
  TempDir dir;
  Expected<ImageDataset> ds = load_mnist(dir.path(), "test");
  ASSERT_FALSE(ds.ok());
  EXPECT_EQ(ds.status().code(), Code::kNotFound);
  expect_contains(ds.status().message(),
                  {"no test images file in " + dir.path(), dir.file("t10k-images-idx3-ubyte.gz"),
                   dir.file("t10k-images-idx3-ubyte"), dir.file("t10k-images.idx3-ubyte"),
                   "dataset-fashion-mnist"});
  Expected<ImageDataset> split = load_mnist(dir.path(), "validation");
  ASSERT_FALSE(split.ok());
  expect_contains(split.status().message(), {"'validation'", "'train' or 'test'"});
}

TEST(Mnist, LabelsThatDisagreeWithImagesNameBothFiles) {
  TempDir dir;
  write_small(dir, std::string{1, 2, 3, 4}, 4);
  Expected<ImageDataset> ds = load_mnist(dir.path(), "train");
  ASSERT_FALSE(ds.ok());
  expect_contains(ds.status().message(),
                  {dir.file("train-labels-idx1-ubyte") + ": byte offset 4: the label count 4",
                   "image count 5", dir.file("train-images-idx3-ubyte.gz")});

  write_small(dir, std::string{1, 2, 10, 4, 5});
  ds = load_mnist(dir.path(), "train");
  ASSERT_FALSE(ds.ok());
  expect_contains(ds.status().message(), {dir.file("train-labels-idx1-ubyte") +
                                          ": byte offset 10: expected a label in 0..9, found 10"});

  // Images given as labels: wrong rank.
  testing::write_plain(dir.file("train-labels-idx1-ubyte"), idx_bytes(0x08, {5, 1}, "abcde"));
  ds = load_mnist(dir.path(), "train");
  ASSERT_FALSE(ds.ok());
  expect_contains(ds.status().message(), {"expected labels as unsigned bytes [N]", "[5, 1]"});
}

bool is_dir(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

TEST(FashionMnist, InstalledDatasetMatchesItsFiles) {
  if (!is_dir(kFashionMnistDir))
    GTEST_SKIP() << kFashionMnistDir << " is absent (Debian package dataset-fashion-mnist)";
  for (const char* split : {"train", "test"}) {
    Expected<ImageDataset> ds = load_mnist(kFashionMnistDir, split);
    ASSERT_TRUE(ds.ok()) << ds.status().to_string();
    const int64_t n = std::string(split) == "train" ? 60000 : 10000;
    EXPECT_EQ(ds->images.shape(), (Shape{n, 28, 28}));
    EXPECT_EQ(ds->labels.shape(), (Shape{n}));
    // Fashion-MNIST is balanced: n / 10 of every class.
    std::array<int64_t, 10> counts{};
    const int64_t* labels = ds->labels.data<int64_t>();
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_GE(labels[i], 0);
      ASSERT_LT(labels[i], 10);
      ++counts[labels[i]];
    }
    for (int64_t c : counts)
      EXPECT_EQ(c, n / 10);
    // Against the files decompressed here with zlib alone: labels from byte 8, pixels from 16.
    const std::string raw_labels = testing::gunzip(ds->labels_path);
    const std::string raw_images = testing::gunzip(ds->images_path);
    ASSERT_EQ(raw_labels.size(), static_cast<size_t>(8 + n));
    ASSERT_EQ(raw_images.size(), static_cast<size_t>(16 + n * 784));
    for (int64_t i = 0; i < n; ++i)
      ASSERT_EQ(labels[i], static_cast<unsigned char>(raw_labels[8 + i])) << i;
    const uint8_t* pixels = ds->images.data<uint8_t>();
    EXPECT_EQ(std::memcmp(pixels, raw_images.data() + 16, n * 784), 0);
    if (std::string(split) == "train") {
      // The first training labels of Fashion-MNIST: ankle boot, T-shirt, T-shirt, dress, T-shirt.
      EXPECT_EQ(*ds->labels.slice(0, 0, 5)->to_vector<int64_t>(),
                (std::vector<int64_t>{9, 0, 0, 3, 0}));
    }
  }
}

}  // namespace
}  // namespace tessel
