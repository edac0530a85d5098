// Checkpoint bundle over safetensors.
#include "io/checkpoint.h"

#include <charconv>

#include "secure/encrypted_file.h"

namespace tessel {

Expected<std::string> Checkpoint::get(const std::string& key) const {
  auto it = metadata.find(key);
  if (it != metadata.end()) return it->second;
  std::string keys;
  for (const auto& [k, v] : metadata)
    keys += (keys.empty() ? "" : ", ") + k;
  return not_found("checkpoint {}: no metadata key '{}' (present: {})",
                   path.empty() ? "<unsaved>" : path, key, keys);
}

Expected<int64_t> Checkpoint::get_int(const std::string& key) const {
  TESSEL_ASSIGN_OR_RETURN(std::string text, get(key));
  int64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size()) {
    return invalid_argument("checkpoint {}: metadata '{}' is '{}', expected an integer", path, key,
                            text);
  }
  return value;
}

Expected<int64_t> Checkpoint::get_int(const std::string& key, int64_t min, int64_t max) const {
  TESSEL_ASSIGN_OR_RETURN(int64_t value, get_int(key));
  if (value < min || value > max)
    return out_of_range("checkpoint {}: metadata '{}' is {}, expected a value in [{}, {}]", path,
                        key, value, min, max);
  return value;
}

Status save_checkpoint(const std::string& path, const Checkpoint& checkpoint,
                       const secure::SecretKey* key) {
  NamedTensors all = checkpoint.model;
  for (const auto& [name, tensor] : checkpoint.model) {
    if (name.starts_with(kOptimizerPrefix)) {
      return invalid_argument(
          "save checkpoint {}: model tensor '{}' starts with '{}', which marks "
          "optimizer state",
          path, name, kOptimizerPrefix);
    }
  }
  for (const auto& [name, tensor] : checkpoint.optimizer)
    all.emplace(kOptimizerPrefix + name, tensor);
  if (checkpoint.metadata.contains("format"))
    return invalid_argument("save checkpoint {}: metadata key 'format' is reserved", path);
  StringMap metadata = checkpoint.metadata;
  metadata["format"] = kCheckpointFormat;
  return save_safetensors(path, all, metadata, key);
}

Expected<Checkpoint> load_checkpoint(const std::string& path, const secure::SecretKey* key) {
  if (!key && secure::is_encrypted_file(path))
    return failed_precondition(
        "{}: the checkpoint is encrypted; give its key ([checkpoint] key_file or key_env, or "
        "--key-file)",
        path);
  TESSEL_ASSIGN_OR_RETURN(SafetensorsFile file, load_safetensors(path, key));
  auto format = file.metadata.find("format");
  if (format == file.metadata.end() ||
      (format->second != kCheckpointFormat && format->second != kCheckpointFormatV1)) {
    return invalid_argument(
        "{}: not a tessel checkpoint: expected __metadata__ 'format' = '{}', found {}", path,
        kCheckpointFormat,
        format == file.metadata.end() ? std::string("no 'format'") : "'" + format->second + "'");
  }
  if (format->second == kCheckpointFormat && !file.checksummed)
    return invalid_argument(
        "{}: a {} checkpoint without checksums (header key "
        "'tessel.header_xxh64'): the file is damaged",
        path, kCheckpointFormat);
  Checkpoint ckpt;
  ckpt.path = path;
  file.metadata.erase(format);
  ckpt.metadata = std::move(file.metadata);
  for (auto& [name, tensor] : file.tensors) {
    if (name.starts_with(kOptimizerPrefix)) {
      ckpt.optimizer.emplace(name.substr(std::string_view(kOptimizerPrefix).size()),
                             std::move(tensor));
    } else {
      ckpt.model.emplace(name, std::move(tensor));
    }
  }
  return ckpt;
}

}  // namespace tessel
