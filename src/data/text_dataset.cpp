// Character-level text dataset: vocabulary, encoding and the train/validation split.
#include "data/text_dataset.h"

#include <cmath>

#include "support/atomic_file.h"

namespace tessel {

Expected<CharDataset> CharDataset::from_file(const std::string& path, double train_fraction) {
  Expected<std::string> text = read_file(path);
  if (!text) return text.status().with_context("text dataset");
  return from_text(*text, train_fraction, path);
}

Expected<CharDataset> CharDataset::from_text(std::string_view text, double train_fraction,
                                             std::string source) {
  if (text.empty()) return invalid_argument("text dataset {}: the text is empty", source);
  if (!(train_fraction > 0.0 && train_fraction <= 1.0)) {
    return invalid_argument("text dataset {}: train_fraction {} is not in (0, 1]", source,
                            train_fraction);
  }
  CharDataset ds;
  ds.source_ = std::move(source);
  bool present[256] = {};
  for (char c : text)
    present[static_cast<unsigned char>(c)] = true;
  for (int b = 0; b < 256; ++b) {
    ds.token_of_byte_[b] = -1;
    if (present[b]) {
      ds.token_of_byte_[b] = static_cast<int16_t>(ds.vocabulary_.size());
      ds.vocabulary_.push_back(static_cast<char>(b));
    }
  }
  const auto n_train = static_cast<size_t>(std::floor(train_fraction * text.size()));
  ds.train_.reserve(n_train);
  ds.val_.reserve(text.size() - n_train);
  for (size_t i = 0; i < text.size(); ++i) {
    const auto token = static_cast<uint8_t>(ds.token_of_byte_[static_cast<unsigned char>(text[i])]);
    (i < n_train ? ds.train_ : ds.val_).push_back(token);
  }
  return ds;
}

Expected<std::vector<int64_t>> CharDataset::encode(std::string_view text) const {
  std::vector<int64_t> tokens(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const int16_t token = token_of_byte_[static_cast<unsigned char>(text[i])];
    if (token < 0) {
      return invalid_argument("encode: byte 0x{:02x} at position {} is not in the vocabulary of {}",
                              static_cast<unsigned char>(text[i]), i, source_);
    }
    tokens[i] = token;
  }
  return tokens;
}

Expected<std::string> CharDataset::decode(const std::vector<int64_t>& tokens) const {
  std::string text(tokens.size(), '\0');
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] >= vocab_size()) {
      return out_of_range("decode: token {} at position {} is outside the vocabulary [0, {})",
                          tokens[i], i, vocab_size());
    }
    text[i] = vocabulary_[static_cast<size_t>(tokens[i])];
  }
  return text;
}

Expected<const std::vector<uint8_t>*> CharDataset::split(std::string_view name) const {
  if (name == "train") return &train_;
  if (name == "val") return &val_;
  return invalid_argument("text dataset split '{}': expected 'train' or 'val'", name);
}

}  // namespace tessel
