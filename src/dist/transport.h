// The interface between a communicator's progress thread and the engine that moves bytes (shm
// segment, MPI). A transport runs calls to completion on the progress thread, watching for
// faults while it waits; everything else about a communicator (queues, streams, groups, the
// sticky error) lives in HostComm (host_comm.h), once for every engine.
#pragma once

#include <span>

#include "dist/types.h"
#include "support/status.h"

namespace tessel::dist {

// Time limits and checks shared by every backend (tesselConfig_t in the C API).
struct CommOptions {
  double timeout_s = 30;    // a peer that cannot be seen alive for this long is dead
  double op_timeout_s = 0;  // a call may wait this long for a live peer; 0 = no limit
  bool check_calls = true;  // compare each collective across ranks before moving data
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual const char* name() const = 0;  // "shm", "mpi"

  // Runs one group of calls to completion: the collectives in the order given, then the sends
  // and receives together (so a ring of sends and receives in one group cannot deadlock). Every
  // rank passes the same collectives in the same order. Fails with a message naming the peer
  // at fault if a peer dies, leaves or calls something else.
  virtual Status run(std::span<const Call> calls) = 0;

  // Called once on the progress thread before its first call (to set its CPU affinity, say).
  virtual void on_progress_thread() {}

  // Called by the idle progress thread about every 100 ms, so that peers see this rank alive.
  virtual void heartbeat() {}

  // From any thread: makes a run() in progress return `why` soon, and every later run() too.
  virtual void cancel(const Status& why) = 0;

  // Tells the peers that this rank is gone (aborted: by tesselCommAbort) and frees resources.
  // No run() may be in progress.
  virtual void leave(bool aborted) = 0;
};

}  // namespace tessel::dist
