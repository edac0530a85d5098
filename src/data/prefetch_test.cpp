// Prefetcher: the same batches as the source run synchronously, positions that count only what
// was consumed, resume, errors on the consumer's side, and shutdown with a full queue.
#include "data/prefetch.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <new>
#include <system_error>
#include <thread>
#include <vector>

#include "data/test_files.h"

namespace tessel {
namespace {

ImageDataset counting_dataset(int64_t n) {
  ImageDataset ds;
  std::vector<uint8_t> pixels;
  std::vector<int64_t> labels;
  for (int64_t i = 0; i < n; ++i) {
    for (int j = 0; j < 3; ++j)
      pixels.push_back(static_cast<uint8_t>(i));
    labels.push_back(i % 10);
  }
  ds.images = *Tensor::from_vector(pixels, {n, 3});
  ds.labels = *Tensor::from_vector(labels, {n});
  return ds;
}

const ImageBatchOptions kOptions{.batch_size = 7, .seed = 5};

std::vector<float> pixels_of(const Batch& b) {
  return *b.inputs.to_vector<float>();
}

TEST(Prefetcher, YieldsTheSynchronousBatchesInOrder) {
  auto sync = ImageBatches::make(counting_dataset(50), kOptions).value();
  Prefetcher prefetched(ImageBatches::make(counting_dataset(50), kOptions).value(), 3);
  for (int i = 0; i < 30; ++i) {  // four epochs and a bit
    Batch expected = *sync->next();
    Expected<Batch> got = prefetched.next();
    ASSERT_TRUE(got.ok()) << got.status().to_string();
    EXPECT_EQ(pixels_of(*got), pixels_of(expected)) << i;
    EXPECT_EQ(*got->targets.to_vector<int64_t>(), *expected.targets.to_vector<int64_t>());
    // The thread reads ahead, but the position is that of the batches handed out.
    EXPECT_EQ(prefetched.position(), sync->position()) << i;
  }
}

TEST(Prefetcher, RestoreContinuesFromTheSavedPosition) {
  auto sync = ImageBatches::make(counting_dataset(50), kOptions).value();
  std::vector<std::vector<float>> expected;
  for (int i = 0; i < 20; ++i)
    expected.push_back(pixels_of(*sync->next()));

  std::string saved;
  {
    Prefetcher first(ImageBatches::make(counting_dataset(50), kOptions).value(), 4);
    for (int i = 0; i < 9; ++i)
      ASSERT_TRUE(first.next().ok());
    saved = first.position().to_string();
  }  // destroyed with a full queue of batches read ahead
  Prefetcher resumed(ImageBatches::make(counting_dataset(50), kOptions).value(), 4);
  ASSERT_TRUE(resumed.next().ok());  // it has started and read ahead from the beginning
  ASSERT_TRUE(resumed.restore(*DataPosition::parse(saved)).ok());
  for (int i = 9; i < 20; ++i)
    EXPECT_EQ(pixels_of(*resumed.next()), expected[i]) << i;

  // A position the source refuses leaves the prefetcher where it was.
  const DataPosition before = resumed.position();
  EXPECT_EQ(resumed.restore({0, 99, Pcg32()}).code(), Code::kOutOfRange);
  EXPECT_EQ(resumed.position(), before);
  EXPECT_EQ(pixels_of(*resumed.next()), pixels_of(*sync->next()));
}

// Hands out `good` batches, then fails the way a reader would, or runs out of memory (a
// std::bad_alloc from a vector, as shuffled_indices' did under a 93 MiB limit).
class FailingSource : public BatchSource {
 public:
  explicit FailingSource(int good, bool out_of_memory = false)
      : good_(good), out_of_memory_(out_of_memory) {}
  Expected<Batch> next() override {
    if (given_ == good_ && out_of_memory_) throw std::bad_alloc();
    if (given_ == good_) return invalid_argument("/data/x.idx: byte offset 8: expected 10 bytes");
    ++given_;
    return Batch{*Tensor::full({1}, given_, DType::kF32), Tensor()};
  }
  DataPosition position() const override { return {0, static_cast<uint64_t>(given_), Pcg32()}; }
  Status restore(const DataPosition& p) override {
    given_ = static_cast<int>(p.batch);
    return ok_status();
  }

