// The shm transport's machinery (shm_transport.h): attaching, waiting with fault detection, the
// fault record, the per-collective handshake, and send/recv through ring-buffer channels. The
// collective algorithms themselves are in shm_collectives.cpp.
#include "dist/shm/shm_transport.h"

#include <pthread.h>
#include <sched.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "dist/process_info.h"

namespace tessel::dist::shm {

namespace {

// Waiting: spin a while (a peer on another core usually answers within a microsecond), then
// yield the core, and after kSleepAfterNs sleep between polls so that a rank waiting for a slow
// peer leaves the CPU to it. Where ranks outnumber CPUs the peer we wait for may need this very
// core, so the spin is short (4 ranks on 2 cores: 8-byte all-reduce 24 us with the long spin,
// 5-10 us with the short one).
constexpr uint32_t kSpins = 256;
constexpr uint32_t kOversubscribedSpins = 16;
constexpr uint64_t kSleepAfterNs = 5'000'000;
constexpr uint64_t kSleepNs = 50'000;
// How often a waiting rank checks that its peers are alive, and how often the heartbeat thread
// refreshes this rank's heartbeat.
constexpr uint64_t kCheckPeriodNs = 10'000'000;
constexpr uint64_t kBeatPeriodNs = 100'000'000;

uint64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

inline void cpu_relax() {
#if defined(__x86_64__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Whether two ranks' descriptors describe the same call (describe() would print the same).
bool same_call(const Call& a, const Call& b) {
  if (a.kind != b.kind || a.count != b.count || a.dtype != b.dtype) return false;
  const bool reduces = a.kind == CallKind::kAllReduce || a.kind == CallKind::kReduce ||
                       a.kind == CallKind::kReduceScatter;
  const bool rooted = a.kind == CallKind::kBroadcast || a.kind == CallKind::kReduce;
  return (!reduces || a.op == b.op) && (!rooted || a.peer == b.peer);
}

Call call_in_slot(SlotHeader& slot) {
  Call call;
  call.kind = static_cast<CallKind>(slot.kind);
  call.dtype = static_cast<DataType>(slot.dtype);
  call.op = static_cast<RedOp>(slot.op);
  call.peer = slot.root;
  call.count = slot.count;
  return call;
}

}  // namespace

// Backs off while a condition is not yet true, and says when to stop waiting.
class ShmTransport::Poller {
 public:
  // `activity` is read on every check, so the caller may narrow its peers as it goes.
  Poller(ShmTransport& transport, const Activity& activity)
      : transport_(transport), activity_(activity) {}

  // Called each time the awaited condition was false. `ready` re-checks it before a fault
  // is reported, since a peer may have delivered what we need and then left.
  Status idle(const std::function<bool()>& ready) {
    ++polls_;
    if (transport_.cancelled_.load(std::memory_order_relaxed)) return transport_.cancel_status();
    if (load_relaxed(transport_.segment_->header().fault.state) != 0 && !ready())
      return transport_.fault_status(activity_);
    if (polls_ < transport_.spins_) {
      cpu_relax();
      return ok_status();
    }
    if (polls_ % 16 == 0 || polls_ == transport_.spins_) {
      uint64_t now = now_ns();
      if (start_ns_ == 0) {
        // Peers are checked (a few system calls each) only once a wait has lasted a while: the
        // short waits of a busy pipeline should not pay for them.
        start_ns_ = now;
        next_check_ns_ = now + kCheckPeriodNs;
      }
      if (now >= next_check_ns_) {
        next_check_ns_ = now + kCheckPeriodNs;
        transport_.beat(now);
        TESSEL_TRY(transport_.check_peers(activity_, ready, now, now - start_ns_));
      }
      if (now - start_ns_ > kSleepAfterNs) {
        timespec pause{0, static_cast<long>(kSleepNs)};
        nanosleep(&pause, nullptr);
        return ok_status();
      }
    }
    sched_yield();
    return ok_status();
  }

  void reset() { polls_ = 0, start_ns_ = 0, next_check_ns_ = 0; }

