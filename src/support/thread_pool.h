// The thread pool that runs tessel's CPU kernels: one thread per physical core (TESSEL_THREADS=N
// overrides), shared by the whole process through ThreadPool::global().
//
//   parallel_for(rows, /*grain=*/16, [&](int64_t begin, int64_t end) {
//     for (int64_t r = begin; r < end; ++r) scale_row(r);
//   });
//
// The range [0, n) is cut into chunks whose boundaries are multiples of `grain` (only the last
// chunk may be shorter), and the threads claim chunks until none are left, so a thread that gets
// descheduled on a busy machine does not hold up the others. The calling thread works too: a pool
// of N threads starts N-1 workers.
//
// Rules that keep it deadlock-free:
//  - A parallel_for called from inside another one's body runs inline on the calling thread, as
//    one call fn(0, n).
//  - If another thread's parallel_for is using the pool at that moment, the call runs inline on
//    its own thread instead of waiting (callers never block on each other).
//  - fn must not throw (errors in tessel are values; a kernel has nothing to throw).
//
// Overhead is a few hundred nanoseconds when the workers are awake (after each job they spin
// briefly, then yield their CPU in a loop for up to a millisecond, then sleep), a futex wake-up
// when they are asleep (microseconds; milliseconds on a virtual machine that halted the CPU).
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

namespace tessel {

// Threads the global pool uses when TESSEL_THREADS is not set: the physical cores this process
// may run on (its affinity mask; hyper-threads of one core count once).
int default_thread_count();

class ThreadPool {
 public:
  // A pool of `num_threads` threads in total, counting the caller of parallel_for (so
  // num_threads - 1 workers are started). num_threads < 1 is treated as 1.
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // The process-wide pool, made on first use: TESSEL_THREADS if set, else default_thread_count().
  static ThreadPool& global();

  int num_threads() const { return static_cast<int>(workers_.size()) + 1; }

  // True on a thread that is running a parallel_for body right now (nested calls run inline).
  static bool in_parallel_region();

  // Calls fn(begin, end) over disjoint ranges that together cover [0, n) exactly once, on up to
  // num_threads() threads, and returns when all of them are done. grain < 1 is treated as 1.
  template <typename Fn>
  void parallel_for(int64_t n, int64_t grain, Fn&& fn) {
    run(n, grain, range_fn(fn), /*exact_chunks=*/false);
  }

  // The same, but every chunk is exactly `chunk` long (the last may be shorter), however many
  // that makes: for few big uneven items, such as a gemm's blocks, where parallel_for's four
  // chunks per thread put 3 to 9 blocks in one chunk at gpt_mini's shapes, and the last chunk
  // left the other thread idle for all of them. chunk < 1 is treated as 1.
  template <typename Fn>
  void parallel_for_chunks(int64_t n, int64_t chunk, Fn&& fn) {
    run(n, chunk, range_fn(fn), /*exact_chunks=*/true);
  }

 private:
  // A borrowed callable without the allocation of std::function.
  struct RangeFn {
    void* object;
    void (*call)(void*, int64_t, int64_t);
  };

  // fn(begin, end) behind a plain function pointer, for the non-template run().
  template <typename Fn>
  static RangeFn range_fn(Fn& fn) {
    return RangeFn{&fn, [](void* f, int64_t b, int64_t e) { (*static_cast<Fn*>(f))(b, e); }};
  }
  void run(int64_t n, int64_t grain, RangeFn fn, bool exact_chunks);
  void worker_loop();
  // Claims and runs chunks of the current job until none are left.
  void run_chunks();

  std::vector<std::thread> workers_;

  // Only one caller drives the workers at a time; others run inline (see the rules above).
  std::mutex dispatch_mutex_;

  // The current job. The fields are written by the dispatching caller before it publishes the job
  // through claim_ (release) and stay unchanged until every chunk is done, so a thread that has
  // claimed a chunk may read them.
  RangeFn job_fn_{nullptr, nullptr};
  int64_t job_n_ = 0;
  int64_t job_chunk_size_ = 0;
  // (number of chunks << 32) | next chunk to claim. A claim is a compare-and-swap on this word,
  // so a worker that wakes up late can only ever claim an unclaimed chunk of the current job.
  std::atomic<uint64_t> claim_{0};
  std::atomic<uint32_t> chunks_done_{0};

  // Bumped for every job; sleeping workers wait on it. The sleeper counts let a waker skip the
  // futex system call when nobody sleeps.
  std::atomic<uint32_t> job_id_{0};
  std::atomic<int> worker_sleepers_{0};
  std::atomic<int> caller_sleepers_{0};
  std::atomic<bool> stop_{false};
};

// ThreadPool::global().parallel_for(n, grain, fn).
template <typename Fn>
void parallel_for(int64_t n, int64_t grain, Fn&& fn) {
  ThreadPool::global().parallel_for(n, grain, std::forward<Fn>(fn));
}

}  // namespace tessel
