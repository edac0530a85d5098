// What the op library asks at each launch of a tunable kernel: the specialisation tuned for this
// shape on this device. The exact shape's best trial when the database has one, else the best
// of the nearest tuned shape (same kernel, device, dtype and untuned parameters; distance is the
// sum of |log2| size ratios), else nothing (the kernel's defaults). Answers are cached per key in
// memory, so a launch after the first costs one hash-map lookup.
//
//   TESSEL_ASSIGN_OR_RETURN(std::string params, TuneChoices::global().choose(key));
//   if (!params.empty()) ...  // "BK=384 BM=192 BN=256"
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "support/status.h"
#include "tune/tune_db.h"

namespace tessel::tune {

// The params text of the best trial for `shape` among `best` (one per shape), or "".
std::string nearest_choice(const std::vector<Trial>& best, const std::vector<int64_t>& shape);

class TuneChoices {
 public:
  // The process's choices, from default_tune_db_path() (read only if the file exists).
  static TuneChoices& global();

  // Reads `path` from now on ("" : no database); forgets what was cached.
  void use_database(const std::string& path);
  // Whether there is a database to read: when not, choose() is never worth calling.
  bool active() const { return active_.load(std::memory_order_relaxed); }
  // For benchmark headers: the file read, or "none (no file at PATH)" / "none".
  std::string describe();
  // The chosen params text for `key` (with its shape), "" for the kernel's defaults.
  Expected<std::string> choose(const TuneKey& key);

 private:
  TuneChoices();
  std::mutex mutex_;
  std::string path_;
  std::atomic<bool> active_{false};
  std::unique_ptr<TuneDb> db_;
  std::unordered_map<std::string, std::vector<Trial>> best_;  // per key without its shape
  std::unordered_map<std::string, std::string> chosen_;       // per key with its shape
};

}  // namespace tessel::tune
