// Host streams and events: the CPU meaning of NCCL's cudaStream_t argument.
//
// A stream orders calls. Each call enqueued on a stream takes the next ticket and waits, before
// it runs, until every earlier ticket has finished, so calls on one stream run in the order they
// were made even when they go to different communicators. The calls of one group
// (tesselGroupStart/End) wait only for what came before the group, not for each other, so one
// thread can drive several ranks' communicators at once, as with NCCL.
// synchronize() waits for every ticket issued so far and returns the stream's first error,
// which stays (like a CUDA stream error) until the stream is destroyed. An event remembers the
// last ticket issued when it was recorded.
//
// A stream made by wrap_cuda() carries a cudaStream_t for the nccl backend instead; tickets are
// not used there and synchronize() asks the CUDA driver.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <set>

#include "support/status.h"

namespace tessel::dist {

class Stream {
 public:
  Stream() = default;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  // A stream for the nccl backend; `sync` waits for the CUDA stream.
  static std::unique_ptr<Stream> wrap_cuda(void* cuda_stream, std::function<Status(void*)> sync);
  // The stream used where the caller passes none (NULL in the C API): one per thread, as
  // CUDA's per-thread default stream, so that ranks run as threads do not wait for each other.
  static Stream& default_stream();

  void* cuda_stream() const { return cuda_stream_; }

  // Takes the next ticket (1, 2, ...).
  uint64_t issue();
  // Blocks until every ticket up to `after` has finished or `give_up()` returns true; returns
  // false in that case. Calls `idle()` about every 100 ms while it waits.
  bool wait_turn(uint64_t after, const std::function<bool()>& give_up,
                 const std::function<void()>& idle);
  // Marks `ticket` finished; the first failure is kept.
  void complete(uint64_t ticket, const Status& status);

  // Waits for every ticket issued so far; returns the first error seen on the stream.
  Status synchronize();
  // Waits until `ticket` and all before it finished.
  Status wait_for(uint64_t ticket);
  // True when `ticket` and all before it finished.
  bool finished(uint64_t ticket) const { return done_.load(std::memory_order_acquire) >= ticket; }
  uint64_t last_issued() const { return issued_.load(std::memory_order_acquire); }
  Status first_error() const;

 private:
  std::atomic<uint64_t> issued_{0};
  // Every ticket <= done_ has finished. Tickets can finish out of order (an aborted
  // communicator fails its queued calls at once), so later ones wait in `finished_early_`.
  std::atomic<uint64_t> done_{0};
  mutable std::mutex mu_;  // guards what follows; done_ changes only under it
  std::set<uint64_t> finished_early_;
  // Tickets that sleeping waiters need: complete() wakes them only when one is reached, not
  // once per finished call.
  std::multiset<uint64_t> wanted_;
  std::condition_variable reached_;
  Status first_error_;
  void* cuda_stream_ = nullptr;
  std::function<Status(void*)> cuda_sync_;
};

class Event {
 public:
  void record(Stream* stream) {
    stream_ = stream;
    ticket_ = stream->last_issued();
  }
  Status synchronize() const { return stream_ ? stream_->wait_for(ticket_) : ok_status(); }
  bool finished() const { return stream_ == nullptr || stream_->finished(ticket_); }

 private:
  Stream* stream_ = nullptr;
  uint64_t ticket_ = 0;
};

}  // namespace tessel::dist
