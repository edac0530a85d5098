// SQLite storage of tuning trials (see tune_db.h).
#include "tune/tune_db.h"

#include <sqlite3.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

namespace tessel::tune {

namespace {

// Written into every database this code creates; a file without it is someone else's.
constexpr const char* kFormat = "tessel-tune-1";

constexpr const char* kSchema = R"(
CREATE TABLE IF NOT EXISTS tessel_meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS trials(
  kernel TEXT NOT NULL, source_hash TEXT NOT NULL, device TEXT NOT NULL, dtype TEXT NOT NULL,
  fixed TEXT NOT NULL, shape TEXT NOT NULL, bucket TEXT NOT NULL, params TEXT NOT NULL,
  status TEXT NOT NULL, seconds REAL NOT NULL, detail TEXT NOT NULL,
  PRIMARY KEY(kernel, source_hash, device, dtype, fixed, shape, params));
)";

constexpr const char* kColumns =
    "kernel, source_hash, device, dtype, fixed, shape, params, status, seconds, detail";

Status sqlite_error(sqlite3* db, const std::string& path, const char* doing) {
  const int code = sqlite3_errcode(db);
  if (code == SQLITE_NOTADB)
    return invalid_argument("{}: not a tuning database (not an SQLite file)", path);
  if (code == SQLITE_CORRUPT)
    return io_error("{}: the tuning database is corrupt ({})", path, sqlite3_errmsg(db));
  return unavailable("{}: {}: {}", path, doing, sqlite3_errmsg(db));
}

// A prepared statement, finalised when it goes.
class Statement {
 public:
  Statement(sqlite3* db, const std::string& sql) {
    sqlite3_prepare_v2(db, sql.c_str(), -1, &s_, nullptr);
  }
  ~Statement() { sqlite3_finalize(s_); }
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;
  sqlite3_stmt* get() const { return s_; }
  void bind(int i, const std::string& v) {
    sqlite3_bind_text(s_, i, v.c_str(), -1, SQLITE_TRANSIENT);
  }
  void bind(int i, double v) { sqlite3_bind_double(s_, i, v); }

 private:
  sqlite3_stmt* s_ = nullptr;
};

Status exec(sqlite3* db, const std::string& path, const char* sql) {
  if (sqlite3_exec(db, sql, nullptr, nullptr, nullptr) != SQLITE_OK)
    return sqlite_error(db, path, sql);
  return ok_status();
}

std::string column_text(sqlite3_stmt* s, int i) {
  const unsigned char* t = sqlite3_column_text(s, i);
  return t ? reinterpret_cast<const char*>(t) : "";
}

nlohmann::json to_json(const Trial& t) {
  return {{"kernel", t.key.kernel}, {"source_hash", t.key.source_hash},
          {"device", t.key.device}, {"dtype", t.key.dtype},
          {"fixed", t.key.fixed},   {"shape", shape_string(t.key.shape)},
          {"params", t.params},     {"status", t.status},
          {"seconds", t.seconds},   {"detail", t.detail}};
}

}  // namespace

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s;
  for (int64_t d : shape) {
    if (!s.empty()) s += 'x';
    s += std::to_string(d);
  }
  return s;
}

std::string bucket_string(const std::vector<int64_t>& shape) {
  std::vector<int64_t> b;
  for (int64_t d : shape) {
    int64_t p = 1;
    while (p < d)
      p *= 2;
    b.push_back(p);
  }
  return shape_string(b);
}

Expected<std::vector<int64_t>> parse_shape(const std::string& text) {
  std::vector<int64_t> shape;
  std::stringstream in(text);
  std::string part;
  while (std::getline(in, part, 'x')) {
    char* end = nullptr;
    const long long v = std::strtoll(part.c_str(), &end, 10);
    if (part.empty() || *end != '\0' || v < 0)
      return invalid_argument("shape '{}': '{}' is not a size (write 2048x384x1152)", text, part);
    shape.push_back(v);
  }
  if (shape.empty()) return invalid_argument("shape '{}' is empty", text);
  return shape;
}

std::string params_string(const std::map<std::string, std::string>& params) {
  std::string s;
  for (const auto& [name, value] : params) {
    if (!s.empty()) s += ' ';
    s += name;
    s += '=';
    s += value;
  }
  return s;
}

std::map<std::string, std::string> parse_params(const std::string& text) {
  std::map<std::string, std::string> out;
  std::stringstream in(text);
  std::string word;
  while (in >> word) {
    const size_t eq = word.find('=');
    if (eq != std::string::npos) out[word.substr(0, eq)] = word.substr(eq + 1);
  }
  return out;
}

std::string default_tune_db_path() {
  if (const char* p = std::getenv("TESSEL_TUNE_DB"); p && *p) return p;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x)
    return std::string(x) + "/tessel/tune.db";
  if (const char* h = std::getenv("HOME"); h && *h)
    return std::string(h) + "/.cache/tessel/tune.db";
  return ".tessel-tune.db";
}

