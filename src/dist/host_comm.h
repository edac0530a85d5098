// A communicator for CPU memory: calls are queued and a progress thread runs them through a
// Transport (shm segment or MPI), so that enqueueing returns at once, as NCCL's calls do.
//
// After a call fails because of a peer (death, mismatch, timeout), the communicator is broken:
// queued calls fail with the same error and later calls are refused at once.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "dist/comm.h"
#include "dist/transport.h"

namespace tessel::dist {

class HostComm final : public Comm {
 public:
  HostComm(int rank, int nranks, std::unique_ptr<Transport> transport);
  ~HostComm() override;

  const char* backend_name() const override { return transport_->name(); }
  Status submit(std::span<const Call> calls, Stream* stream, uint64_t after) override;
  Status async_error() override;
  Status destroy() override;
  void abort() override;

 private:
  // The calls of one submission; a single call (the usual case) needs no allocation.
  class Calls {
   public:
    Calls() = default;
    explicit Calls(std::span<const Call> calls) {
      if (calls.size() == 1)
        one_ = calls[0];
      else
        many_.assign(calls.begin(), calls.end());
      size_ = calls.size();
    }
    std::span<const Call> view() const {
      return size_ == 1 ? std::span<const Call>(&one_, 1) : std::span<const Call>(many_);
    }

   private:
    Call one_;
    std::vector<Call> many_;
    size_t size_ = 0;
  };

  struct Task {
    Calls calls;
    Stream* stream;
    uint64_t ticket;
    uint64_t after;  // runs once the stream finished every ticket up to this one
  };

  void progress_loop();
  bool next_task(Task& task);
  void break_with(const Status& status);

  std::unique_ptr<Transport> transport_;
  std::mutex mu_;
  std::condition_variable wake_;
  std::deque<Task> queue_;
  std::atomic<size_t> queued_{0};  // queue_.size(), readable without the lock
  bool stopping_ = false;
  bool left_ = false;
  Status broken_;  // sticky; guarded by mu_
  std::atomic<bool> is_broken_{false};
  std::thread thread_;
};

}  // namespace tessel::dist
