// Image and text batch sources, and DataPosition's text form.
#include "data/batches.h"

#include <charconv>
#include <cstring>

namespace tessel {

std::string DataPosition::to_string() const {
  return fmt::format("epoch={} batch={} rng={}", epoch, batch, rng.state_string());
}

Expected<DataPosition> DataPosition::parse(std::string_view text) {
  const std::string_view whole = text;
  const auto bad = [whole] {
    return invalid_argument(
        "data position '{}': expected 'epoch=<n> batch=<n> rng=pcg32:<hex>:<hex>'", whole);
  };
  DataPosition pos;
  const auto number = [&](std::string_view key, uint64_t& value) -> bool {
    if (text.substr(0, key.size()) != key) return false;
    text.remove_prefix(key.size());
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (ec != std::errc() || end == text.data()) return false;
    text.remove_prefix(static_cast<size_t>(end - text.data()));
    return true;
  };
  if (!number("epoch=", pos.epoch) || !number(" batch=", pos.batch) || text.substr(0, 5) != " rng=")
    return bad();
  Expected<Pcg32> rng = Pcg32::from_state_string(text.substr(5));
  if (!rng) return bad();
  pos.rng = *rng;
  return pos;
}

// ---- ImageBatches ----

Expected<std::unique_ptr<ImageBatches>> ImageBatches::make(ImageDataset dataset,
                                                           ImageBatchOptions options) {
  if (options.batch_size < 1)
    return invalid_argument("batch size {}: expected at least 1", options.batch_size);
  if (!dataset.images.defined() || dataset.images.dtype() != DType::kU8 ||
      dataset.images.rank() < 2 || dataset.labels.dtype() != DType::kI64 ||
      dataset.labels.rank() != 1 || dataset.labels.size(0) != dataset.images.size(0)) {
    return invalid_argument("ImageBatches: expected u8 images [N, ...] and i64 labels [N]");
  }
  if (dataset.size() == 0) return invalid_argument("ImageBatches: the dataset is empty");
  if (options.drop_last && dataset.size() < options.batch_size) {
    return invalid_argument("ImageBatches: {} examples make no full batch of {} (drop_last)",
                            dataset.size(), options.batch_size);
  }
  if (!(options.std > 0.0f)) return invalid_argument("ImageBatches: std must be > 0");
  TESSEL_ASSIGN_OR_RETURN(dataset.images, dataset.images.to(cpu_device()));
  TESSEL_ASSIGN_OR_RETURN(dataset.images, dataset.images.contiguous());
  TESSEL_ASSIGN_OR_RETURN(dataset.labels, dataset.labels.to(cpu_device()));
  TESSEL_ASSIGN_OR_RETURN(dataset.labels, dataset.labels.contiguous());
  return std::unique_ptr<ImageBatches>(new ImageBatches(std::move(dataset), options));
}

int64_t ImageBatches::batches_per_epoch() const {
  const int64_t n = dataset_.size(), b = options_.batch_size;
  return options_.drop_last ? n / b : (n + b - 1) / b;
}

std::vector<int64_t> ImageBatches::epoch_order(uint64_t epoch) const {
  if (options_.shuffle) {
    Pcg32 rng(options_.seed, epoch);
    return shuffled_indices(dataset_.size(), rng);
  }
  std::vector<int64_t> order(static_cast<size_t>(dataset_.size()));
  for (size_t i = 0; i < order.size(); ++i)
    order[i] = static_cast<int64_t>(i);
  return order;
}

Status ImageBatches::restore(const DataPosition& position) {
  if (position.batch >= static_cast<uint64_t>(batches_per_epoch())) {
    return out_of_range("data position {}: an epoch of this dataset has {} batches",
                        position.to_string(), batches_per_epoch());
  }
  epoch_ = position.epoch;
  batch_ = position.batch;
  return ok_status();
}

Expected<Batch> ImageBatches::next() {
  if (order_epoch_ != epoch_) {
    order_ = epoch_order(epoch_);
    order_epoch_ = epoch_;
  }
  const int64_t n = dataset_.size();
  const int64_t begin = static_cast<int64_t>(batch_) * options_.batch_size;
  const int64_t count = std::min(options_.batch_size, n - begin);
  Shape input_shape = dataset_.images.shape();
  input_shape[0] = count;
  TESSEL_ASSIGN_OR_RETURN(Tensor inputs, Tensor::empty(input_shape, DType::kF32));
  TESSEL_ASSIGN_OR_RETURN(Tensor targets, Tensor::empty({count}, DType::kI64));
  const int64_t row = dataset_.images.numel() / n;
  const uint8_t* pixels = dataset_.images.data<uint8_t>();
  const int64_t* labels = dataset_.labels.data<int64_t>();
  float* x = inputs.data<float>();
  int64_t* y = targets.data<int64_t>();
  const float scale = 1.0f / (255.0f * options_.std), shift = -options_.mean / options_.std;
  for (int64_t i = 0; i < count; ++i) {
    const int64_t example = order_[static_cast<size_t>(begin + i)];
    const uint8_t* src = pixels + example * row;
    for (int64_t j = 0; j < row; ++j)
      x[i * row + j] = src[j] * scale + shift;
    y[i] = labels[example];
  }
  if (++batch_ == static_cast<uint64_t>(batches_per_epoch())) {
    ++epoch_;
    batch_ = 0;
  }
  return Batch{std::move(inputs), std::move(targets)};
}

// ---- TextBatches ----

Expected<std::unique_ptr<TextBatches>> TextBatches::make(const CharDataset& dataset,
                                                         std::string_view split, int64_t batch_size,
                                                         int64_t context, uint64_t seed) {
  TESSEL_ASSIGN_OR_RETURN(const std::vector<uint8_t>* tokens, dataset.split(split));
  if (batch_size < 1 || context < 1) {
    return invalid_argument("text batches: batch size {} and context {} must be at least 1",
                            batch_size, context);
  }
  if (static_cast<int64_t>(tokens->size()) < context + 1) {
    return invalid_argument(
        "text dataset {}: the {} split has {} tokens; a window of context {} needs at least {}",
        dataset.source(), split, tokens->size(), context, context + 1);
  }
  return std::unique_ptr<TextBatches>(new TextBatches(tokens, batch_size, context, seed));
}

Status TextBatches::restore(const DataPosition& position) {
  rng_ = position.rng;
  drawn_ = position.batch;
  return ok_status();
}

Expected<Batch> TextBatches::next() {
  TESSEL_ASSIGN_OR_RETURN(Tensor inputs, Tensor::empty({batch_size_, context_}, DType::kI64));
  TESSEL_ASSIGN_OR_RETURN(Tensor targets, Tensor::empty({batch_size_, context_}, DType::kI64));
  int64_t* x = inputs.data<int64_t>();
  int64_t* y = targets.data<int64_t>();
  const uint64_t starts = tokens_->size() - static_cast<uint64_t>(context_);
  for (int64_t b = 0; b < batch_size_; ++b) {
    const uint8_t* window = tokens_->data() + rng_.below_u64(starts);
    for (int64_t t = 0; t < context_; ++t) {
      x[b * context_ + t] = window[t];
      y[b * context_ + t] = window[t + 1];
    }
  }
  ++drawn_;
  return Batch{std::move(inputs), std::move(targets)};
}

}  // namespace tessel
