// The trainer's data sources (see data_source.h): idx image folders, char-level text, synthetic
// images.
#include "train/data_source.h"

#include <cmath>
#include <filesystem>

#include <sodium.h>

#include "data/mnist.h"
#include "secure/anonymise.h"
#include "support/atomic_file.h"
#include "support/random.h"
#include "train/config_keys.h"

namespace tessel::train {
namespace {

// The generator streams of a run's seed (Pcg32(seed, stream)); 1 is the weights' (trainer.cpp).
constexpr uint64_t kTextTrainStream = 2;
constexpr uint64_t kTextEvalStream = 3;
constexpr uint64_t kSyntheticTrainStream = 4;
constexpr uint64_t kSyntheticEvalStream = 5;

// Standardised u8 pixels drawn uniformly from 0..255: mean 127.5 / 255, std sqrt((256^2 - 1) / 12)
// / 255, so the inputs have mean 0 and variance 1.
const float kUniformPixelMean = 0.5f;
const float kUniformPixelStd = static_cast<float>(std::sqrt((256.0 * 256.0 - 1.0) / 12.0) / 255.0);

// ---- idx image folders (Fashion-MNIST, MNIST) ----

class ImageFolderSource : public DataSource {
 public:
  ImageFolderSource(const DataConfig& config, uint64_t seed, ImageDataset train, ImageDataset test,
                    float mean, float std)
      : config_(config),
        seed_(seed),
        train_(std::move(train)),
        test_(std::move(test)),
        mean_(mean),
        std_(std) {}

  DataTask task() const override { return DataTask::kClassification; }
  Shape example_shape() const override {
    Shape s = train_.images.shape();
    return Shape(s.begin() + 1, s.end());
  }
  int64_t classes() const override { return train_.num_classes; }
  int64_t throughput_per_batch() const override { return config_.batch_size; }

  Expected<std::unique_ptr<BatchSource>> train_batches() override {
    TESSEL_ASSIGN_OR_RETURN(std::unique_ptr<ImageBatches> b,
                            ImageBatches::make(train_, train_options()));
    return std::unique_ptr<BatchSource>(std::move(b));
  }
  int64_t batches_per_epoch() const override {
    return train_.size() / config_.batch_size;  // drop_last
  }
  Expected<std::unique_ptr<BatchSource>> eval_batches() override {
    TESSEL_ASSIGN_OR_RETURN(std::unique_ptr<ImageBatches> b,
                            ImageBatches::make(test_, eval_options()));
    return std::unique_ptr<BatchSource>(std::move(b));
  }
  int64_t eval_batch_count() const override {
    const int64_t b = config_.eval_batch_size;
    return (test_.size() + b - 1) / b;
  }

  // The checks ImageBatches::make would make at the first call, made when the source opens.
  Status check() {
    TESSEL_TRY(ImageBatches::make(train_, train_options()));
    return ImageBatches::make(test_, eval_options()).status();
  }

 private:
  ImageBatchOptions train_options() const {
    return {.batch_size = config_.batch_size,
            .shuffle = true,
            .seed = seed_,
            .drop_last = true,
            .mean = mean_,
            .std = std_};
  }
  ImageBatchOptions eval_options() const {
    return {.batch_size = config_.eval_batch_size, .shuffle = false, .mean = mean_, .std = std_};
  }