Expected<std::unique_ptr<TuneDb>> TuneDb::open(const std::string& path) {
  std::error_code ec;
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  sqlite3* raw = nullptr;
  if (sqlite3_open_v2(path.c_str(), &raw, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr) !=
      SQLITE_OK) {
    Status s = unavailable("{}: cannot open the tuning database: {}", path,
                           raw ? sqlite3_errmsg(raw) : "out of memory");
    sqlite3_close(raw);
    return s;
  }
  std::unique_ptr<TuneDb> db(new TuneDb(raw, path));
  sqlite3_busy_timeout(raw, 30000);
  // What is in the file: nothing (a new database), ours, or someone else's.
  int tables = 0;
  bool ours = false;
  {
    Statement s(raw, "SELECT name FROM sqlite_master WHERE type = 'table'");
    if (s.get() == nullptr) return sqlite_error(raw, path, "reading its tables");
    int rc;
    while ((rc = sqlite3_step(s.get())) == SQLITE_ROW) {
      ++tables;
      if (column_text(s.get(), 0) == "tessel_meta") ours = true;
    }
    if (rc != SQLITE_DONE) return sqlite_error(raw, path, "reading its tables");
  }
  if (tables > 0 && !ours)
    return invalid_argument("{}: an SQLite file but not a tuning database (no tessel_meta table)",
                            path);
  TESSEL_TRY(exec(raw, path, "PRAGMA journal_mode=WAL"));
  TESSEL_TRY(exec(raw, path, "BEGIN IMMEDIATE"));
  Status made = exec(raw, path, kSchema);
  if (made.ok())
    made = exec(
        raw, path,
        fmt::format("INSERT OR IGNORE INTO tessel_meta VALUES('format', '{}')", kFormat).c_str());
  if (!made.ok()) {
    (void)exec(raw, path, "ROLLBACK");
    return made;
  }
  TESSEL_TRY(exec(raw, path, "COMMIT"));
  Statement format(raw, "SELECT value FROM tessel_meta WHERE key = 'format'");
  if (format.get() == nullptr || sqlite3_step(format.get()) != SQLITE_ROW)
    return sqlite_error(raw, path, "reading its format");
  if (column_text(format.get(), 0) != kFormat)
    return invalid_argument("{}: a tuning database of format '{}', this tessel reads '{}'", path,
                            column_text(format.get(), 0), kFormat);
  return db;
}

TuneDb::~TuneDb() {
  sqlite3_close(db_);
}

Status TuneDb::record(const Trial& trial) {
  return record_all({trial});
}

Status TuneDb::record_all(const std::vector<Trial>& trials) {
  return write({}, trials);
}

Status TuneDb::choose(const Trial& trial) {
  if (trial.detail.rfind(kChosenPrefix, 0) != 0)
    return invalid_argument("a chosen trial's detail starts with '{}': '{}'", kChosenPrefix,
                            trial.detail);
  return write(&trial.key, {trial});
}

Status TuneDb::write(const TuneKey* unchoose, const std::vector<Trial>& trials) {
  TESSEL_TRY(exec(db_, path_, "BEGIN IMMEDIATE"));
  Status result = ok_status();
  if (unchoose != nullptr) {
    // The earlier choice for this shape stays as a trial, no longer chosen.
    Statement u(db_,
                "UPDATE trials SET detail = 'earlier ' || detail WHERE kernel = ?1 AND "
                "source_hash = ?2 AND device = ?3 AND dtype = ?4 AND fixed = ?5 AND shape = ?6 "
                "AND detail LIKE 'chosen:%'");
    if (u.get() == nullptr) result = sqlite_error(db_, path_, "preparing an update");
    if (result.ok()) {
      const std::string text[] = {unchoose->kernel, unchoose->source_hash,
                                  unchoose->device, unchoose->dtype,
                                  unchoose->fixed,  shape_string(unchoose->shape)};
      for (int i = 0; i < 6; ++i)
        u.bind(i + 1, text[i]);
      if (sqlite3_step(u.get()) != SQLITE_DONE)
        result = sqlite_error(db_, path_, "clearing an earlier choice");
    }
  }
  Statement s(db_, fmt::format("INSERT OR REPLACE INTO trials({}, bucket) VALUES(?, ?, ?, ?, ?, "
                               "?, ?, ?, ?, ?, ?)",
                               kColumns));
  if (result.ok() && s.get() == nullptr) result = sqlite_error(db_, path_, "preparing an insert");
  for (const Trial& t : trials) {
    if (!result.ok()) break;
    const std::string text[] = {t.key.kernel, t.key.source_hash,         t.key.device, t.key.dtype,
                                t.key.fixed,  shape_string(t.key.shape), t.params,     t.status};
    for (int i = 0; i < 8; ++i)
      s.bind(i + 1, text[i]);
    s.bind(9, t.seconds);
    s.bind(10, t.detail);
    s.bind(11, bucket_string(t.key.shape));
    if (sqlite3_step(s.get()) != SQLITE_DONE)
      result = sqlite_error(db_, path_, "recording a trial");
    sqlite3_reset(s.get());
  }
  if (!result.ok()) {
    (void)exec(db_, path_, "ROLLBACK");
    return result;
  }
  return exec(db_, path_, "COMMIT");
}

