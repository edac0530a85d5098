// The data of a training run, chosen by the [data] table's `name`: one interface the trainer
// holds, whatever the task, so the loop does not know whether it feeds images or text.
//
//   [data] name = "fashion_mnist" | "mnist"   path = folder of idx files (mnist.h)
//   [data] name = "text"        path = "any.txt"  block_size = 64  val_fraction = 0.1
//                               eval_batches = 20       (char-level language modelling)
//   [data] name = "synthetic"   shape = [3, 32, 32]  classes = 10  samples = 1024
//                               eval_samples = 256      (seeded random images, for throughput)
//   every kind: batch_size = 128  eval_batch_size = 1000
//
//   TESSEL_ASSIGN_OR_RETURN(DataConfig data, parse_data_config(config.table("data")));
//   TESSEL_ASSIGN_OR_RETURN(auto source, DataSource::open(data, /*seed=*/1, "run.toml"));
//   source->example_shape()   // {28, 28} for Fashion-MNIST, {T} for text
//   TESSEL_ASSIGN_OR_RETURN(auto train, source->train_batches());   // forever, with a position
//   TESSEL_ASSIGN_OR_RETURN(auto eval, source->eval_batches());     // the same batches each call
//
// Targets are class ids of the examples' leading shape: i64 [B] for images, i64 [B, T] for text
// (the next token of every position), so one loss serves both: cross-entropy of logits
// [..., classes] against targets [...].
//
// Text: the first 1 - val_fraction of the file's bytes train, the rest validate (nanoGPT's
// split); training draws B random windows of block_size tokens per batch from a generator seeded
// by the run's seed, whose state is the data position a checkpoint keeps; evaluation reads
// eval_batches batches of eval_batch_size windows from the validation tokens, drawn from a fixed
// generator so every evaluation sees the same windows. A relative path is taken from the working
// directory, and a missing file says where it was looked for.
// Synthetic: `samples` training and `eval_samples` evaluation images of `shape`, u8 pixels drawn
// uniformly from the seed and normalised to mean 0, variance 1, with uniform random labels; it
// exists to time models, so nothing in it can be learnt beyond memorising it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "data/batches.h"
#include "data/text_dataset.h"
#include "support/config.h"

namespace tessel::train {

struct DataConfig {
  std::string name = "";  // "fashion_mnist" | "mnist" | "text" | "synthetic"
  int64_t batch_size = 128;
  int64_t eval_batch_size = 1000;
  std::string path = "";  // images: the folder; text: the file
  // text
  int64_t block_size = 0;  // T, the tokens of one window
  double val_fraction = 0.1;
  int64_t eval_batches = 20;
  // text, optional: the personal data in the file is replaced by keyed pseudonyms
  // (secure/anonymise.h) before training; the key from this file, names from that list.
  std::string anonymise_key_file = "";
  std::string anonymise_names = "";
  // synthetic
  Shape shape = {};  // of one example, e.g. {3, 32, 32}
  int64_t classes = 10;
  int64_t samples = 1024;
  int64_t eval_samples = 256;
};

// Reads and checks the [data] table; every error names the key and what is allowed.
Expected<DataConfig> parse_data_config(const Config& table);

// What the model learns: a label per example, or the next token at every position.
enum class DataTask { kClassification, kLanguageModel };

class DataSource {
 public:
  // Loads (or generates) the data; `source` is the config file, for messages.
  static Expected<std::unique_ptr<DataSource>> open(const DataConfig& config, uint64_t seed,
                                                    const std::string& source);
  virtual ~DataSource() = default;

  virtual DataTask task() const = 0;
  // One example's shape ({28, 28}; {T} for text) and the number of classes (the vocabulary).
  virtual Shape example_shape() const = 0;
  virtual int64_t classes() const = 0;

  // Training batches, forever; restore() a checkpoint's position to continue from it.
  virtual Expected<std::unique_ptr<BatchSource>> train_batches() = 0;
  // Training batches that make one pass over the data; 0 when the data has no epochs (random
  // windows), in which case a run is measured in steps.
  virtual int64_t batches_per_epoch() const = 0;
  // A fresh source of the evaluation batches, the same ones at every call; eval_batch_count()
  // of them make one evaluation.
  virtual Expected<std::unique_ptr<BatchSource>> eval_batches() = 0;
  virtual int64_t eval_batch_count() const = 0;

  // What throughput counts: "samples" (examples) or "tokens", and how many are in a batch.
  virtual std::string throughput_unit() const { return "samples"; }
  virtual int64_t throughput_per_batch() const = 0;
  // The character dataset, for decoding samples: text only (nullptr otherwise).
  virtual const CharDataset* text() const { return nullptr; }
};

}  // namespace tessel::train
