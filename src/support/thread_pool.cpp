// Thread pool: job publication, chunk claiming, and the wait/sleep protocol.
//
// One job at a time is published through three atomics: claim_ (chunk count and next chunk),
// chunks_done_ (finished chunks) and job_id_ (the wake-up signal). Workers and the caller claim
// chunks with a compare-and-swap on claim_; the caller returns when chunks_done_ reaches the
// chunk count. A waiting thread spins for a short while (the next kernel usually follows within
// microseconds), yields its CPU in a loop for up to a millisecond (see kYieldBeforeSleep) and
// then sleeps in a futex wait on the atomic. A sleeper count lets the waker skip
// the wake-up system call when every thread is still spinning.
#include "support/thread_pool.h"

#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <set>
#include <string>
#include <system_error>
#include <utility>

#include "support/log.h"

namespace tessel {
namespace {

// Pause iterations a waiting thread spins first (~180 us on the Zen 4 guest here).
constexpr int kSpinIterations = 1 << 12;

// Then, until this long after the wait began, it yields the CPU in a loop instead of sleeping.
// On a virtual machine a thread that sleeps leaves its virtual CPU idle, the hypervisor halts it,
// and waking it again takes milliseconds: a pool thread that slept between two gemm calls (or
// while the other thread finished the last block) joined the next call late, and 512^3 ran at one
// core's speed with two. A yielding thread keeps its CPU awake while it waits, yet gives the CPU
// to any other runnable thread, so on a busy machine it costs little.
constexpr auto kYieldBeforeSleep = std::chrono::milliseconds(1);

// Chunks per thread: more than one, so threads that finish early take work from slow ones.
constexpr int64_t kChunksPerThread = 4;

constexpr int kMaxThreads = 1024;

thread_local bool t_in_parallel_region = false;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Sleeps while *word == expected. Wakers bump the word first and then wake, and futex_wait checks
// the value atomically with going to sleep, so a wake-up cannot be lost.
void futex_wait(std::atomic<uint32_t>* word, uint32_t expected) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT_PRIVATE, expected, nullptr,
          nullptr, 0);
}

void futex_wake_all(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE_PRIVATE, INT32_MAX, nullptr,
          nullptr, 0);
}

// Spins, yields, then sleeps, until *word != value; returns the new value.
uint32_t wait_until_changed(std::atomic<uint32_t>* word, uint32_t value,
                            std::atomic<int>* sleepers) {
  std::chrono::steady_clock::time_point yield_until{};
  for (int spins = 0;; ++spins) {
    uint32_t now = word->load(std::memory_order_acquire);
    if (now != value) return now;
    if (spins < kSpinIterations) {
      cpu_relax();
      continue;
    }
    if (spins == kSpinIterations)
      yield_until = std::chrono::steady_clock::now() + kYieldBeforeSleep;
    if (std::chrono::steady_clock::now() < yield_until) {
      sched_yield();
      continue;
    }
    // Announce the sleep before the last look (both seq_cst), so that a waker either sees the
    // sleeper or this thread sees the new value.
    sleepers->fetch_add(1);
    if (word->load() == value) futex_wait(word, value);
    sleepers->fetch_sub(1);
  }
}

void wake_all(std::atomic<uint32_t>* word, std::atomic<int>* sleepers) {
  if (sleepers->load() > 0) futex_wake_all(word);
}

bool read_int_file(const std::string& path, long* value) {
  std::ifstream in(path);
  return static_cast<bool>(in >> *value);
}

int threads_from_env() {
  const char* env = std::getenv("TESSEL_THREADS");
  if (env == nullptr || *env == '\0') return 0;
  char* end = nullptr;
  long n = std::strtol(env, &end, 10);
  if (*end != '\0' || n < 1 || n > kMaxThreads) {
    log_warn("ignoring TESSEL_THREADS='{}': expected a whole number from 1 to {}", env,
             kMaxThreads);
    return 0;
  }
  return static_cast<int>(n);
}

}  // namespace

int default_thread_count() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) {
    return std::max(1u, std::thread::hardware_concurrency());
  }
  // Hyper-threads of one core share its execution units; kernels gain nothing from both.
  std::set<std::pair<long, long>> cores;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (!CPU_ISSET(cpu, &set)) continue;
    std::string topology = "/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/";
    long package = 0, core = 0;
    if (!read_int_file(topology + "physical_package_id", &package) ||
        !read_int_file(topology + "core_id", &core)) {
      return std::max(1, CPU_COUNT(&set));  // no topology (some containers): count CPUs
    }
    cores.insert({package, core});
  }
  return std::max<int>(1, static_cast<int>(cores.size()));
}

