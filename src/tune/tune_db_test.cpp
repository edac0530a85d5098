// The tuning database: trials in, the best per shape out; several writers at once (threads and
// a second process); a corrupt or foreign file is an error naming it; an export imported into
// another database gives the same choices; a second reader chooses the same.
#include "tune/tune_db.h"

#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "tune/choices.h"

namespace tessel::tune {
namespace {

class TuneDbTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("tessel_tune_db_test_" + std::to_string(getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::filesystem::path dir_;
};

TuneKey key(std::vector<int64_t> shape) {
  return TuneKey{"gemm", "abc123", "cpu test | avx2", "f32", "", std::move(shape)};
}

Trial trial(std::vector<int64_t> shape, const std::string& params, double seconds,
            const std::string& status = "ok") {
  return Trial{key(std::move(shape)), params, status, seconds, ""};
}

// The tuner's choice wins over faster-looking single trials (one lucky timing on a shared
// machine); a later choice replaces it, and the earlier one stays as a plain trial.
TEST_F(TuneDbTest, TheChoiceWinsAndALaterChoiceReplacesIt) {
  auto db = TuneDb::open(path("tune.db"));
  ASSERT_TRUE(db.ok()) << db.status().message();
  const std::vector<int64_t> shape = {2048, 384, 384};
  ASSERT_TRUE((*db)->record_all({trial(shape, "BM=96", 1.0), trial(shape, "BM=192", 2.0)}).ok());
  auto chosen = [&] {
    auto best = (*db)->best(key({}));
    EXPECT_TRUE(best.ok()) << best.status().message();
    return best.ok() ? nearest_choice(*best, shape) : std::string();
  };
  EXPECT_EQ(chosen(), "BM=96");  // no choice yet: the fastest trial
  Trial defaults = trial(shape, "BM=192", 2.1);
  defaults.detail = "chosen: defaults kept";
  ASSERT_TRUE((*db)->choose(defaults).ok());
  EXPECT_EQ(chosen(), "BM=192");
  Trial other = trial(shape, "BM=288", 1.9);
  other.detail = "chosen: faster than the defaults";
  ASSERT_TRUE((*db)->choose(other).ok());
  EXPECT_EQ(chosen(), "BM=288");
  auto all = (*db)->all();
  ASSERT_TRUE(all.ok());
  int choices = 0;
  for (const Trial& t : *all) {
    choices += t.detail.rfind(kChosenPrefix, 0) == 0;
    if (t.params == "BM=192") {
      EXPECT_EQ(t.detail, "earlier chosen: defaults kept");
    }
  }
  EXPECT_EQ(choices, 1);
  // A detail that does not say it is a choice is refused.
  EXPECT_FALSE((*db)->choose(trial(shape, "BM=96", 1.0)).ok());
}

TEST_F(TuneDbTest, BestIsTheFastestGoodTrialOfEachShape) {
  auto db = TuneDb::open(path("a/b/tune.db"));  // folders are made
  ASSERT_TRUE(db.ok()) << db.status().message();
  ASSERT_TRUE(
      (*db)
          ->record_all({trial({512, 512, 512}, "BM=96", 3.0), trial({512, 512, 512}, "BM=192", 2.0),
                        trial({512, 512, 512}, "BM=288", 1.0, "wrong"),
                        trial({2048, 384, 1152}, "BM=144", 5.0)})
          .ok());
  auto best = (*db)->best(key({}));
  ASSERT_TRUE(best.ok()) << best.status().message();
  ASSERT_EQ(best->size(), 2u);
  EXPECT_EQ(nearest_choice(*best, {512, 512, 512}), "BM=192");  // not the wrong one
  EXPECT_EQ(nearest_choice(*best, {2048, 384, 1152}), "BM=144");
  // No exact entry: the nearest shape (in log2 sizes); another rank: nothing.
  EXPECT_EQ(nearest_choice(*best, {600, 500, 400}), "BM=192");
  EXPECT_EQ(nearest_choice(*best, {2048, 384, 1536}), "BM=144");
  EXPECT_EQ(nearest_choice(*best, {2048, 384}), "");
  // Re-measuring a specialisation replaces its row.
  ASSERT_TRUE((*db)->record(trial({512, 512, 512}, "BM=96", 0.5)).ok());
  EXPECT_EQ(nearest_choice(*(*db)->best(key({})), {512, 512, 512}), "BM=96");
  // A re-measured row (the tuner's confirmation) wins over a single lucky run.
  Trial confirmed = trial({512, 512, 512}, "BM=192", 0.8);
  confirmed.detail = "median of 3 runs";
  ASSERT_TRUE((*db)->record(confirmed).ok());
  EXPECT_EQ(nearest_choice(*(*db)->best(key({})), {512, 512, 512}), "BM=192");
  EXPECT_EQ(bucket_string({2048, 384, 1100}), "2048x512x2048");
}

TEST_F(TuneDbTest, ThreadsAndAProcessWriteAtOnce) {
  const std::string file = path("tune.db");
  ASSERT_TRUE(TuneDb::open(file).ok());
  constexpr int kRows = 150;
  auto write = [&](int writer) {
    auto db = TuneDb::open(file);
    if (!db.ok()) return false;
    for (int i = 0; i < kRows; ++i)
      if (!(*db)->record(trial({i + 1, writer + 1}, "BM=" + std::to_string(i), 1.0 + i)).ok())
        return false;
    return true;
  };
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) _exit(write(2) ? 0 : 1);  // the child touches only SQLite, no threads
  bool ok0 = false, ok1 = false;
  std::thread a([&] { ok0 = write(0); });
  std::thread b([&] { ok1 = write(1); });
  a.join();
  b.join();
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(ok0);
  EXPECT_TRUE(ok1);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  auto all = (*TuneDb::open(file))->all();
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->size(), 3u * kRows);
}

TEST_F(TuneDbTest, CorruptAndForeignFilesAreErrorsNamingThem) {
  const std::string garbage = path("garbage.db");
  std::ofstream(garbage) << std::string(8192, 'x');
  auto a = TuneDb::open(garbage);
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.status().message().find(garbage), std::string::npos) << a.status().message();
  EXPECT_NE(a.status().message().find("not an SQLite file"), std::string::npos);