  DataConfig config_;
  uint64_t seed_;
  ImageDataset train_, test_;  // tensors share storage: copies into batch sources are cheap
  float mean_, std_;
};

Expected<std::unique_ptr<DataSource>> open_image_folder(const DataConfig& c, uint64_t seed,
                                                        const std::string& source) {
  Expected<ImageDataset> train = load_mnist(c.path, "train");
  if (!train.ok()) return train.status().with_context("{}: [data]", source);
  Expected<ImageDataset> test = load_mnist(c.path, "test");
  if (!test.ok()) return test.status().with_context("{}: [data]", source);
  const bool fashion = c.name == "fashion_mnist";
  auto data = std::make_unique<ImageFolderSource>(c, seed, std::move(*train), std::move(*test),
                                                  fashion ? kFashionMnistMean : kMnistMean,
                                                  fashion ? kFashionMnistStd : kMnistStd);
  Status ok = data->check();
  if (!ok.ok()) return ok.with_context("{}: [data]", source);
  return std::unique_ptr<DataSource>(std::move(data));
}

// ---- synthetic images ----

Expected<ImageDataset> random_images(const Shape& shape, int64_t count, int64_t classes,
                                     Pcg32 rng) {
  Shape full{count};
  full.insert(full.end(), shape.begin(), shape.end());
  ImageDataset d;
  d.num_classes = classes;
  d.images_path = d.labels_path = "<synthetic>";
  TESSEL_ASSIGN_OR_RETURN(d.images, Tensor::empty(full, DType::kU8));
  TESSEL_ASSIGN_OR_RETURN(d.labels, Tensor::empty({count}, DType::kI64));
  uint8_t* pixels = d.images.data<uint8_t>();
  for (int64_t i = 0, n = d.images.numel(); i < n; ++i)
    pixels[i] = static_cast<uint8_t>(rng.next_u32() >> 24);
  int64_t* labels = d.labels.data<int64_t>();
  for (int64_t i = 0; i < count; ++i)
    labels[i] = static_cast<int64_t>(rng.below_u64(static_cast<uint64_t>(classes)));
  return d;
}

Expected<std::unique_ptr<DataSource>> open_synthetic(const DataConfig& c, uint64_t seed,
                                                     const std::string& source) {
  if (c.samples < c.batch_size)
    return invalid_argument(
        "{}: key 'data.samples': {} samples make no full batch of batch_size {}", source, c.samples,
        c.batch_size);
  TESSEL_ASSIGN_OR_RETURN(ImageDataset train, random_images(c.shape, c.samples, c.classes,
                                                            Pcg32(seed, kSyntheticTrainStream)));
  TESSEL_ASSIGN_OR_RETURN(ImageDataset test, random_images(c.shape, c.eval_samples, c.classes,
                                                           Pcg32(seed, kSyntheticEvalStream)));
  auto data = std::make_unique<ImageFolderSource>(c, seed, std::move(train), std::move(test),
                                                  kUniformPixelMean, kUniformPixelStd);
  Status ok = data->check();
  if (!ok.ok()) return ok.with_context("{}: [data]", source);
  return std::unique_ptr<DataSource>(std::move(data));
}

// ---- char-level text ----

class TextSource : public DataSource {
 public:
  TextSource(const DataConfig& config, uint64_t seed, CharDataset text)
      : config_(config), seed_(seed), text_(std::move(text)) {}

  DataTask task() const override { return DataTask::kLanguageModel; }
  Shape example_shape() const override { return {config_.block_size}; }
  int64_t classes() const override { return text_.vocab_size(); }
  std::string throughput_unit() const override { return "tokens"; }
  int64_t throughput_per_batch() const override { return config_.batch_size * config_.block_size; }
  const CharDataset* text() const override { return &text_; }

  Expected<std::unique_ptr<BatchSource>> train_batches() override {
    TESSEL_ASSIGN_OR_RETURN(
        std::unique_ptr<TextBatches> b,
        TextBatches::make(text_, "train", config_.batch_size, config_.block_size, 0));
    // The generator of the run's seed on a stream of its own (TextBatches' seed is a stream-0
    // seed; the position holds the whole state, so restoring it is all it takes).
    TESSEL_TRY(b->restore({0, 0, Pcg32(seed_, kTextTrainStream)}));
    return std::unique_ptr<BatchSource>(std::move(b));
  }
  int64_t batches_per_epoch() const override { return 0; }
  Expected<std::unique_ptr<BatchSource>> eval_batches() override {
    TESSEL_ASSIGN_OR_RETURN(
        std::unique_ptr<TextBatches> b,
        TextBatches::make(text_, "val", config_.eval_batch_size, config_.block_size, 0));
    TESSEL_TRY(b->restore({0, 0, Pcg32(seed_, kTextEvalStream)}));
    return std::unique_ptr<BatchSource>(std::move(b));
  }
  int64_t eval_batch_count() const override { return config_.eval_batches; }

 private:
  DataConfig config_;
  uint64_t seed_;
  CharDataset text_;
};

// The text file with its personal data replaced by pseudonyms, in memory only.
Expected<CharDataset> anonymised_text(const DataConfig& c) {
  TESSEL_ASSIGN_OR_RETURN(secure::SecretKey key,
                          secure::SecretKey::from_file(c.anonymise_key_file));
  secure::AnonymiseOptions options;
  if (!c.anonymise_names.empty()) {
    TESSEL_ASSIGN_OR_RETURN(options.names, secure::read_name_list(c.anonymise_names));
  }
  TESSEL_ASSIGN_OR_RETURN(std::string raw, read_file(c.path));
  secure::Anonymiser anonymiser(key, options);
  std::string clean = anonymiser.anonymise(raw);
  sodium_memzero(raw.data(), raw.size());
  return CharDataset::from_text(clean, 1.0 - c.val_fraction);
}

Expected<std::unique_ptr<DataSource>> open_text(const DataConfig& c, uint64_t seed,
                                                const std::string& source) {
  namespace fs = std::filesystem;
  const fs::path path(c.path);
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) {
    std::string where;
    if (path.is_relative()) {
      where = fmt::format(" (looked for {}, relative to the working directory {})",
                          fs::absolute(path, ec).lexically_normal().string(),
                          fs::current_path(ec).string());
    }
    return not_found("{}: key 'data.path': no text file '{}'{}", source, c.path, where);
  }
  Expected<CharDataset> text = c.anonymise_key_file.empty()
                                   ? CharDataset::from_file(c.path, 1.0 - c.val_fraction)
                                   : anonymised_text(c);
  if (!text.ok()) return text.status().with_context("{}: [data]", source);
  auto data = std::make_unique<TextSource>(c, seed, std::move(*text));
  // Both splits must hold a window: the errors name the file, the split and the sizes.
  Status train = data->train_batches().status(), eval = data->eval_batches().status();
  if (!train.ok()) return train.with_context("{}: [data]", source);
  if (!eval.ok()) return eval.with_context("{}: [data]", source);
  return std::unique_ptr<DataSource>(std::move(data));
}

}  // namespace

