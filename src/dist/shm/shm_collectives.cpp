// The collective algorithms of the shm transport (shm_transport.h).
//
// Latency path (slot_exchange): after the handshake every rank's data is in its slot; each rank
// reads what it needs. Inputs are combined in rank order everywhere, so every rank gets the
// same bits.
//
// Bandwidth path: steps of up to `chunk_bytes`. In one step of all_reduce each rank
//   1. waits until every rank is done with the buffers of step s - depth (wait_buffers_free),
//   2. copies the parts of its chunk that other ranks reduce into its staging buffer (posted),
//   3. reduces its own part: its own input plus every peer's staged copy, in rank order, into
//      its output and its results buffer (reduced),
//   4. copies every peer's reduced part from that peer's results buffer (consumed).
// That is a reduce-scatter followed by an all-gather; with two ranks it is exactly the ring
// algorithm, with more it replaces the ring's n-1 hops by direct reads, since every rank can
// read every buffer. Both ranks of a pair reduce at the same time, and each input byte is read
// from memory once and each output byte written once: staging and results are a few chunks per
// rank, small enough to stay in cache.
#include <algorithm>
#include <array>
#include <cstring>
#include <vector>

#include "dist/reduce.h"
#include "dist/shm/shm_transport.h"

namespace tessel::dist::shm {

namespace {

constexpr int kMaxRanks = 64;  // the shm backend's limit (comm_init.cpp)

// Parts start on 64-byte boundaries so that two ranks never write one cache line.
size_t align_elements(size_t elem) {
  return std::max<size_t>(1, 64 / elem);
}

struct Parts {
  size_t len;   // elements in the chunk
  size_t part;  // elements per part (the last parts may be shorter or empty)
  size_t begin(int j) const { return std::min(len, j * part); }
  size_t size(int j) const { return std::min(len, (j + 1) * part) - begin(j); }
};

Parts split(size_t len, int nranks, size_t align) {
  size_t part = (len + nranks - 1) / nranks;
  part = (part + align - 1) / align * align;
  return {len, part};
}

const unsigned char* bytes(const void* p) {
  return static_cast<const unsigned char*>(p);
}
unsigned char* bytes(void* p) {
  return static_cast<unsigned char*>(p);
}

// Copies into the caller's output; around the cache when the output is too big to stay there.
void copy_out(void* dst, const void* src, size_t size, bool stream) {
  if (stream)
    copy_nontemporal(dst, src, size);
  else
    std::memcpy(dst, src, size);
}

// Ends a call whose output went around the cache: the stores must land before the stream says
// the call finished.
Status finish(bool stream) {
  if (stream) store_fence();
  return ok_status();
}

}  // namespace

void ShmTransport::run_locally(const Call& call) {
  const size_t size = call.count * dtype_size(call.dtype);
  switch (call.kind) {
    case CallKind::kAllReduce:
    case CallKind::kReduce:
    case CallKind::kReduceScatter: {
      const void* inputs[1] = {call.send};
      dist::reduce(call.recv, nullptr, inputs, 1, call.count, call.dtype, call.op, 1);
      break;
    }
    case CallKind::kBroadcast:
    case CallKind::kAllGather:
      if (size && call.send != call.recv) std::memmove(call.recv, call.send, size);
      break;
    default:
      break;
  }
}

void ShmTransport::slot_exchange(const Call& call, uint64_t seq) {
  const size_t elem = dtype_size(call.dtype);
  const size_t size = call.count * elem;
  auto data_of = [&](int r) -> const unsigned char* {
    return r == rank_ ? bytes(call.send) : segment_->slot(r, seq).data();
  };
  std::array<const void*, kMaxRanks> inputs;
  switch (call.kind) {
    case CallKind::kAllReduce:
    case CallKind::kReduce:
      if (call.kind == CallKind::kReduce && rank_ != call.peer) return;
      for (int r = 0; r < nranks_; ++r)
        inputs[r] = data_of(r);
      dist::reduce(call.recv, nullptr, inputs.data(), nranks_, call.count, call.dtype, call.op,
                   nranks_);
      return;
    case CallKind::kReduceScatter:
      for (int r = 0; r < nranks_; ++r)
        inputs[r] = data_of(r) + rank_ * size;
      dist::reduce(call.recv, nullptr, inputs.data(), nranks_, call.count, call.dtype, call.op,
                   nranks_);
      return;
    case CallKind::kBroadcast:
      if (size && call.recv != data_of(call.peer)) std::memcpy(call.recv, data_of(call.peer), size);
      return;
    case CallKind::kAllGather:
      for (int r = 0; r < nranks_; ++r) {
        unsigned char* to = bytes(call.recv) + r * size;
        if (size && to != data_of(r)) std::memcpy(to, data_of(r), size);
      }
      return;
    default:
      return;
  }
}

Status ShmTransport::all_reduce(const Call& call, const Activity& activity) {
  return reduce_parts(call, /*root=*/-1, activity);
}

Status ShmTransport::reduce(const Call& call, const Activity& activity) {
  return reduce_parts(call, call.peer, activity);
}

// all_reduce (root < 0) and reduce (to `root`). Per chunk: every rank stages the parts of its
// input that belong to the others, reduces its own part from all ranks' copies, and publishes it;
// then the ranks that want the whole result (all, or the root) copy out the others' parts.
Status ShmTransport::reduce_parts(const Call& call, int root, const Activity& activity) {
  const size_t elem = dtype_size(call.dtype);
  const bool stream = call.count * elem >= segment_->layout().stream_bytes;
  const size_t align = align_elements(elem);
  const size_t chunk = std::max(align * nranks_, segment_->layout().chunk_bytes / elem /
                                                     (align * nranks_) * (align * nranks_));
  const bool everyone = root < 0;
  const bool wants_result = everyone || rank_ == root;
  const unsigned char* send = bytes(call.send);
  unsigned char* recv = bytes(call.recv);
  std::vector<const void*> inputs(nranks_);
  for (size_t lo = 0; lo < call.count; lo += chunk) {
    const Parts parts = split(std::min(chunk, call.count - lo), nranks_, align);
    const uint64_t step = ++step_;
    TESSEL_TRY(wait_buffers_free(step, activity));
    unsigned char* staging = segment_->staging(rank_, step);
    for (int j = 0; j < nranks_; ++j)
      if (j != rank_)
        std::memcpy(staging + parts.begin(j) * elem, send + (lo + parts.begin(j)) * elem,
                    parts.size(j) * elem);
    publish(&RankBlock::posted, step);

    const size_t mine = parts.begin(rank_);
    for (int j = 0; j < nranks_; ++j) {
      if (j == rank_) {
        inputs[j] = send + (lo + mine) * elem;
        continue;
      }
      TESSEL_TRY(wait_counter(j, &RankBlock::posted, step, activity));
      inputs[j] = segment_->staging(j, step) + mine * elem;
    }
    // Where my reduced part goes: my result and, for all_reduce, a copy the peers read; for
    // reduce, the root's result or the shared slot the root reads.
    void* out = wants_result ? static_cast<void*>(recv + (lo + mine) * elem)
                             : segment_->results(rank_, step);
    void* shared_copy = everyone ? segment_->results(rank_, step) : nullptr;
    dist::reduce(out, shared_copy, inputs.data(), nranks_, parts.size(rank_), call.dtype, call.op,
                 nranks_, stream && wants_result);
    publish(&RankBlock::reduced, step);

    if (wants_result) {
      for (int j = 0; j < nranks_; ++j) {
        if (j == rank_) continue;
        TESSEL_TRY(wait_counter(j, &RankBlock::reduced, step, activity));
        copy_out(recv + (lo + parts.begin(j)) * elem, segment_->results(j, step),
                 parts.size(j) * elem, stream);
      }
    }
    publish(&RankBlock::consumed, step);
  }
  return finish(stream);
}

Status ShmTransport::broadcast(const Call& call, const Activity& activity) {
  const size_t elem = dtype_size(call.dtype);
  const bool stream = call.count * elem >= segment_->layout().stream_bytes;
  const size_t chunk = segment_->layout().chunk_bytes / elem;
  const int root = call.peer;
  for (size_t lo = 0; lo < call.count; lo += chunk) {
    const size_t size = std::min(chunk, call.count - lo) * elem;
    const uint64_t step = ++step_;
    if (rank_ == root) {
      TESSEL_TRY(wait_buffers_free(step, activity));
      std::memcpy(segment_->staging(root, step), bytes(call.send) + lo * elem, size);
      publish(&RankBlock::posted, step);
      if (call.recv != call.send)
        copy_out(bytes(call.recv) + lo * elem, bytes(call.send) + lo * elem, size, stream);
    } else {
      TESSEL_TRY(wait_counter(root, &RankBlock::posted, step, activity));
      copy_out(bytes(call.recv) + lo * elem, segment_->staging(root, step), size, stream);
    }
    publish(&RankBlock::consumed, step);
  }
  return finish(stream);
}

Status ShmTransport::all_gather(const Call& call, const Activity& activity) {
  const size_t elem = dtype_size(call.dtype);
  const size_t chunk = segment_->layout().chunk_bytes / elem;
  const size_t total = call.count * elem;  // one rank's contribution
  const bool stream = total * nranks_ >= segment_->layout().stream_bytes;
  for (size_t lo = 0; lo < call.count; lo += chunk) {
    const size_t size = std::min(chunk, call.count - lo) * elem;
    const uint64_t step = ++step_;
    TESSEL_TRY(wait_buffers_free(step, activity));
    const unsigned char* mine = bytes(call.send) + lo * elem;
    std::memcpy(segment_->staging(rank_, step), mine, size);
    publish(&RankBlock::posted, step);
    unsigned char* my_place = bytes(call.recv) + rank_ * total + lo * elem;
    if (my_place != mine) copy_out(my_place, mine, size, stream);
    for (int j = 0; j < nranks_; ++j) {
      if (j == rank_) continue;
      TESSEL_TRY(wait_counter(j, &RankBlock::posted, step, activity));
      copy_out(bytes(call.recv) + j * total + lo * elem, segment_->staging(j, step), size, stream);
    }
    publish(&RankBlock::consumed, step);
  }
  return finish(stream);
}

Status ShmTransport::reduce_scatter(const Call& call, const Activity& activity) {
  const size_t elem = dtype_size(call.dtype);
  const size_t align = align_elements(elem);
  // A step stages one piece for each peer, so a piece is 1/nranks of the buffer.
  const size_t chunk =
      std::max(align, segment_->layout().chunk_bytes / elem / nranks_ / align * align);
  const unsigned char* send = bytes(call.send);
  const size_t block = call.count * elem;  // one rank's share of the input
  const bool stream = block >= segment_->layout().stream_bytes;
  std::vector<const void*> inputs(nranks_);
  for (size_t lo = 0; lo < call.count; lo += chunk) {
    const size_t len = std::min(chunk, call.count - lo);
    const uint64_t step = ++step_;
    TESSEL_TRY(wait_buffers_free(step, activity));
    unsigned char* staging = segment_->staging(rank_, step);
    for (int j = 0; j < nranks_; ++j)
      if (j != rank_)
        std::memcpy(staging + j * chunk * elem, send + j * block + lo * elem, len * elem);
    publish(&RankBlock::posted, step);
    for (int j = 0; j < nranks_; ++j) {
      if (j == rank_) {
        inputs[j] = send + rank_ * block + lo * elem;
        continue;
      }
      TESSEL_TRY(wait_counter(j, &RankBlock::posted, step, activity));
      inputs[j] = segment_->staging(j, step) + rank_ * chunk * elem;
    }
    dist::reduce(bytes(call.recv) + lo * elem, nullptr, inputs.data(), nranks_, len, call.dtype,
                 call.op, nranks_, stream);
    publish(&RankBlock::consumed, step);
  }
  return finish(stream);
}

}  // namespace tessel::dist::shm