  // A real database, with its pages overwritten in the middle.
  const std::string damaged = path("damaged.db");
  {
    auto db = TuneDb::open(damaged);
    ASSERT_TRUE(db.ok());
    std::vector<Trial> many;
    for (int i = 0; i < 400; ++i)
      many.push_back(trial({i + 1}, "BM=" + std::to_string(i), 1.0));
    ASSERT_TRUE((*db)->record_all(many).ok());
  }
  {
    auto db = TuneDb::open(damaged);  // a reopen checkpoints the WAL into the file on close
  }
  const auto size = std::filesystem::file_size(damaged);
  ASSERT_GT(size, 8192u);
  {
    std::fstream f(damaged, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(4096);
    const std::string junk(size - 4096, '\x5a');
    f.write(junk.data(), static_cast<std::streamsize>(junk.size()));
  }
  auto d = TuneDb::open(damaged);
  Status s = d.ok() ? (*d)->all().status() : d.status();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find(damaged), std::string::npos) << s.message();

  const std::string foreign = path("foreign.db");
  sqlite3* raw = nullptr;
  ASSERT_EQ(sqlite3_open(foreign.c_str(), &raw), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(raw, "CREATE TABLE songs(title TEXT)", nullptr, nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(raw);
  auto f = TuneDb::open(foreign);
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().message(),
            foreign + ": an SQLite file but not a tuning database (no tessel_meta table)");
}

TEST_F(TuneDbTest, ExportImportAndASecondReaderGiveTheSameChoices) {
  const std::string first = path("first.db"), second = path("second.db"),
                    lines = path("trials.jsonl");
  {
    auto db = TuneDb::open(first);
    ASSERT_TRUE(db.ok());
    ASSERT_TRUE((*db)
                    ->record_all({trial({512, 512, 512}, "BK=256 BM=96 BN=128", 2.0),
                                  trial({512, 512, 512}, "BK=384 BM=192 BN=256", 1.5),
                                  trial({1024, 1024, 1024}, "BK=128 BM=288 BN=512", 9.0),
                                  trial({64, 64, 64}, "BK=64 BM=24 BN=32", 1.0, "crash")})
                    .ok());
    ASSERT_TRUE((*db)->export_json(lines).ok());
    auto other = TuneDb::open(second);
    ASSERT_TRUE(other.ok());
    ASSERT_TRUE((*other)->import_json(lines).ok());
    auto a = (*db)->all(), b = (*other)->all();
    ASSERT_TRUE(a.ok() && b.ok());
    ASSERT_EQ(a->size(), b->size());
    for (size_t i = 0; i < a->size(); ++i) {
      EXPECT_EQ((*a)[i].params, (*b)[i].params);
      EXPECT_EQ((*a)[i].status, (*b)[i].status);
      EXPECT_EQ((*a)[i].seconds, (*b)[i].seconds);
      EXPECT_EQ((*a)[i].key.shape, (*b)[i].key.shape);
    }
  }
  // Readers of each file (as the op library reads them) choose alike, exact and nearest.
  for (const std::vector<int64_t>& shape :
       std::vector<std::vector<int64_t>>{{512, 512, 512}, {1024, 1024, 1024}, {700, 700, 700}}) {
    TuneChoices::global().use_database(first);
    auto from_first = TuneChoices::global().choose(key(shape));
    TuneChoices::global().use_database(second);
    auto from_second = TuneChoices::global().choose(key(shape));
    ASSERT_TRUE(from_first.ok() && from_second.ok());
    EXPECT_EQ(*from_first, *from_second);
  }
  TuneChoices::global().use_database(first);
  EXPECT_EQ(*TuneChoices::global().choose(key({512, 512, 512})), "BK=384 BM=192 BN=256");
  TuneChoices::global().use_database("");

  // A bad line in an import names the file and line, and imports nothing.
  std::ofstream(lines, std::ios::app) << "{\"kernel\": 3}\n";
  auto other = TuneDb::open(path("third.db"));
  Status s = (*other)->import_json(lines);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find(lines + ":5"), std::string::npos) << s.message();
  EXPECT_EQ((*other)->all()->size(), 0u);
}

}  // namespace
}  // namespace tessel::tune
