// The C++ face of the collectives, for the trainer: a group of ranks whose operations return a
// Work handle at once and run on the group's own stream, in the order they were made.
//
//   auto group = ProcessGroup::from_env();            // under `tessel launch`, torchrun, mpirun
//   Expected<Work> work = (*group)->all_reduce(grad, n, DataType::kFloat32, RedOp::kAvg);
//   ... compute while it runs ...
//   TESSEL_TRY(work->wait());
//
// Buffers are raw pointers with element counts, as in the C API; the tensor layer adapts tensors
// (comm_dtype() maps their element types). A failure (a dead rank, mismatched calls) breaks the
// group: wait() and every later call return the error, naming the rank at fault.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "dist/comm.h"
#include "dist/comm_init.h"
#include "support/dtype.h"

namespace tessel::dist {

// An operation in flight; wait() returns its error, or the group's if an earlier call failed.
class Work {
 public:
  Work(std::shared_ptr<Stream> stream, uint64_t ticket)
      : stream_(std::move(stream)), ticket_(ticket) {}
  Status wait() const { return stream_->wait_for(ticket_); }
  bool done() const { return stream_->finished(ticket_); }

 private:
  std::shared_ptr<Stream> stream_;
  uint64_t ticket_;
};

struct ProcessGroupOptions {
  std::optional<Backend> backend;  // none: TESSEL_BACKEND, else shm
  double timeout_s = -1;           // below zero: from the environment (comm_init.h)
  double op_timeout_s = -1;
  int check_calls = -1;
};

class ProcessGroup {
 public:
  // This process's rank of the job in the environment (rendezvous.h).
  static Expected<std::unique_ptr<ProcessGroup>> from_env(const ProcessGroupOptions& options = {});
  // `nranks` groups of one process, one per rank, for ranks as threads (shm).
  static Expected<std::vector<std::unique_ptr<ProcessGroup>>> in_process(
      int nranks, const ProcessGroupOptions& options = {});
  ~ProcessGroup();

  int rank() const { return comm_->rank(); }
  int size() const { return comm_->size(); }
  const char* backend() const { return comm_->backend_name(); }

  Expected<Work> all_reduce(void* data, size_t count, DataType type, RedOp op) {
    return all_reduce(data, data, count, type, op);
  }
  Expected<Work> all_reduce(const void* send, void* recv, size_t count, DataType type, RedOp op);
  Expected<Work> broadcast(void* data, size_t count, DataType type, int root);
  // `recv` is used on the root only.
  Expected<Work> reduce(const void* send, void* recv, size_t count, DataType type, RedOp op,
                        int root);
  // `recv` holds size() * count elements.
  Expected<Work> all_gather(const void* send, void* recv, size_t count, DataType type);
  // `send` holds size() * count elements.
  Expected<Work> reduce_scatter(const void* send, void* recv, size_t count, DataType type,
                                RedOp op);
  Expected<Work> send(const void* data, size_t count, DataType type, int peer);
  Expected<Work> recv(void* data, size_t count, DataType type, int peer);
  // Several calls issued together: the sends and receives of an exchange must be, so that
  // neither side waits for the other to go first.
  Expected<Work> group(std::vector<Call> calls);
  // Returns once every rank has called it.
  Status barrier();

  // The error that broke the group, or ok.
  Status error() const { return comm_->async_error(); }
  // Cancels what is queued and running and tells the peers; the group is unusable afterwards.
  void abort();

  // The collective element type of a tensor element type (bool has none).
  static Expected<DataType> comm_dtype(DType dtype);

 private:
  explicit ProcessGroup(std::unique_ptr<Comm> comm);

  std::unique_ptr<Comm> comm_;
  std::shared_ptr<Stream> stream_;
  bool aborted_ = false;
};

}  // namespace tessel::dist