 private:
  ShmTransport& transport_;
  const Activity& activity_;
  uint32_t polls_ = 0;
  uint64_t start_ns_ = 0;
  uint64_t next_check_ns_ = 0;
};

ShmTransport::ShmTransport(std::shared_ptr<Segment> segment, int rank, const CommOptions& options)
    : segment_(std::move(segment)),
      rank_(rank),
      nranks_(static_cast<int>(segment_->layout().nranks)),
      options_(options) {
  // Each rank's progress thread gets its own CPU from this process's allowed set, when there are
  // enough: waiting ranks then never take turns on one core (the scheduler is free to put two
  // polling threads together, and a poll that yields may hand the core to another program). The
  // application's threads are left alone. TESSEL_COMM_PIN=0 turns this off.
  cpu_set_t usable;
  const bool enough_cpus =
      sched_getaffinity(0, sizeof(usable), &usable) == 0 && nranks_ <= CPU_COUNT(&usable);
  spins_ = enough_cpus ? kSpins : kOversubscribedSpins;
  const char* pin = std::getenv("TESSEL_COMM_PIN");
  if (enough_cpus && (pin == nullptr || std::string_view(pin) != "0")) {
    for (int cpu = 0, seen = 0; cpu < CPU_SETSIZE; ++cpu)
      if (CPU_ISSET(cpu, &usable) && seen++ == rank_) pin_cpu_ = cpu;
  }
  RankBlock& me = segment_->rank(rank_);
  ProcessId id = this_process();
  me.pid = id.pid;
  me.start_time = id.start_time;
  me.pid_namespace = id.pid_namespace;
  beat(now_ns());
  store_release(me.state, RankState::kActive);
  // Liveness is this thread's: it runs whatever the application and the progress thread are
  // doing, and stops only with the process (SIGSTOP, a crash) or the communicator.
  heartbeat_thread_ = std::thread([this] {
    std::unique_lock lock(heartbeat_mu_);
    while (!heartbeat_cv_.wait_for(lock, std::chrono::nanoseconds(kBeatPeriodNs),
                                   [this] { return heartbeat_stop_; }))
      store_release(segment_->rank(rank_).heartbeat_ns, now_ns());
  });
}

ShmTransport::~ShmTransport() {
  stop_heartbeat();
}

void ShmTransport::stop_heartbeat() {
  {
    std::lock_guard lock(heartbeat_mu_);
    heartbeat_stop_ = true;
  }
  heartbeat_cv_.notify_all();
  if (heartbeat_thread_.joinable()) heartbeat_thread_.join();
}

void ShmTransport::on_progress_thread() {
  if (pin_cpu_ < 0) return;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(pin_cpu_, &one);
  pthread_setaffinity_np(pthread_self(), sizeof(one), &one);  // best effort
}

void ShmTransport::beat(uint64_t now) {
  if (now - last_beat_ns_ < kBeatPeriodNs / 2) return;
  last_beat_ns_ = now;
  store_release(segment_->rank(rank_).heartbeat_ns, now);
}

void ShmTransport::heartbeat() {
  beat(now_ns());
}

void ShmTransport::cancel(const Status& why) {
  {
    std::lock_guard lock(cancel_mu_);
    if (cancel_status_.ok()) cancel_status_ = why;
  }
  cancelled_.store(true, std::memory_order_release);
}

Status ShmTransport::cancel_status() {
  std::lock_guard lock(cancel_mu_);
  return cancel_status_;
}

void ShmTransport::leave(bool aborted) {
  stop_heartbeat();
  store_release(segment_->rank(rank_).state, aborted ? RankState::kAborted : RankState::kLeft);
  (void)segment_->unlink();  // normally removed after init already; this covers early failures
}

Status ShmTransport::wait(const std::function<bool()>& ready, const Activity& activity) {
  if (ready()) return ok_status();
  Poller poller(*this, activity);
  while (!ready())
    TESSEL_TRY(poller.idle(ready));
  return ok_status();
}

std::string ShmTransport::where(const Activity& activity) const {
  if (activity.seq == 0) return fmt::format("rank {} was in {}", rank_, describe(*activity.call));
  return fmt::format("rank {} was in {}, collective #{}", rank_, describe(*activity.call),
                     activity.seq);
}

uint64_t ShmTransport::all_peers() const {
  uint64_t mask = nranks_ >= 64 ? ~uint64_t{0} : (uint64_t{1} << nranks_) - 1;
  return mask & ~(uint64_t{1} << rank_);
}

namespace {
uint64_t bit(int rank) {
  return uint64_t{1} << rank;
}
}  // namespace

Status ShmTransport::check_peers(const Activity& activity, const std::function<bool()>& ready,
                                 uint64_t now, uint64_t waited_ns) {
  const uint64_t timeout_ns = static_cast<uint64_t>(options_.timeout_s * 1e9);
  for (int peer = 0; peer < nranks_; ++peer) {
    if (!(activity.peers & bit(peer))) continue;
    RankBlock& block = segment_->rank(peer);
    auto left_or_aborted = [&] {
      RankState state = load_acquire(block.state);
      return state == RankState::kLeft || state == RankState::kAborted;
    };
    auto report_leaving = [&] {
      bool left = load_acquire(block.state) == RankState::kLeft;
      return record_fault(left ? FaultKind::kLeft : FaultKind::kAborted, peer,
                          fmt::format("rank {} (pid {}) {} its communicator", peer, block.pid,
                                      left ? "destroyed" : "aborted"),
                          activity);
    };
    if (left_or_aborted()) {
      if (ready()) return ok_status();
      return report_leaving();
    }
    std::string why;
    ProcessId id{block.pid, block.start_time, block.pid_namespace};
    if (check_process(id, &why) == Liveness::kGone) {
      if (ready()) return ok_status();
      // A rank that destroys its communicator and then exits may do both between the state read
      // above and the process check; its recorded leaving, stored before it exited, is the cause.
      if (left_or_aborted()) return report_leaving();
      return record_fault(FaultKind::kDied, peer,
                          fmt::format("rank {} (pid {}) died: {}", peer, block.pid, why), activity);
    }
    uint64_t beat = load_acquire(block.heartbeat_ns);
    if (now > beat && now - beat > timeout_ns) {
      if (ready()) return ok_status();
      return record_fault(FaultKind::kUnresponsive, peer,
                          fmt::format("rank {} (pid {}) stopped responding: no heartbeat for "
                                      "{:.1f} s (timeout {:.1f} s)",
                                      peer, block.pid, (now - beat) / 1e9, options_.timeout_s),
                          activity);
    }
  }
  if (options_.op_timeout_s > 0 && waited_ns > options_.op_timeout_s * 1e9 && !ready()) {
    std::string whom;
    for (int peer = 0; peer < nranks_; ++peer)
      if (activity.peers & bit(peer))
        whom += fmt::format("{}{}", whom.empty() ? "rank " : ", ", peer);
    return deadline_exceeded(
        "{} waited {:.1f} s for {} (op timeout {:.1f} s); the peers are "
        "alive but did not reach this call",
        where(activity), waited_ns / 1e9, whom, options_.op_timeout_s);
  }
  return ok_status();
}

Status ShmTransport::record_fault(FaultKind kind, int culprit, const std::string& text,
                                  const Activity& activity) {
  FaultRecord& fault = segment_->header().fault;
  uint32_t expected = 0;
  if (std::atomic_ref<uint32_t>(fault.state)
          .compare_exchange_strong(expected, 1, std::memory_order_acq_rel)) {
    fault.kind = kind;
    fault.culprit = culprit;
    fault.reporter = rank_;
    size_t n = std::min(text.size(), sizeof(fault.text) - 1);
    std::memcpy(fault.text, text.data(), n);
    fault.text[n] = '\0';
    store_release(fault.state, 2u);
  }
  return fault_status(activity);
}

Status ShmTransport::fault_status(const Activity& activity) {
  FaultRecord& fault = segment_->header().fault;
  while (load_acquire(fault.state) != 2)
    cpu_relax();  // the writer is a few stores away
  std::string message = fmt::format("{} ({}", fault.text, where(activity));
  if (fault.reporter != rank_) message += fmt::format("; noticed by rank {}", fault.reporter);
  message += ")";
  return Status(fault.kind == FaultKind::kMismatch ? Code::kFailedPrecondition : Code::kAborted,
                message);
}

Status ShmTransport::run(std::span<const Call> calls) {
  bool any_point_to_point = false;
  for (const Call& call : calls) {
    if (is_point_to_point(call.kind)) {
      any_point_to_point = true;
      continue;
    }
    TESSEL_TRY(collective(call));
  }
  if (any_point_to_point) {
    std::vector<Call> p2p;
    for (const Call& call : calls)
      if (is_point_to_point(call.kind)) p2p.push_back(call);
    TESSEL_TRY(point_to_point(p2p));
  }
  return ok_status();
}

namespace {
// Bytes a rank puts in its slot on the latency path.
size_t slot_bytes(const Call& call, int nranks) {
  size_t bytes = call.count * dtype_size(call.dtype);
  switch (call.kind) {
    case CallKind::kReduceScatter:
      return bytes * nranks;
    case CallKind::kBarrier:
      return 0;
    default:
      return bytes;
  }
}
}  // namespace

Status ShmTransport::collective(const Call& call) {
  if (cancelled_.load(std::memory_order_acquire)) return cancel_status();
  const uint64_t seq = ++seq_;
  Activity activity{&call, seq, all_peers()};
  if (load_acquire(segment_->header().fault.state) != 0) return fault_status(activity);
  if (nranks_ == 1) {
    run_locally(call);
    return ok_status();
  }
  const bool small = slot_bytes(call, nranks_) <= segment_->layout().ll_bytes;
  TESSEL_TRY(handshake(call, seq, small));
  if (small) {
    slot_exchange(call, seq);
    return ok_status();
  }
  switch (call.kind) {
    case CallKind::kAllReduce:
      return all_reduce(call, activity);
    case CallKind::kReduce:
      return reduce(call, activity);
    case CallKind::kBroadcast:
      return broadcast(call, activity);
    case CallKind::kAllGather:
      return all_gather(call, activity);
    case CallKind::kReduceScatter:
      return reduce_scatter(call, activity);
    default:
      return ok_status();
  }
}

Status ShmTransport::handshake(const Call& call, uint64_t seq, bool small) {
  SlotHeader& mine = segment_->slot(rank_, seq);
  if (small) {
    bool sends = call.kind != CallKind::kBroadcast || call.peer == rank_;
    size_t bytes = slot_bytes(call, nranks_);
    if (sends && bytes > 0) std::memcpy(mine.data(), call.send, bytes);
  }
  mine.kind = static_cast<uint8_t>(call.kind);
  mine.dtype = static_cast<uint8_t>(call.dtype);
  mine.op = static_cast<uint8_t>(call.op);
  mine.root = call.peer;
  mine.count = call.count;
  store_release(mine.seq, seq);

  for (int peer = 0; peer < nranks_; ++peer) {
    if (peer == rank_) continue;
    SlotHeader& theirs = segment_->slot(peer, seq);
    if (load_acquire(theirs.seq) == seq) continue;
    TESSEL_TRY(wait([&] { return load_acquire(theirs.seq) == seq; }, {&call, seq, bit(peer)}));
  }
  if (!options_.check_calls) return ok_status();
  // Compare the fields that matter for this kind of call; words only when they differ.
  const Call my_call = call_in_slot(mine);
  bool same = true;
  for (int peer = 0; peer < nranks_ && same; ++peer)
    same = same_call(my_call, call_in_slot(segment_->slot(peer, seq)));
  if (same) return ok_status();

  std::vector<Call> calls;
  for (int peer = 0; peer < nranks_; ++peer)
    calls.push_back(call_in_slot(segment_->slot(peer, seq)));
  std::string mismatch = describe_mismatch(seq, calls);
  if (mismatch.empty()) return ok_status();
  return failed_precondition("{}", mismatch);
}

// ---- pipeline helpers ------------------------------------------------------------------------

Status ShmTransport::wait_buffers_free(uint64_t step, const Activity& activity) {
  const uint64_t depth = segment_->layout().depth;
  if (step <= depth) return ok_status();
  for (int peer = 0; peer < nranks_; ++peer)
    TESSEL_TRY(wait_counter(peer, &RankBlock::consumed, step - depth, activity));
  return ok_status();
}

Status ShmTransport::wait_counter(int peer, uint64_t RankBlock::*counter, uint64_t step,
                                  const Activity& activity) {
  uint64_t& field = segment_->rank(peer).*counter;
  if (load_acquire(field) >= step) return ok_status();
  return wait([&] { return load_acquire(field) >= step; },
              {activity.call, activity.seq, uint64_t{1} << peer});
}

void ShmTransport::publish(uint64_t RankBlock::*counter, uint64_t step) {
  store_release(segment_->rank(rank_).*counter, step);
}

// ---- send / recv -----------------------------------------------------------------------------

namespace {

// Every message starts with this, so the receiver can check it against its recv.
struct MessageHeader {
  uint64_t count;
  uint32_t magic;
  uint8_t dtype;
  uint8_t reserved[3];
};
static_assert(sizeof(MessageHeader) == 16);
constexpr uint32_t kMessageMagic = 0x7E55E1u;

void ring_write(unsigned char* ring, uint64_t capacity, uint64_t position, const void* from,
                size_t bytes) {
  size_t offset = position % capacity;
  size_t first = std::min<size_t>(bytes, capacity - offset);
  std::memcpy(ring + offset, from, first);
  std::memcpy(ring, static_cast<const unsigned char*>(from) + first, bytes - first);
}

void ring_read(const unsigned char* ring, uint64_t capacity, uint64_t position, void* to,
               size_t bytes) {
  size_t offset = position % capacity;
  size_t first = std::min<size_t>(bytes, capacity - offset);
  std::memcpy(to, ring + offset, first);
  std::memcpy(static_cast<unsigned char*>(to) + first, ring, bytes - first);
}

struct Transfer {
  const Call* call;
  size_t done = 0;   // bytes of header + data moved
  size_t total = 0;  // sizeof(MessageHeader) + data bytes
  MessageHeader header{};
};

}  // namespace

Status ShmTransport::point_to_point(std::span<const Call> calls) {
  const uint64_t capacity = segment_->layout().channel_bytes;
  std::vector<Transfer> transfers;
  for (const Call& call : calls)
    transfers.push_back({&call, 0, sizeof(MessageHeader) + call.count * dtype_size(call.dtype)});

  // Moves what fits now; returns the bytes moved, or a mismatch error.
  auto advance = [&](Transfer& t) -> Expected<size_t> {
    const Call& call = *t.call;
    if (call.kind == CallKind::kSend) {
      ChannelHead& channel = segment_->channel(rank_, call.peer);
      unsigned char* ring = segment_->channel_data(rank_, call.peer);
      uint64_t head = load_relaxed(channel.head);
      uint64_t space = capacity - (head - load_acquire(channel.tail));
      size_t moved = 0;
      if (t.done < sizeof(MessageHeader)) {
        if (space < sizeof(MessageHeader)) return size_t{0};
        MessageHeader header{call.count, kMessageMagic, static_cast<uint8_t>(call.dtype), {}};
        ring_write(ring, capacity, head, &header, sizeof(header));
        head += sizeof(header), space -= sizeof(header), moved += sizeof(header);
        t.done = sizeof(header);
      }
      size_t bytes = std::min<uint64_t>(space, t.total - t.done);
      if (bytes > 0) {
        ring_write(ring, capacity, head,
                   static_cast<const unsigned char*>(call.send) + (t.done - sizeof(MessageHeader)),
                   bytes);
        head += bytes, moved += bytes, t.done += bytes;
      }
      if (moved) store_release(channel.head, head);
      return moved;
    }
    ChannelHead& channel = segment_->channel(call.peer, rank_);
    const unsigned char* ring = segment_->channel_data(call.peer, rank_);
    uint64_t tail = load_relaxed(channel.tail);
    uint64_t available = load_acquire(channel.head) - tail;
    size_t moved = 0;
    if (t.done < sizeof(MessageHeader)) {
      if (available < sizeof(MessageHeader)) return size_t{0};
      ring_read(ring, capacity, tail, &t.header, sizeof(t.header));
      if (t.header.magic != kMessageMagic)
        return internal_error("rank {}: corrupt message header from rank {}", rank_, call.peer);
      Call sent{CallKind::kSend, static_cast<DataType>(t.header.dtype),
                RedOp::kSum,     rank_,
                t.header.count,  nullptr,
                nullptr};
      if (sent.count != call.count || sent.dtype != call.dtype) {
        Activity activity{&call, 0, bit(call.peer)};
        return record_fault(FaultKind::kMismatch, call.peer,
                            fmt::format("mismatched send/recv: rank {} called {} but rank {} "
                                        "called {}",
                                        call.peer, describe(sent), rank_, describe(call)),
                            activity);
      }
      tail += sizeof(MessageHeader), available -= sizeof(MessageHeader);
      moved += sizeof(MessageHeader);
      t.done = sizeof(MessageHeader);
    }
    size_t bytes = std::min<uint64_t>(available, t.total - t.done);
    if (bytes > 0) {
      ring_read(ring, capacity, tail,
                static_cast<unsigned char*>(call.recv) + (t.done - sizeof(MessageHeader)), bytes);
      tail += bytes, moved += bytes, t.done += bytes;
    }
    if (moved) store_release(channel.tail, tail);
    return moved;
  };

  // Channels are FIFO: of the transfers to one peer in one direction only the first unfinished
  // one may move. Only the peers of unfinished transfers are watched: a peer that is done with
  // this rank may leave.
  Activity activity{&calls.front(), 0, 0};
  Poller poller(*this, activity);
  std::vector<char> sending_to(nranks_), receiving_from(nranks_);
  for (;;) {
    std::fill(sending_to.begin(), sending_to.end(), 0);
    std::fill(receiving_from.begin(), receiving_from.end(), 0);
    bool all_done = true;
    size_t moved = 0;
    for (Transfer& t : transfers) {
      if (t.done == t.total) continue;
      all_done = false;
      auto& busy = t.call->kind == CallKind::kSend ? sending_to : receiving_from;
      if (busy[t.call->peer]) continue;
      busy[t.call->peer] = 1;
      TESSEL_ASSIGN_OR_RETURN(size_t bytes, advance(t));
      moved += bytes;
    }
    if (all_done) return ok_status();
    activity.peers = 0;
    for (const Transfer& t : transfers)
      if (t.done < t.total) {
        activity.peers |= bit(t.call->peer);
        if (activity.peers == bit(t.call->peer)) activity.call = t.call;
      }
    if (moved > 0) {
      poller.reset();
      continue;
    }
    // Nothing could move. Before a fault is reported, look once more whether something can.
    auto can_move = [&] {
      for (const Transfer& t : transfers) {
        if (t.done == t.total) continue;
        const Call& call = *t.call;
        if (call.kind == CallKind::kSend) {
          ChannelHead& channel = segment_->channel(rank_, call.peer);
          if (load_acquire(channel.tail) + capacity > load_relaxed(channel.head)) return true;
        } else {
          ChannelHead& channel = segment_->channel(call.peer, rank_);
          if (load_acquire(channel.head) > load_relaxed(channel.tail)) return true;
        }
      }
      return false;
    };
    TESSEL_TRY(poller.idle(can_move));
  }
}

}  // namespace tessel::dist::shm
