// Tuned specialisations looked up per launch (see choices.h).
#include "tune/choices.h"

#include <cmath>
#include <filesystem>

namespace tessel::tune {

namespace {

std::string family_key(const TuneKey& k) {
  return k.kernel + "|" + k.source_hash + "|" + k.device + "|" + k.dtype + "|" + k.fixed;
}

}  // namespace

std::string nearest_choice(const std::vector<Trial>& best, const std::vector<int64_t>& shape) {
  const Trial* pick = nullptr;
  double pick_distance = 0;
  for (const Trial& t : best) {
    if (t.key.shape.size() != shape.size()) continue;
    double d = 0;
    for (size_t i = 0; i < shape.size(); ++i)
      d += std::fabs(std::log2(static_cast<double>(std::max<int64_t>(shape[i], 1))) -
                     std::log2(static_cast<double>(std::max<int64_t>(t.key.shape[i], 1))));
    // Ties go to the first in the database's order, so every reader picks the same.
    if (pick == nullptr || d < pick_distance) {
      pick = &t;
      pick_distance = d;
    }
  }
  return pick ? pick->params : "";
}

TuneChoices& TuneChoices::global() {
  static TuneChoices* choices = new TuneChoices();  // never destroyed: launches may run at exit
  return *choices;
}

TuneChoices::TuneChoices() {
  use_database(default_tune_db_path());
}

void TuneChoices::use_database(const std::string& path) {
  std::lock_guard<std::mutex> lock(mutex_);
  path_ = path;
  db_.reset();
  best_.clear();
  chosen_.clear();
  std::error_code ec;
  active_ = !path.empty() && std::filesystem::exists(path, ec);
}

std::string TuneChoices::describe() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (active()) return path_;
  return path_.empty() ? "none" : "none (no file at " + path_ + ")";
}

Expected<std::string> TuneChoices::choose(const TuneKey& key) {
  std::string full = family_key(key) + "|" + shape_string(key.shape);
  std::lock_guard<std::mutex> lock(mutex_);
  if (auto it = chosen_.find(full); it != chosen_.end()) return it->second;
  const std::string family = family_key(key);
  auto best = best_.find(family);
  if (best == best_.end()) {
    if (!db_) {
      TESSEL_ASSIGN_OR_RETURN(db_, TuneDb::open(path_));
    }
    TESSEL_ASSIGN_OR_RETURN(std::vector<Trial> rows, db_->best(key));
    best = best_.emplace(family, std::move(rows)).first;
  }
  std::string params = nearest_choice(best->second, key.shape);
  chosen_.emplace(std::move(full), params);
  return params;
}

}  // namespace tessel::tune
