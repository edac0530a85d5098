// A communicator as the C API and the process group see it: who am I, how many are we, and
// "enqueue these calls on that stream". Two kinds exist: HostComm (host_comm.h), which runs the
// calls on a progress thread through a Transport (shm, mpi), and the nccl communicator, which
// hands them to libnccl on a CUDA stream.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "dist/stream.h"
#include "dist/types.h"
#include "support/status.h"

namespace tessel::dist {

class Comm {
 public:
  Comm(int rank, int nranks) : rank_(rank), nranks_(nranks) {}
  virtual ~Comm() = default;
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;

  int rank() const { return rank_; }
  int size() const { return nranks_; }
  virtual const char* backend_name() const = 0;

  // Enqueues a group of validated calls on `stream` and returns without waiting for peers. They
  // run once the stream's tickets up to `after` have finished (kAfterPrevious: all tickets
  // issued before this submission). Fails at once if the communicator is already broken.
  static constexpr uint64_t kAfterPrevious = ~uint64_t{0};
  virtual Status submit(std::span<const Call> calls, Stream* stream,
                        uint64_t after = kAfterPrevious) = 0;

  // The error that broke the communicator (a dead peer, a mismatched call), or ok.
  virtual Status async_error() = 0;

  // Waits for queued calls, tells the peers this rank left, frees resources.
  virtual Status destroy() = 0;
  // Cancels queued and running calls, tells the peers, frees resources.
  virtual void abort() = 0;

 private:
  int rank_;
  int nranks_;
};

}  // namespace tessel::dist