ThreadPool::ThreadPool(int num_threads) {
  num_threads = std::clamp(num_threads, 1, kMaxThreads);
  workers_.reserve(num_threads - 1);
  for (int i = 0; i + 1 < num_threads; ++i) {
    // Under a process or memory limit a thread may not start: run with those that did (the
    // caller's thread always works), rather than abort in a constructor that cannot fail.
    try {
      workers_.emplace_back([this] { worker_loop(); });
    } catch (const std::system_error& e) {
      log_warn("thread pool: could not start worker thread {} of {} ({}); running with {} threads",
               i + 1, num_threads - 1, e.what(), workers_.size() + 1);
      break;
    }
  }
}

ThreadPool::~ThreadPool() {
  stop_.store(true);
  job_id_.fetch_add(1);
  wake_all(&job_id_, &worker_sleepers_);
  for (std::thread& t : workers_)
    t.join();
}

ThreadPool& ThreadPool::global() {
  // Never destroyed: code that runs during static destruction may still call parallel_for.
  static ThreadPool* pool = [] {
    int n = threads_from_env();
    return new ThreadPool(n > 0 ? n : default_thread_count());
  }();
  return *pool;
}

bool ThreadPool::in_parallel_region() {
  return t_in_parallel_region;
}

void ThreadPool::run(int64_t n, int64_t grain, RangeFn fn, bool exact_chunks) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  const int64_t grains = (n + grain - 1) / grain;
  if (workers_.empty() || grains <= 1 || t_in_parallel_region) {
    fn.call(fn.object, 0, n);
    return;
  }
  std::unique_lock<std::mutex> lock(dispatch_mutex_, std::try_to_lock);
  if (!lock.owns_lock()) {  // another thread's job has the workers
    fn.call(fn.object, 0, n);
    return;
  }

  // The claim word counts chunks in 32 bits: exact chunks that would overflow it grow.
  const int64_t target_chunks =
      std::min(grains, exact_chunks ? int64_t(UINT32_MAX) : num_threads() * kChunksPerThread);
  const int64_t chunk_size = (grains + target_chunks - 1) / target_chunks * grain;
  const uint64_t num_chunks = static_cast<uint64_t>((n + chunk_size - 1) / chunk_size);

  job_fn_ = fn;
  job_n_ = n;
  job_chunk_size_ = chunk_size;
  chunks_done_.store(0, std::memory_order_relaxed);
  claim_.store(num_chunks << 32, std::memory_order_release);
  job_id_.fetch_add(1);
  wake_all(&job_id_, &worker_sleepers_);

  t_in_parallel_region = true;
  run_chunks();
  t_in_parallel_region = false;

  uint32_t done = chunks_done_.load(std::memory_order_acquire);
  while (done != num_chunks)
    done = wait_until_changed(&chunks_done_, done, &caller_sleepers_);
}

void ThreadPool::run_chunks() {
  uint64_t state = claim_.load(std::memory_order_acquire);
  for (;;) {
    const uint32_t total = static_cast<uint32_t>(state >> 32);
    const uint32_t chunk = static_cast<uint32_t>(state);
    if (chunk >= total) return;
    if (!claim_.compare_exchange_weak(state, state + 1, std::memory_order_acq_rel,
                                      std::memory_order_acquire)) {
      continue;  // state now holds the current value; try again
    }
    // The chunk is ours, so the job cannot finish (and its fields cannot change) before we do.
    const int64_t begin = static_cast<int64_t>(chunk) * job_chunk_size_;
    const int64_t end = std::min(job_n_, begin + job_chunk_size_);
    job_fn_.call(job_fn_.object, begin, end);
    if (chunks_done_.fetch_add(1) + 1 == total) wake_all(&chunks_done_, &caller_sleepers_);
    state = claim_.load(std::memory_order_acquire);
  }
}

void ThreadPool::worker_loop() {
  t_in_parallel_region = true;  // a worker only ever runs bodies: nested calls go inline
  // Not job_id_.load(): a thread that starts late must still notice the jobs (and the stop)
  // published since the constructor, which left job_id_ at 0.
  uint32_t seen = 0;
  for (;;) {
    seen = wait_until_changed(&job_id_, seen, &worker_sleepers_);
    if (stop_.load()) return;
    run_chunks();
  }
}

}  // namespace tessel
