// Training checkpoints: everything a resumed run needs, in one safetensors file (safetensors.h)
// written atomically, so a crash mid-save leaves the previous checkpoint whole.
//
//   Checkpoint ckpt;
//   ckpt.model = {{"fc.weight", w}, {"fc.bias", b}};                 // PyTorch state_dict names
//   ckpt.optimizer = {{"fc.weight.exp_avg", m}, ...};   // stored as "optimizer.fc.weight.exp_avg"
//   ckpt.metadata = {{"step", "1200"}, {"rng.dropout", rng.state_string()},
//                    {"data.train", batches.position().to_string()}, {"config.hash", hash}};
//   TESSEL_TRY(save_checkpoint("run/ckpt.safetensors", ckpt));
//   TESSEL_ASSIGN_OR_RETURN(Checkpoint back, load_checkpoint("run/ckpt.safetensors"));
//   TESSEL_ASSIGN_OR_RETURN(int64_t step, back.get_int("step"));
//
// In the file, model tensors keep their names (so `safetensors.torch.load_file` gives a state
// dict that PyTorch's load_state_dict takes, once the "optimizer." entries are left out),
// optimizer tensors are prefixed "optimizer.", and the metadata goes into "__metadata__" with
// "format" = "tessel.checkpoint.v1". The API is maps of name -> tensor and a map of strings;
// io/training_checkpoint.h gives them their meaning for a model, its optimizer (the names of
// Optimizer::named_state()) and the step, and is what the trainer uses.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "io/safetensors.h"

namespace tessel {

// v2 files carry checksums (safetensors.h) and are refused without them; v1 files (written
// before checksums) still load.
inline constexpr const char* kCheckpointFormat = "tessel.checkpoint.v2";
inline constexpr const char* kCheckpointFormatV1 = "tessel.checkpoint.v1";
inline constexpr const char* kOptimizerPrefix = "optimizer.";

struct Checkpoint {
  NamedTensors model;
  NamedTensors optimizer;
  StringMap metadata;
  std::string path;  // set by load_checkpoint, for messages

  // A metadata value; a missing key is an error naming the key, the file and the keys present.
  Expected<std::string> get(const std::string& key) const;
  Expected<int64_t> get_int(const std::string& key) const;
  // The same, refusing a value outside [min, max] with an error naming the key and the range.
  Expected<int64_t> get_int(const std::string& key, int64_t min, int64_t max) const;
};

// A model tensor named "optimizer.*", or a metadata key "format", is an error (they would be
// read back as something else). With a key the file is encrypted (safetensors.h).
Status save_checkpoint(const std::string& path, const Checkpoint& checkpoint,
                       const secure::SecretKey* key = nullptr);
// A safetensors file without "format" = kCheckpointFormat (or v1) is an error that says so, as is
// a v2 file without its checksums or with one that does not match, an encrypted file without a
// key, or a plain one when a key is given (it could not be authenticated).
Expected<Checkpoint> load_checkpoint(const std::string& path,
                                     const secure::SecretKey* key = nullptr);

}  // namespace tessel