Expected<std::vector<Trial>> TuneDb::query(const std::string& sql,
                                           const std::vector<std::string>& binds) const {
  Statement s(db_, sql);
  if (s.get() == nullptr) return sqlite_error(db_, path_, "preparing a query");
  for (size_t i = 0; i < binds.size(); ++i)
    s.bind(static_cast<int>(i) + 1, binds[i]);
  std::vector<Trial> out;
  int rc;
  while ((rc = sqlite3_step(s.get())) == SQLITE_ROW) {
    Trial t;
    t.key.kernel = column_text(s.get(), 0);
    t.key.source_hash = column_text(s.get(), 1);
    t.key.device = column_text(s.get(), 2);
    t.key.dtype = column_text(s.get(), 3);
    t.key.fixed = column_text(s.get(), 4);
    Expected<std::vector<int64_t>> shape = parse_shape(column_text(s.get(), 5));
    if (!shape.ok()) return io_error("{}: a trial with {}", path_, shape.status().message());
    t.key.shape = *shape;
    t.params = column_text(s.get(), 6);
    t.status = column_text(s.get(), 7);
    t.seconds = sqlite3_column_double(s.get(), 8);
    t.detail = column_text(s.get(), 9);
    out.push_back(std::move(t));
  }
  if (rc != SQLITE_DONE) return sqlite_error(db_, path_, "reading trials");
  return out;
}

Expected<std::vector<Trial>> TuneDb::best(const TuneKey& key) const {
  // Per shape: the tuner's choice ("chosen: ..."), else the fastest re-measured row (an older
  // tuner's confirmation, "median of N runs"), else the fastest ok row; ties go to the smaller
  // params text, so every reader agrees.
  return query(
      fmt::format(
          "SELECT {} FROM trials t WHERE kernel = ?1 AND source_hash = ?2 AND "
          "device = ?3 AND dtype = ?4 AND fixed = ?5 AND status = 'ok' AND "
          "params = (SELECT params FROM trials u WHERE u.kernel = t.kernel AND "
          "u.source_hash = t.source_hash AND u.device = t.device AND u.dtype = "
          "t.dtype AND u.fixed = t.fixed AND u.shape = t.shape AND u.status = "
          "'ok' ORDER BY u.detail LIKE 'chosen:%' DESC, u.detail LIKE 'median of %' DESC, seconds, "
          "params LIMIT 1) ORDER BY shape",
          kColumns),
      {key.kernel, key.source_hash, key.device, key.dtype, key.fixed});
}

Expected<std::vector<Trial>> TuneDb::all() const {
  return query(fmt::format("SELECT {} FROM trials ORDER BY kernel, device, dtype, fixed, shape, "
                           "params",
                           kColumns),
               {});
}

Status TuneDb::export_json(const std::string& file) const {
  TESSEL_ASSIGN_OR_RETURN(std::vector<Trial> trials, all());
  std::ofstream out(file, std::ios::trunc);
  if (!out) return errno_error("open " + file);
  for (const Trial& t : trials)
    out << to_json(t).dump() << "\n";
  if (!out.flush()) return errno_error("write " + file);
  return ok_status();
}

Status TuneDb::import_json(const std::string& file) {
  std::ifstream in(file);
  if (!in) return errno_error("open " + file);
  std::vector<Trial> trials;
  std::string line;
  int64_t offset = 0;
  for (int number = 1; std::getline(in, line); ++number) {
    const int64_t at = offset;
    offset += static_cast<int64_t>(line.size()) + 1;
    if (line.empty()) continue;
    nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    const char* fields[] = {"kernel", "source_hash", "device", "dtype", "fixed",
                            "shape",  "params",      "status", "detail"};
    bool valid = j.is_object() && j.contains("seconds") && j["seconds"].is_number();
    for (const char* f : fields)
      valid = valid && j.contains(f) && j[f].is_string();
    if (!valid)
      return invalid_argument("{}:{} (offset {}): not a trial exported by tessel tune", file,
                              number, at);
    Trial t;
    t.key.kernel = j["kernel"];
    t.key.source_hash = j["source_hash"];
    t.key.device = j["device"];
    t.key.dtype = j["dtype"];
    t.key.fixed = j["fixed"];
    Expected<std::vector<int64_t>> shape = parse_shape(j["shape"]);
    if (!shape.ok())
      return invalid_argument("{}:{} (offset {}): {}", file, number, at, shape.status().message());
    t.key.shape = *shape;
    t.params = j["params"];
    t.status = j["status"];
    t.seconds = j["seconds"];
    t.detail = j["detail"];
    trials.push_back(std::move(t));
  }
  return record_all(trials);
}

}  // namespace tessel::tune
