// Atomic file writes: contents arrive whole, replacing the old file; nothing is left behind on
// success, abandon or failure; failures name the path; concurrent writers never produce a mixed
// file, as a concurrent reader checks.
#include "support/atomic_file.h"

#include <dirent.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

namespace tessel {
namespace {

class AtomicFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = ::testing::TempDir() + "tessel_atomic_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    for (const std::string& name : entries())
      unlink((dir_ + "/" + name).c_str());
    rmdir(dir_.c_str());
  }
  std::vector<std::string> entries() const {
    std::vector<std::string> names;
    DIR* d = opendir(dir_.c_str());
    while (dirent* e = readdir(d)) {
      std::string name = e->d_name;
      if (name != "." && name != "..") names.push_back(name);
    }
    closedir(d);
    return names;
  }
  std::string dir_;
};

TEST_F(AtomicFileTest, WritesAndReplacesWholeFiles) {
  const std::string path = dir_ + "/data.bin";
  std::string binary(100000, '\0');
  for (size_t i = 0; i < binary.size(); ++i)
    binary[i] = static_cast<char>(i * 13);
  ASSERT_TRUE(write_file_atomic(path, binary).ok());
  EXPECT_EQ(*read_file(path), binary);
  ASSERT_TRUE(write_file_atomic(path, "short").ok());
  EXPECT_EQ(*read_file(path), "short");
  EXPECT_EQ(entries(), std::vector<std::string>{"data.bin"});  // no temporary files left

  Expected<AtomicFileWriter> out = AtomicFileWriter::open(path);
  ASSERT_TRUE(out.ok());
  ASSERT_TRUE(out->write("part one, ").ok());
  EXPECT_EQ(*read_file(path), "short");  // not visible before commit
  ASSERT_TRUE(out->write(std::string("part two")).ok());
  ASSERT_TRUE(out->commit().ok());
  EXPECT_EQ(*read_file(path), "part one, part two");
  EXPECT_EQ(out->commit().code(), Code::kFailedPrecondition);
}

TEST_F(AtomicFileTest, AbandonedWriterLeavesNothing) {
  const std::string path = dir_ + "/never.txt";
  {
    Expected<AtomicFileWriter> out = AtomicFileWriter::open(path);
    ASSERT_TRUE(out.ok());
    ASSERT_TRUE(out->write("lost").ok());
    EXPECT_EQ(entries().size(), 1u);  // the temporary file
  }
  EXPECT_TRUE(entries().empty());
}

TEST_F(AtomicFileTest, FailuresNameThePath) {
  const std::string missing = dir_ + "/no/such/folder/file.txt";
  Status s = write_file_atomic(missing, "x");
  EXPECT_EQ(s.code(), Code::kIoError);
  EXPECT_NE(s.message().find(missing), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("No such file or directory"), std::string::npos) << s.message();

  // The target is a folder: the rename fails, and the temporary file is cleaned up.
  ASSERT_EQ(mkdir((dir_ + "/sub").c_str(), 0755), 0);
  s = write_file_atomic(dir_ + "/sub", "x");
  EXPECT_EQ(s.code(), Code::kIoError);
  EXPECT_NE(s.message().find(dir_ + "/sub"), std::string::npos) << s.message();
  EXPECT_EQ(entries(), std::vector<std::string>{"sub"});
  rmdir((dir_ + "/sub").c_str());

  EXPECT_EQ(write_file_atomic(dir_ + "/", "x").code(), Code::kInvalidArgument);
  Expected<std::string> r = read_file(dir_ + "/absent");
  EXPECT_EQ(r.status().message(), "open " + dir_ + "/absent: No such file or directory");
}

TEST_F(AtomicFileTest, ConcurrentWritersNeverMix) {
  const std::string path = dir_ + "/shared.bin";
  constexpr size_t kSize = 1 << 16;
  ASSERT_TRUE(write_file_atomic(path, std::string(kSize, 'a')).ok());
  std::atomic<bool> done{false};
  std::atomic<int> torn{0}, reads{0};
  std::thread reader([&] {
    while (!done.load()) {
      Expected<std::string> got = read_file(path);
      if (!got.ok()) continue;
      ++reads;
      // A whole file is kSize copies of one letter.
      if (got->size() != kSize || got->find_first_not_of((*got)[0]) != std::string::npos) ++torn;
    }
  });
  std::vector<std::thread> writers;
  for (int w = 0; w < 4; ++w) {
    writers.emplace_back([&, w] {
      for (int i = 0; i < 10; ++i) {
        EXPECT_TRUE(write_file_atomic(path, std::string(kSize, static_cast<char>('b' + w))).ok());
      }
    });
  }
  for (std::thread& t : writers)
    t.join();
  done = true;
  reader.join();
  EXPECT_EQ(torn.load(), 0);
  EXPECT_GT(reads.load(), 0);
  EXPECT_EQ(entries(), std::vector<std::string>{"shared.bin"});
}

}  // namespace
}  // namespace tessel
