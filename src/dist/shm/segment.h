// The shared-memory segment of one shm communicator: its layout, and creating, opening and
// removing it. Every rank maps the same POSIX shared-memory object (or, for ranks that are
// threads of one process, one anonymous shared mapping); all fields are plain integers accessed
// through std::atomic_ref, and all pointers are offsets from the start.
//
//   +-------------------+ header: magic, layout, the fault record (first fault wins)
//   | rank blocks  x n  | per rank: state + pid + start time, heartbeat, and the pipeline
//   |                   | counters posted / reduced / consumed, each on its own 128-byte line
//   | slots    x n x 2  | per rank and collective parity: the call's descriptor, its sequence
//   |                   | number (written last), and its data when the call is small
//   | staging  x n      | per rank: `depth` pipeline buffers of `chunk_bytes`
//   | results  x n      | per rank: `depth` buffers for the parts it reduced
//   | channels x n x n  | per ordered pair: a ring buffer for send/recv with head and tail
//   +-------------------+
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "support/status.h"

namespace tessel::dist::shm {

// Two cache lines: the adjacent-line prefetcher then never makes two writers share one.
inline constexpr size_t kLine = 128;
inline constexpr uint64_t kMagic = 0x6C6D687373657474ull;  // "ttesshml"
inline constexpr uint32_t kVersion = 1;

// Sizes chosen by rank 0 (from TESSEL_SHM_* variables or defaults) and copied to the header,
// so every rank works with the same ones.
struct Layout {
  uint32_t nranks = 0;
  uint32_t depth = 0;          // pipeline buffers per rank
  uint64_t chunk_bytes = 0;    // one pipeline buffer
  uint64_t ll_bytes = 0;       // data capacity of a slot: calls up to this size use the slots
  uint64_t channel_bytes = 0;  // ring capacity of one send/recv channel
  uint64_t stream_bytes = 0;   // outputs from this size up are written around the cache
  uint64_t ranks_offset = 0;
  uint64_t slots_offset = 0;
  uint64_t slot_stride = 0;
  uint64_t staging_offset = 0;
  uint64_t results_offset = 0;
  uint64_t channels_offset = 0;
  uint64_t channel_stride = 0;
  uint64_t total_bytes = 0;
};

struct Params {
  uint64_t chunk_bytes = 256 << 10;
  uint32_t depth = 4;
  uint64_t ll_bytes = 16 << 10;
  uint64_t channel_bytes = 256 << 10;
  uint64_t stream_bytes = 16 << 20;  // half the L3 of the machines we know
};
// Defaults, overridden by TESSEL_SHM_CHUNK_BYTES, TESSEL_SHM_DEPTH, TESSEL_SHM_LL_BYTES,
// TESSEL_SHM_CHANNEL_BYTES, TESSEL_SHM_STREAM_BYTES.
Expected<Params> params_from_env();
Layout make_layout(int nranks, const Params& params);

enum class FaultKind : uint32_t { kNone = 0, kDied, kUnresponsive, kLeft, kAborted, kMismatch };

struct alignas(kLine) FaultRecord {
  uint32_t state;  // 0: none; 1: being written; 2: written
  FaultKind kind;
  int32_t culprit;   // the rank at fault
  int32_t reporter;  // the rank that noticed
  char text[496];    // "rank 1 (pid 4242) died: ..."
};

struct Header {
  uint64_t magic;
  uint32_t version;
  uint32_t reserved;
  Layout layout;
  FaultRecord fault;
};

enum class RankState : uint32_t { kEmpty = 0, kActive = 1, kLeft = 2, kAborted = 3 };

struct alignas(kLine) RankBlock {
  RankState state;
  int32_t pid;
  uint64_t start_time;     // clock ticks since boot (/proc/<pid>/stat field 22): tells a reused pid
  uint64_t pid_namespace;  // pids are compared only between ranks in the same pid namespace
  alignas(kLine) uint64_t heartbeat_ns;  // CLOCK_MONOTONIC, refreshed about every 100 ms
  alignas(kLine) uint64_t posted;        // pipeline step whose data this rank has staged
  alignas(kLine) uint64_t reduced;       // pipeline step whose part this rank has reduced
  alignas(kLine) uint64_t consumed;      // pipeline step this rank has finished with
};

// The head of a slot; the call's data follows it (in the same cache line when small).
struct SlotHeader {
  uint64_t seq;  // the collective this slot describes; stored last, with release order
  uint8_t kind;
  uint8_t dtype;
  uint8_t op;
  uint8_t reserved;
  int32_t root;
  uint64_t count;
  unsigned char* data() { return reinterpret_cast<unsigned char*>(this + 1); }
};
static_assert(sizeof(SlotHeader) == 24);

struct ChannelHead {
  alignas(kLine) uint64_t head;  // bytes ever written by the sender
  alignas(kLine) uint64_t tail;  // bytes ever read by the receiver
};

class Segment {
 public:
  // Creates the named object (fails if it exists), sizes and maps it, writes the header.
  static Expected<std::shared_ptr<Segment>> create(const std::string& name, const Layout& layout);
  // Maps an existing named object and checks its header.
  static Expected<std::shared_ptr<Segment>> open(const std::string& name);
  // An unnamed mapping for ranks that are threads of this process.
  static Expected<std::shared_ptr<Segment>> create_anonymous(const Layout& layout);
  ~Segment();
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;

  // Removes the name; the memory stays until the last rank unmaps it (or dies).
  Status unlink();
  const std::string& name() const { return name_; }

  const Layout& layout() const { return layout_; }
  Header& header() { return *reinterpret_cast<Header*>(base_); }
  RankBlock& rank(int r) { return at<RankBlock>(layout_.ranks_offset + r * sizeof(RankBlock)); }
  SlotHeader& slot(int r, uint64_t seq) {
    return at<SlotHeader>(layout_.slots_offset + (r * 2 + (seq & 1)) * layout_.slot_stride);
  }
  unsigned char* staging(int r, uint64_t step) {
    return base_ + layout_.staging_offset +
           (r * layout_.depth + step % layout_.depth) * layout_.chunk_bytes;
  }
  unsigned char* results(int r, uint64_t step) {
    return base_ + layout_.results_offset +
           (r * layout_.depth + step % layout_.depth) * layout_.chunk_bytes;
  }
  ChannelHead& channel(int from, int to) { return at<ChannelHead>(channel_offset(from, to)); }
  unsigned char* channel_data(int from, int to) {
    return base_ + channel_offset(from, to) + sizeof(ChannelHead);
  }

 private:
  Segment(unsigned char* base, size_t bytes, std::string name, Layout layout)
      : base_(base), bytes_(bytes), name_(std::move(name)), layout_(layout) {}
  template <typename T>
  T& at(uint64_t offset) {
    return *reinterpret_cast<T*>(base_ + offset);
  }
  uint64_t channel_offset(int from, int to) const {
    return layout_.channels_offset + (from * layout_.nranks + to) * layout_.channel_stride;
  }

  unsigned char* base_;
  size_t bytes_;
  std::string name_;  // empty for an anonymous mapping
  bool linked_ = true;
  Layout layout_;
};

// Atomic access to plain fields of the segment.
template <typename T>
T load_acquire(T& field) {
  return std::atomic_ref<T>(field).load(std::memory_order_acquire);
}
template <typename T>
T load_relaxed(T& field) {
  return std::atomic_ref<T>(field).load(std::memory_order_relaxed);
}
template <typename T>
void store_release(T& field, T value) {
  std::atomic_ref<T>(field).store(value, std::memory_order_release);
}

}  // namespace tessel::dist::shm