 private:
  int good_, given_ = 0;
  bool out_of_memory_;
};

TEST(Prefetcher, ReaderErrorsSurfaceOnTheConsumerSide) {
  Prefetcher batches(std::make_unique<FailingSource>(3), 2);
  for (int i = 1; i <= 3; ++i) {
    Expected<Batch> b = batches.next();
    ASSERT_TRUE(b.ok());
    EXPECT_EQ(b->inputs.at<float>({0}), i);
  }
  for (int repeat = 0; repeat < 2; ++repeat) {
    Expected<Batch> b = batches.next();
    ASSERT_FALSE(b.ok());
    EXPECT_EQ(b.status().message(), "/data/x.idx: byte offset 8: expected 10 bytes");
  }
  EXPECT_EQ(batches.position().batch, 3u);
  // Restoring starts a fresh producer.
  ASSERT_TRUE(batches.restore({0, 1, Pcg32()}).ok());
  EXPECT_EQ(batches.next()->inputs.at<float>({0}), 2);
}

// On the prefetch thread a std::bad_alloc used to call std::terminate (SIGABRT); it is the
// stream's error after the batches read before it.
TEST(Prefetcher, OutOfMemoryInTheReaderIsAnErrorNotAnAbort) {
  Prefetcher batches(std::make_unique<FailingSource>(2, /*out_of_memory=*/true), 4);
  for (int i = 1; i <= 2; ++i) {
    Expected<Batch> b = batches.next();
    ASSERT_TRUE(b.ok()) << b.status().to_string();
    EXPECT_EQ(b->inputs.at<float>({0}), i);
  }
  for (int repeat = 0; repeat < 2; ++repeat) {
    Expected<Batch> b = batches.next();
    ASSERT_FALSE(b.ok());
    EXPECT_EQ(b.status().code(), Code::kResourceExhausted);
    EXPECT_EQ(b.status().message(), "out of host memory reading the next batch");
  }
  EXPECT_EQ(batches.position().batch, 2u);
  ASSERT_TRUE(batches.restore({0, 0, Pcg32()}).ok());
  EXPECT_EQ(batches.next()->inputs.at<float>({0}), 1);
}

// Under a memory limit that leaves no room for a thread's stack, the prefetcher reads on the
// caller's thread: the same batches, errors and positions (the thread's std::system_error used
// to abort the whole run). In a child process with the address space capped 2 MiB above what it
// uses; the child first starts threads until one cannot start.
TEST(Prefetcher, WithoutAThreadReadsOnTheCallersThread) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "sanitizers reserve more address space than the limit leaves";
#else
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    long pages = 0;
    if (FILE* f = std::fopen("/proc/self/statm", "r")) {
      if (std::fscanf(f, "%ld", &pages) != 1) pages = 0;
      std::fclose(f);
    }
    const rlim_t used = rlim_t(pages) * rlim_t(::sysconf(_SC_PAGESIZE));
    struct rlimit limit = {used + (2u << 20), used + (2u << 20)};
    if (pages == 0 || ::setrlimit(RLIMIT_AS, &limit) != 0) ::_exit(3);
    // Threads until one cannot start: the first ones may reuse stacks that glibc cached from
    // threads the earlier tests joined. They stay parked; _exit does not wait for them.
    std::vector<std::thread> parked;
    bool refused = false;
    for (int t = 0; t < 256 && !refused; ++t) {
      try {
        parked.emplace_back([] { ::pause(); });
      } catch (const std::system_error&) {
        refused = true;
      }
    }
    if (!refused) ::_exit(4);  // the limit did not bite: nothing would be tested
    Prefetcher batches(std::make_unique<FailingSource>(3), 2);
    for (int i = 1; i <= 3; ++i) {
      Expected<Batch> b = batches.next();
      if (!b.ok() || b->inputs.at<float>({0}) != float(i)) ::_exit(10 + i);
      if (batches.position().batch != uint64_t(i)) ::_exit(20 + i);
    }
    for (int repeat = 0; repeat < 2; ++repeat)
      if (batches.next().status().message() != "/data/x.idx: byte offset 8: expected 10 bytes")
        ::_exit(30 + repeat);
    if (!batches.restore({0, 1, Pcg32()}).ok() || batches.next()->inputs.at<float>({0}) != 2.0f)
      ::_exit(40);
    ::_exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << "the child died of signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0);
#endif
}

TEST(Prefetcher, ShutsDownWithAFullQueueOrImmediately) {
  for (size_t depth : {1, 8}) {
    Prefetcher batches(ImageBatches::make(counting_dataset(50), kOptions).value(), depth);
    if (depth == 8) {
      ASSERT_TRUE(batches.next().ok());
    }
  }  // the destructor must join, not hang
  SUCCEED();
}

}  // namespace
}  // namespace tessel