Expected<DataConfig> parse_data_config(const Config& t) {
  DataConfig d;
  TESSEL_ASSIGN_OR_RETURN(d.name,
                          get_choice(t, "name", {"fashion_mnist", "mnist", "text", "synthetic"}));
  const std::vector<std::string> common{"name", "batch_size", "eval_batch_size"};
  auto keys = [&](std::vector<std::string> own) {
    own.insert(own.begin(), common.begin(), common.end());
    return t.check_keys(own);
  };
  if (d.name == "fashion_mnist" || d.name == "mnist") {
    TESSEL_TRY(keys({"path"}));
    if (d.name == "fashion_mnist") {
      TESSEL_ASSIGN_OR_RETURN(d.path, t.get_or<std::string>("path", kFashionMnistDir));
    } else {
      TESSEL_ASSIGN_OR_RETURN(d.path, t.get<std::string>("path"));
    }
  } else if (d.name == "text") {
    TESSEL_TRY(keys({"path", "block_size", "val_fraction", "eval_batches", "anonymise_key_file",
                     "anonymise_names"}));
    TESSEL_ASSIGN_OR_RETURN(d.path, t.get<std::string>("path"));
    TESSEL_ASSIGN_OR_RETURN(d.anonymise_key_file, t.get_or<std::string>("anonymise_key_file", ""));
    TESSEL_ASSIGN_OR_RETURN(d.anonymise_names, t.get_or<std::string>("anonymise_names", ""));
    if (d.anonymise_key_file.empty() && !d.anonymise_names.empty())
      return invalid_argument("{}: key '{}' needs '{}' (the pseudonyms' key)", t.source(),
                              full_key(t, "anonymise_names"), full_key(t, "anonymise_key_file"));
    TESSEL_ASSIGN_OR_RETURN(d.block_size, t.get<int64_t>("block_size"));
    if (d.block_size < 1)
      return invalid_argument("{}: key '{}': must be >= 1, got {}", t.source(),
                              full_key(t, "block_size"), d.block_size);
    TESSEL_ASSIGN_OR_RETURN(d.val_fraction, t.get_or<double>("val_fraction", d.val_fraction));
    if (!(d.val_fraction > 0.0 && d.val_fraction < 1.0))
      return invalid_argument("{}: key '{}': must be in (0, 1), got {}", t.source(),
                              full_key(t, "val_fraction"), d.val_fraction);
    TESSEL_ASSIGN_OR_RETURN(d.eval_batches,
                            get_at_least<int64_t>(t, "eval_batches", d.eval_batches, 1));
  } else {  // synthetic
    TESSEL_TRY(keys({"shape", "classes", "samples", "eval_samples"}));
    TESSEL_ASSIGN_OR_RETURN(d.shape, t.get<std::vector<int64_t>>("shape"));
    if (d.shape.empty() ||
        std::any_of(d.shape.begin(), d.shape.end(), [](int64_t n) { return n < 1; }))
      return invalid_argument("{}: key '{}': expected a list of sizes >= 1, e.g. [3, 32, 32]",
                              t.source(), full_key(t, "shape"));
    TESSEL_ASSIGN_OR_RETURN(d.classes, get_at_least<int64_t>(t, "classes", d.classes, 2));
    TESSEL_ASSIGN_OR_RETURN(d.samples, get_at_least<int64_t>(t, "samples", d.samples, 1));
    TESSEL_ASSIGN_OR_RETURN(d.eval_samples,
                            get_at_least<int64_t>(t, "eval_samples", d.eval_samples, 1));
  }
  TESSEL_ASSIGN_OR_RETURN(d.batch_size, get_at_least<int64_t>(t, "batch_size", d.batch_size, 1));
  TESSEL_ASSIGN_OR_RETURN(d.eval_batch_size,
                          get_at_least<int64_t>(t, "eval_batch_size", d.eval_batch_size, 1));
  return d;
}

Expected<std::unique_ptr<DataSource>> DataSource::open(const DataConfig& config, uint64_t seed,
                                                       const std::string& source) {
  if (config.name == "text") return open_text(config, seed, source);
  if (config.name == "synthetic") return open_synthetic(config, seed, source);
  return open_image_folder(config, seed, source);
}

}  // namespace tessel::train
