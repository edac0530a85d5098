// A character-level language-modelling dataset from any text file (Tiny Shakespeare, as in
// nanoGPT / char-rnn): the vocabulary is the sorted set of distinct bytes in the file, a token is
// a byte's index in it, the first `train_fraction` of the tokens train and the rest validate.
//
//   TESSEL_ASSIGN_OR_RETURN(CharDataset text, CharDataset::from_file("input.txt"));
//   text.vocab_size()                        // 65 for Tiny Shakespeare
//   TESSEL_ASSIGN_OR_RETURN(std::vector<int64_t> ids, text.encode("To be"));
//   TESSEL_ASSIGN_OR_RETURN(std::string back, text.decode(ids));   // "To be"
//   text.split("train")                      // token ids, one byte each
//
// Batches of random (x, y) windows come from TextBatches (batches.h).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "support/status.h"

namespace tessel {

class CharDataset {
 public:
  // A missing or empty file is an error naming it. 0 < train_fraction <= 1.
  static Expected<CharDataset> from_file(const std::string& path, double train_fraction = 0.9);
  static Expected<CharDataset> from_text(std::string_view text, double train_fraction = 0.9,
                                         std::string source = "<text>");

  // The distinct bytes of the text, ascending; token i stands for vocabulary()[i].
  const std::string& vocabulary() const { return vocabulary_; }
  int64_t vocab_size() const { return static_cast<int64_t>(vocabulary_.size()); }
  // A character outside the vocabulary is an error naming it and its position.
  Expected<std::vector<int64_t>> encode(std::string_view text) const;
  Expected<std::string> decode(const std::vector<int64_t>& tokens) const;

  // The tokens of "train" (the first floor(train_fraction * n)) or "val" (the rest).
  Expected<const std::vector<uint8_t>*> split(std::string_view name) const;
  const std::string& source() const { return source_; }

 private:
  std::string source_;
  std::string vocabulary_;
  int16_t token_of_byte_[256];  // -1 for bytes not in the vocabulary
  std::vector<uint8_t> train_, val_;
};

}  // namespace tessel
