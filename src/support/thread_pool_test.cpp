// Thread pool: every index visited exactly once (many sizes, grains and pool sizes, several
// callers at once, nested calls), chunk boundaries on grain multiples, workers really take part,
// and TESSEL_THREADS is honoured.
#include "support/thread_pool.h"

#include <gtest/gtest.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

namespace tessel {
namespace {

// Runs one parallel_for and checks that each index of [0, n) was visited exactly once, and that
// every range was non-empty and started on a multiple of grain.
void expect_each_index_once(ThreadPool& pool, int64_t n, int64_t grain) {
  std::vector<std::atomic<int>> visits(static_cast<size_t>(n));
  std::atomic<int> bad_ranges{0};
  pool.parallel_for(n, grain, [&](int64_t begin, int64_t end) {
    if (begin >= end || begin < 0 || end > n) ++bad_ranges;
    // A nested call (or a pool of one) gets the whole range at once; otherwise chunks start on
    // multiples of the grain.
    if (grain > 0 && begin % grain != 0) ++bad_ranges;
    for (int64_t i = begin; i < end; ++i)
      visits[static_cast<size_t>(i)].fetch_add(1);
  });
  EXPECT_EQ(bad_ranges.load(), 0) << "n=" << n << " grain=" << grain;
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(visits[static_cast<size_t>(i)].load(), 1)
        << "index " << i << " n=" << n << " grain=" << grain << " threads=" << pool.num_threads();
  }
}

TEST(ThreadPool, EveryIndexOnceOverSizesAndGrains) {
  const int64_t sizes[] = {0, 1, 2, 3, 7, 8, 63, 64, 65, 100, 1000, 4097, 100003};
  const int64_t grains[] = {-3, 0, 1, 2, 3, 7, 64, 1000, 1 << 20};
  for (int threads : {1, 2, 3, 4, 7}) {
    ThreadPool pool(threads);
    ASSERT_EQ(pool.num_threads(), threads);
    for (int64_t n : sizes) {
      for (int64_t grain : grains)
        expect_each_index_once(pool, n, grain);
    }
  }
}

// parallel_for_chunks: every index once, and every range exactly `chunk` long but the last (a
// nested call or a pool of one gets the whole range at once).
TEST(ThreadPool, ExactChunksCoverEverythingInRangesOfThatLength) {
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    for (int64_t n : {0, 1, 5, 22, 66, 1001}) {
      for (int64_t chunk : {-1, 1, 3, 64}) {
        const int64_t length = std::max<int64_t>(chunk, 1);
        std::vector<std::atomic<int>> visits(static_cast<size_t>(n));
        std::atomic<int> bad_ranges{0}, ranges{0};
        pool.parallel_for_chunks(n, chunk, [&](int64_t begin, int64_t end) {
          ++ranges;
          const bool whole = begin == 0 && end == n;
          if (begin >= end ||
              (!whole && (begin % length != 0 || (end - begin != length && end != n))))
            ++bad_ranges;
          for (int64_t i = begin; i < end; ++i)
            visits[static_cast<size_t>(i)].fetch_add(1);
        });
        EXPECT_EQ(bad_ranges.load(), 0) << "n=" << n << " chunk=" << chunk;
        if (threads > 1) {
          EXPECT_EQ(ranges.load(), (n + length - 1) / length) << "n=" << n << " chunk=" << chunk;
        }
        for (int64_t i = 0; i < n; ++i)
          ASSERT_EQ(visits[static_cast<size_t>(i)].load(), 1) << "index " << i << " n=" << n;
      }
    }
  }
}

// Under a memory limit not every worker thread can get its stack: the pool runs with those that
// started (it used to abort with std::system_error from its constructor). In a child process, with
// the address space capped 64 MiB above what it uses, a pool of 256 threads (8 MiB stacks) is
// asked for, and every index must still be visited once.
TEST(ThreadPool, StartsWithTheThreadsItCanGetUnderAMemoryLimit) {
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
    struct rlimit limit = {used + (64u << 20), used + (64u << 20)};
    if (pages == 0 || ::setrlimit(RLIMIT_AS, &limit) != 0) ::_exit(3);
    ThreadPool pool(256);
    if (pool.num_threads() >= 256) ::_exit(4);  // the limit did not bite: nothing was tested
    std::vector<std::atomic<int>> visits(1000);
    pool.parallel_for(1000, 1, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i)
        visits[size_t(i)].fetch_add(1);
    });
    for (auto& v : visits)
      if (v.load() != 1) ::_exit(5);
    ::_exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << "the child died of signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0);
