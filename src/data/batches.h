// Batches for training: a source hands out (inputs, targets) batches forever, epoch after epoch,
// and can say where it is (a DataPosition, saved in checkpoints) and go back there, so a resumed
// run sees the same batches as an uninterrupted one.
//
//   ImageBatches train(dataset, {.batch_size = 64, .seed = 1, .mean = kFashionMnistMean,
//                                .std = kFashionMnistStd});
//   TESSEL_ASSIGN_OR_RETURN(Batch b, train.next());   // f32 [64, 28, 28], i64 [64]
//   std::string saved = train.position().to_string();
//   ...
//   TESSEL_TRY(train.restore(*DataPosition::parse(saved)));  // the same batches again from here
//
// Shuffling: epoch e visits the examples in the order shuffled_indices(n, Pcg32(seed, e)), so a
// position needs only (epoch, batch). TextBatches draws random windows with one Pcg32 whose state
// is the position. Sources run on the calling thread; Prefetcher (prefetch.h) runs one ahead on a
// thread of its own.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "data/mnist.h"
#include "support/random.h"
#include "data/text_dataset.h"
#include "runtime/tensor.h"

namespace tessel {

struct Batch {
  Tensor inputs;
  Tensor targets;
};

// Where a batch source stands: the next batch it will hand out.
struct DataPosition {
  uint64_t epoch = 0;
  uint64_t batch = 0;  // within the epoch (TextBatches: batches drawn so far)
  Pcg32 rng;           // TextBatches' generator; unused by ImageBatches

  // "epoch=2 batch=17 rng=pcg32:<hex>:<hex>", for checkpoint metadata.
  std::string to_string() const;
  static Expected<DataPosition> parse(std::string_view text);
  bool operator==(const DataPosition& other) const = default;
};

class BatchSource {
 public:
  virtual ~BatchSource() = default;
  // The next batch; sources wrap around into the next epoch, so there is always one.
  virtual Expected<Batch> next() = 0;
  virtual DataPosition position() const = 0;
  // Continue from a position this kind of source produced (one that does not fit is an error).
  virtual Status restore(const DataPosition& position) = 0;
};

struct ImageBatchOptions {
  int64_t batch_size = 64;
  bool shuffle = true;
  uint64_t seed = 0;
  // Drop the last, smaller batch of an epoch (N % batch_size examples).
  bool drop_last = false;
  // inputs = (pixel / 255 - mean) / std
  float mean = 0.0f;
  float std = 1.0f;
};

// Batches of an ImageDataset: inputs f32 [B, H, W], targets i64 [B], on the CPU.
class ImageBatches : public BatchSource {
 public:
  // An empty dataset or a batch size < 1 is an error.
  static Expected<std::unique_ptr<ImageBatches>> make(ImageDataset dataset,
                                                      ImageBatchOptions options);
  Expected<Batch> next() override;
  DataPosition position() const override { return {epoch_, batch_, Pcg32()}; }
  Status restore(const DataPosition& position) override;
  int64_t batches_per_epoch() const;
  // The example order of an epoch (the identity when shuffle is off).
  std::vector<int64_t> epoch_order(uint64_t epoch) const;

 private:
  ImageBatches(ImageDataset dataset, ImageBatchOptions options)
      : dataset_(std::move(dataset)), options_(options) {}
  ImageDataset dataset_;
  ImageBatchOptions options_;
  uint64_t epoch_ = 0, batch_ = 0;
  std::vector<int64_t> order_;  // of epoch_
  uint64_t order_epoch_ = UINT64_MAX;
};

// Random windows of a CharDataset split: x = tokens[s, s + T), y = tokens[s + 1, s + T + 1), one
// uniform start s per row; inputs and targets i64 [B, T]. A "batch" is one draw; `epoch` stays 0.
class TextBatches : public BatchSource {
 public:
  // The split must hold at least T + 1 tokens.
  static Expected<std::unique_ptr<TextBatches>> make(const CharDataset& dataset,
                                                     std::string_view split, int64_t batch_size,
                                                     int64_t context, uint64_t seed);
  Expected<Batch> next() override;
  DataPosition position() const override { return {0, drawn_, rng_}; }
  Status restore(const DataPosition& position) override;

 private:
  TextBatches(const std::vector<uint8_t>* tokens, int64_t batch_size, int64_t context,
              uint64_t seed)
      : tokens_(tokens), batch_size_(batch_size), context_(context), rng_(seed) {}
  const std::vector<uint8_t>* tokens_;  // owned by the CharDataset, which must outlive this
  int64_t batch_size_, context_;
  Pcg32 rng_;
  uint64_t drawn_ = 0;
};

}  // namespace tessel
