// The tuning database: what `tessel tune` measured, in one SQLite file, and what the op library
// reads back to pick a kernel's specialisation for a shape on a device.
//
//   TESSEL_ASSIGN_OR_RETURN(auto db, TuneDb::open(default_tune_db_path()));
//   TESSEL_TRY(db->record(trial));                      // one measured (or failed) trial
//   TESSEL_ASSIGN_OR_RETURN(auto best, db->best(key));  // the fastest good trial per shape
//
// A row is one trial: the key (kernel, hash of its source, device fingerprint, dtype, the
// kernel's parameters that are not tuned, exact shape and its power-of-two bucket), the
// specialisation tried ("BK=384 BM=192 BN=256") and how it went (ok with its time, or
// compile_error / crash / wrong / timeout with a detail). The file is opened in WAL mode with a
// busy timeout and every write is one transaction, so several tuners (threads or processes) may
// write at once. A file that is not SQLite, or SQLite without tessel's format marker, is an error
// naming it.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "support/status.h"

struct sqlite3;

namespace tessel::tune {

// Where a trial's result belongs.
struct TuneKey {
  std::string kernel;          // "gemm"
  std::string source_hash;     // hash of the kernel's .tile file
  std::string device;          // device_fingerprint() of the device it ran on
  std::string dtype;           // the kernel's T: "f32", "bf16"
  std::string fixed;           // the kernel's other, untuned parameters: "BIAS=1" (sorted), or ""
  std::vector<int64_t> shape;  // the kernel's sizes in order of appearance (gemm: M, K, N)
};

struct Trial {
  TuneKey key;
  std::string params;  // the tuned parameters, params_string()
  std::string status;  // "ok", "compile_error", "crash", "wrong", "timeout"
  double seconds = 0;  // per launch, when ok
  std::string detail;  // why it failed, when it did
};

// "2048x384x1152"; the bucket rounds each size up to a power of two: "2048x512x2048".
std::string shape_string(const std::vector<int64_t>& shape);
std::string bucket_string(const std::vector<int64_t>& shape);
Expected<std::vector<int64_t>> parse_shape(const std::string& text);
// "BK=384 BM=192 BN=256" (names sorted) and back.
std::string params_string(const std::map<std::string, std::string>& params);
std::map<std::string, std::string> parse_params(const std::string& text);

// $TESSEL_TUNE_DB, else $XDG_CACHE_HOME/tessel/tune.db, else ~/.cache/tessel/tune.db.
std::string default_tune_db_path();

// How a chosen trial's detail starts ("chosen: faster than the defaults ...").
inline constexpr const char* kChosenPrefix = "chosen:";

class TuneDb {
 public:
  // Opens (creating it and its folder when missing) the database at `path`.
  static Expected<std::unique_ptr<TuneDb>> open(const std::string& path);
  ~TuneDb();
  TuneDb(const TuneDb&) = delete;
  TuneDb& operator=(const TuneDb&) = delete;

  const std::string& path() const { return path_; }

  // Adds a trial, replacing an earlier one of the same key and specialisation.
  Status record(const Trial& trial);
  Status record_all(const std::vector<Trial>& trials);  // in one transaction

  // The tuner's choice for its key and shape: an ok trial whose detail starts with
  // kChosenPrefix. Any earlier choice for the same key and shape stays as a plain trial (its
  // detail gains "earlier "), so a shape has at most one. One transaction.
  Status choose(const Trial& trial);

  // The choice for each shape of (kernel, source_hash, device, dtype, fixed); for a shape
  // without one, the fastest of the re-measured trials (detail "median of N runs", from older
  // tuners) or else of all ok trials; key.shape is ignored.
  Expected<std::vector<Trial>> best(const TuneKey& key) const;
  // Every trial, in a stable order (kernel, device, shape, params).
  Expected<std::vector<Trial>> all() const;

  // JSON lines, one trial per line; importing keeps the file's rows (replacing equal keys).
  Status export_json(const std::string& file) const;
  Status import_json(const std::string& file);

 private:
  TuneDb(sqlite3* db, std::string path) : db_(db), path_(std::move(path)) {}
  Status write(const TuneKey* unchoose, const std::vector<Trial>& trials);
  Expected<std::vector<Trial>> query(const std::string& sql,
                                     const std::vector<std::string>& binds) const;
  sqlite3* db_;
  std::string path_;
};

}  // namespace tessel::tune