#endif
}

TEST(ThreadPool, ManyBackToBackJobs) {
  // Workers that wake up late must never run a chunk of a job that has moved on.
  ThreadPool pool(4);
  for (int round = 0; round < 2000; ++round)
    expect_each_index_once(pool, 1 + round % 97, 1);
}

TEST(ThreadPool, SeveralCallersAtOnce) {
  ThreadPool pool(4);
  std::atomic<int> failures{0};
  std::vector<std::thread> callers;
  for (int c = 0; c < 4; ++c) {
    callers.emplace_back([&pool, &failures, c] {
      for (int round = 0; round < 300; ++round) {
        const int64_t n = 1 + (round * 37 + c * 101) % 3000;
        std::vector<std::atomic<int>> visits(static_cast<size_t>(n));
        pool.parallel_for(n, 1 + c, [&](int64_t begin, int64_t end) {
          for (int64_t i = begin; i < end; ++i)
            visits[static_cast<size_t>(i)].fetch_add(1);
        });
        for (auto& v : visits)
          failures += v.load() != 1;
      }
    });
  }
  for (std::thread& t : callers)
    t.join();
  EXPECT_EQ(failures.load(), 0);
}

TEST(ThreadPool, NestedCallsRunInlineAndCoverEverything) {
  ThreadPool pool(4);
  constexpr int64_t kOuter = 64, kInner = 50;
  std::vector<std::atomic<int>> visits(kOuter * kInner);
  std::atomic<int> inner_calls_not_inline{0};
  pool.parallel_for(kOuter, 1, [&](int64_t begin, int64_t end) {
    EXPECT_TRUE(ThreadPool::in_parallel_region());
    for (int64_t i = begin; i < end; ++i) {
      int calls = 0;
      pool.parallel_for(kInner, 1, [&](int64_t b, int64_t e) {
        ++calls;
        for (int64_t j = b; j < e; ++j)
          visits[static_cast<size_t>(i * kInner + j)].fetch_add(1);
      });
      if (calls != 1) ++inner_calls_not_inline;
    }
  });
  EXPECT_FALSE(ThreadPool::in_parallel_region());
  EXPECT_EQ(inner_calls_not_inline.load(), 0);
  for (auto& v : visits)
    ASSERT_EQ(v.load(), 1);
}

TEST(ThreadPool, NestedCallsOnTheGlobalPool) {
  std::atomic<int64_t> sum{0};
  parallel_for(10, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      parallel_for(10, 1, [&](int64_t b2, int64_t e2) {
        for (int64_t j = b2; j < e2; ++j)
          sum += i * 10 + j;
      });
    }
  });
  EXPECT_EQ(sum.load(), 99 * 100 / 2);
}

TEST(ThreadPool, WorkersTakePart) {
  // The first chunk waits until a second thread has started another chunk, which only a worker
  // can do while the caller is busy.
  ThreadPool pool(2);
  std::atomic<int> entered{0};
  std::mutex mutex;
  std::set<std::thread::id> threads;
  pool.parallel_for(2, 1, [&](int64_t, int64_t) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      threads.insert(std::this_thread::get_id());
    }
    ++entered;
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (entered.load() < 2 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::yield();
    }
  });
  EXPECT_EQ(threads.size(), 2u);
}

TEST(ThreadPool, DefaultThreadCountWithinAffinity) {
  cpu_set_t set;
  CPU_ZERO(&set);
  ASSERT_EQ(sched_getaffinity(0, sizeof(set), &set), 0);
  const int cpus = CPU_COUNT(&set);
  const int n = default_thread_count();
  EXPECT_GE(n, 1);
  EXPECT_LE(n, cpus);
  // Hyper-threads come in pairs at most (or fours on some POWER machines): never below a quarter.
  EXPECT_GE(n * 4, cpus);
}

TEST(ThreadPoolDeathTest, ThreadsFromEnvironment) {
  // Run in a fresh process so the global pool is made after the variable is set.
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        setenv("TESSEL_THREADS", "3", 1);
        std::exit(ThreadPool::global().num_threads() == 3 ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
  EXPECT_EXIT(
      {
        setenv("TESSEL_THREADS", "lots", 1);
        std::exit(ThreadPool::global().num_threads() == default_thread_count() ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "ignoring TESSEL_THREADS='lots'");
}

}  // namespace
}  // namespace tessel
