// The shm transport: ranks on one machine exchange data through a shared segment (segment.h).
//
// Every collective starts with a handshake: each rank writes the call's descriptor and sequence
// number into its slot and waits for every peer's slot to show the same sequence number; the
// descriptors are then compared, so mismatched calls fail with what each rank called. Calls
// whose data fits a slot carry it in the slot (the latency path: one exchange of cache lines,
// then every rank reduces or copies on its own). Larger ones run the pipelined bandwidth path:
// the buffer is cut into chunks, each chunk into one part per rank; ranks stage the parts others
// need, each rank reduces its own part from all ranks' data (reduce-scatter), publishes it, and
// copies the others' reduced parts (all-gather), with `depth` chunks in flight.
//
// While it waits, a rank watches for faults: a peer whose process is gone (kill -9) or whose
// heartbeat stopped (a thread of each rank's own refreshes it every 100 ms for as long as the
// process runs, so a rank that is merely slow, arriving last at every call, is never taken for
// dead, while a stopped or frozen process is), a peer that left or aborted, the shared fault
// record, a cancel from tesselCommAbort, and the call's own time limit. The first rank to see a
// fault records it in the segment, so every rank fails with the same message naming the rank at
// fault.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <thread>

#include "dist/shm/segment.h"
#include "dist/transport.h"

namespace tessel::dist::shm {

class ShmTransport final : public Transport {
 public:
  // Attaches `rank` to the segment: records its process identity and marks it active.
  ShmTransport(std::shared_ptr<Segment> segment, int rank, const CommOptions& options);
  ~ShmTransport() override;

  const char* name() const override { return "shm"; }
  // Pins the progress thread to one CPU per rank (see shm_transport.cpp).
  void on_progress_thread() override;
  Status run(std::span<const Call> calls) override;
  void heartbeat() override;
  void cancel(const Status& why) override;
  void leave(bool aborted) override;

  Segment& segment() { return *segment_; }

 private:
  // What this rank is doing: the call and its collective number (0 for send and receive), for
  // error messages, and the peers it waits for (bit r = rank r), whose health it watches.
  struct Activity {
    const Call* call;
    uint64_t seq;
    uint64_t peers;
  };
  uint64_t all_peers() const;
  class Poller;

  Status wait(const std::function<bool()>& ready, const Activity& activity);
  Status check_peers(const Activity& activity, const std::function<bool()>& ready, uint64_t now_ns,
                     uint64_t waited_ns);
  Status record_fault(FaultKind kind, int culprit, const std::string& text,
                      const Activity& activity);
  Status fault_status(const Activity& activity);
  Status cancel_status();
  std::string where(const Activity& activity) const;
  void beat(uint64_t now_ns);
  void stop_heartbeat();

  Status collective(const Call& call);
  Status handshake(const Call& call, uint64_t seq, bool small);
  void slot_exchange(const Call& call, uint64_t seq);  // latency path, after the handshake
  Status all_reduce(const Call& call, const Activity& activity);
  Status reduce(const Call& call, const Activity& activity);
  Status reduce_parts(const Call& call, int root, const Activity& activity);
  Status broadcast(const Call& call, const Activity& activity);
  Status all_gather(const Call& call, const Activity& activity);
  Status reduce_scatter(const Call& call, const Activity& activity);
  void run_locally(const Call& call);  // a communicator of one rank
  Status point_to_point(std::span<const Call> calls);

  // Pipeline helpers: steps count up across calls, the same on every rank.
  Status wait_buffers_free(uint64_t step, const Activity& activity);
  Status wait_counter(int peer, uint64_t RankBlock::*counter, uint64_t step,
                      const Activity& activity);
  void publish(uint64_t RankBlock::*counter, uint64_t step);

  std::shared_ptr<Segment> segment_;
  int rank_;
  int nranks_;
  CommOptions options_;
  uint64_t seq_ = 0;   // collectives run so far
  uint64_t step_ = 0;  // pipeline steps run so far
  uint64_t last_beat_ns_ = 0;
  int pin_cpu_ = -1;    // the CPU for the progress thread, or -1
  uint32_t spins_ = 0;  // polls a wait spins before it yields
  // The heartbeat thread, stopped by leave() or the destructor.
  std::thread heartbeat_thread_;
  std::mutex heartbeat_mu_;
  std::condition_variable heartbeat_cv_;
  bool heartbeat_stop_ = false;
  std::atomic<bool> cancelled_{false};
  std::mutex cancel_mu_;
  Status cancel_status_;
};

}  // namespace tessel::dist::shm
