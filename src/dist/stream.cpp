// Tickets, ordered completion and waiting for host streams (stream.h).
#include "dist/stream.h"

#include <chrono>
#include <memory>
#include <thread>

namespace tessel::dist {

std::unique_ptr<Stream> Stream::wrap_cuda(void* cuda_stream, std::function<Status(void*)> sync) {
  auto stream = std::make_unique<Stream>();
  stream->cuda_stream_ = cuda_stream;
  stream->cuda_sync_ = std::move(sync);
  return stream;
}

namespace {
// A thread's default stream; when the thread ends, it waits for the calls it still has queued.
struct ThreadStream {
  Stream stream;
  ~ThreadStream() { (void)stream.synchronize(); }
};
}  // namespace

Stream& Stream::default_stream() {
  thread_local ThreadStream stream;
  return stream.stream;
}

uint64_t Stream::issue() {
  return issued_.fetch_add(1, std::memory_order_acq_rel) + 1;
}

bool Stream::wait_turn(uint64_t after, const std::function<bool()>& give_up,
                       const std::function<void()>& idle) {
  using Clock = std::chrono::steady_clock;
  auto last_idle = Clock::now();
  for (int spins = 0; done_.load(std::memory_order_acquire) < after; ++spins) {
    if (give_up()) return false;
    if (spins < 2000) continue;
    std::this_thread::sleep_for(std::chrono::microseconds(50));
    if (Clock::now() - last_idle > std::chrono::milliseconds(100)) {
      idle();
      last_idle = Clock::now();
    }
  }
  return true;
}

void Stream::complete(uint64_t ticket, const Status& status) {
  std::lock_guard lock(mu_);
  if (!status.ok() && first_error_.ok()) first_error_ = status;
  uint64_t done = done_.load(std::memory_order_relaxed);
  if (ticket != done + 1) {
    finished_early_.insert(ticket);
    return;
  }
  ++done;
  while (!finished_early_.empty() && *finished_early_.begin() == done + 1) {
    finished_early_.erase(finished_early_.begin());
    ++done;
  }
  done_.store(done, std::memory_order_release);
  if (!wanted_.empty() && *wanted_.begin() <= done) reached_.notify_all();
}

Status Stream::wait_for(uint64_t ticket) {
  if (cuda_stream_) return cuda_sync_ ? cuda_sync_(cuda_stream_) : ok_status();
  // Spin a little first: a collective that is nearly done finishes sooner than a futex wake-up.
  for (int spins = 0; spins < 4000 && done_.load(std::memory_order_acquire) < ticket; ++spins) {
#if defined(__x86_64__)
    __builtin_ia32_pause();
#endif
  }
  if (done_.load(std::memory_order_acquire) < ticket) {
    std::unique_lock lock(mu_);
    auto wanted = wanted_.insert(ticket);
    reached_.wait(lock, [&] { return done_.load(std::memory_order_relaxed) >= ticket; });
    wanted_.erase(wanted);
  }
  return first_error();
}

Status Stream::synchronize() {
  return wait_for(last_issued());
}

Status Stream::first_error() const {
  std::lock_guard lock(mu_);
  return first_error_;
}

}  // namespace tessel::dist
