// The progress thread of a CPU communicator (host_comm.h): queue, ordering on streams, and the
// sticky error that a failed call leaves behind.
#include "dist/host_comm.h"

#include <chrono>

#include "support/log.h"

namespace tessel::dist {

namespace {
// A progress thread that just finished a call polls the queue this long before it sleeps: calls
// made back to back (a training step's buckets, a benchmark loop) then cost no wake-up.
constexpr auto kPollBeforeSleep = std::chrono::microseconds(50);
constexpr auto kHeartbeatPeriod = std::chrono::milliseconds(100);
}  // namespace

HostComm::HostComm(int rank, int nranks, std::unique_ptr<Transport> transport)
    : Comm(rank, nranks), transport_(std::move(transport)) {
  thread_ = std::thread([this] { progress_loop(); });
}

HostComm::~HostComm() {
  if (thread_.joinable()) abort();
}

Status HostComm::submit(std::span<const Call> calls, Stream* stream, uint64_t after) {
  std::lock_guard lock(mu_);
  if (!broken_.ok()) return broken_;
  if (stopping_) return failed_precondition("the communicator is being destroyed");
  // The ticket is taken under the lock, so this communicator's queue is in ticket order.
  uint64_t ticket = stream->issue();
  queue_.push_back(Task{Calls(calls), stream, ticket,
                        after == kAfterPrevious ? ticket - 1 : std::min(after, ticket - 1)});
  queued_.fetch_add(1, std::memory_order_release);
  wake_.notify_one();
  return ok_status();
}

Status HostComm::async_error() {
  std::lock_guard lock(mu_);
  return broken_;
}

void HostComm::break_with(const Status& status) {
  std::lock_guard lock(mu_);
  if (broken_.ok()) broken_ = status;
  is_broken_.store(true, std::memory_order_release);
}

bool HostComm::next_task(Task& task) {
  auto poll_until = std::chrono::steady_clock::now() + kPollBeforeSleep;
  while (queued_.load(std::memory_order_acquire) == 0 &&
         std::chrono::steady_clock::now() < poll_until) {
#if defined(__x86_64__)
    __builtin_ia32_pause();
#endif
  }
  std::unique_lock lock(mu_);
  while (queue_.empty()) {
    if (stopping_) return false;
    if (!wake_.wait_for(lock, kHeartbeatPeriod, [&] { return !queue_.empty() || stopping_; })) {
      lock.unlock();
      transport_->heartbeat();
      lock.lock();
    }
  }
  task = std::move(queue_.front());
  queue_.pop_front();
  queued_.fetch_sub(1, std::memory_order_release);
  return true;
}

void HostComm::progress_loop() {
  transport_->on_progress_thread();
  Task task;
  while (next_task(task)) {
    bool my_turn = task.stream->wait_turn(
        task.after, [&] { return is_broken_.load(std::memory_order_acquire); },
        [&] { transport_->heartbeat(); });
    Status status;
    if (my_turn && !is_broken_.load(std::memory_order_acquire)) {
      status = transport_->run(task.calls.view());
      if (!status.ok()) {
        log_debug("rank {}: {}", rank(), status.to_string());
        break_with(status);
      }
    } else {
      std::lock_guard lock(mu_);
      status = broken_;
    }
    task.stream->complete(task.ticket, status);
  }
}

Status HostComm::destroy() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    wake_.notify_one();
  }
  if (thread_.joinable()) thread_.join();
  if (!left_) {
    left_ = true;
    transport_->leave(/*aborted=*/false);
  }
  std::lock_guard lock(mu_);
  return broken_;
}

void HostComm::abort() {
  Status why = aborted("the communicator was aborted on this rank (tesselCommAbort)");
  transport_->cancel(why);
  break_with(why);
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    wake_.notify_one();
  }
  if (thread_.joinable()) thread_.join();
  if (!left_) {
    left_ = true;
    transport_->leave(/*aborted=*/true);
  }
}

}  // namespace tessel::dist
