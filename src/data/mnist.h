// MNIST-format image classification datasets (MNIST, Fashion-MNIST, KMNIST, ...): a folder with
// train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-images-idx3-ubyte and
// t10k-labels-idx1-ubyte, each optionally gzip-compressed (".gz").
//
//   TESSEL_ASSIGN_OR_RETURN(ImageDataset train, load_mnist(kFashionMnistDir, "train"));
//   train.images   // u8 [60000, 28, 28], pixel values 0..255
//   train.labels   // i64 [60000], classes 0..9
//   TESSEL_ASSIGN_OR_RETURN(Tensor x, normalize_images(train.images, kFashionMnistMean,
//                                                       kFashionMnistStd));  // f32
//
// Images stay u8 in memory (a quarter of f32); batches convert the rows they take (batches.h).
// A missing file is an error listing every path looked at; a malformed one names the path and
// the byte offset (idx.h); labels and images that disagree in count, or labels outside 0..9,
// name both files.
#pragma once

#include <string>
#include <string_view>

#include "runtime/tensor.h"
#include "support/status.h"

namespace tessel {

// Where Debian's dataset-fashion-mnist package (installed by scripts/setup.sh) puts the files.
inline constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";
inline constexpr int64_t kMnistClasses = 10;
// Per-pixel mean and standard deviation of the training images, pixel values scaled to [0, 1].
inline constexpr float kFashionMnistMean = 0.2860f, kFashionMnistStd = 0.3530f;
inline constexpr float kMnistMean = 0.1307f, kMnistStd = 0.3081f;

struct ImageDataset {
  Tensor images;  // u8 [N, H, W]
  Tensor labels;  // i64 [N], in [0, num_classes)
  int64_t num_classes = kMnistClasses;
  std::string images_path, labels_path;  // the files read

  int64_t size() const { return labels.defined() ? labels.size(0) : 0; }
};

// `split` is "train" or "test" (the t10k files).
Expected<ImageDataset> load_mnist(const std::string& folder, std::string_view split);

// Pixels as f32: (value / 255 - mean) / std. Any u8 tensor on the CPU.
Expected<Tensor> normalize_images(const Tensor& images, float mean = 0.0f, float std = 1.0f);

}  // namespace tessel
