// The mpi backend, built as the plug-in libtessel_mpi.so (the only tessel code linked to MPI;
// see mpi_loader.h). Each call becomes a non-blocking MPI call (MPI_Iallreduce, MPI_Isend, ...)
// that the communicator's progress thread drives with MPI_Testall until it completes, so it can
// give up on tesselCommAbort or the call's time limit. Before each collective the ranks
// all-gather a 32-byte descriptor of their call and compare, as the shm backend does (turn off
// with TESSEL_COMM_CHECK_CALLS=0 to save that round trip).
//
// MPI has no f16 or bf16: they travel as 16-bit integers with user-defined operators that
// reduce in f32. MPI has no average either: floats are summed and divided; integers narrower
// than 64 bits are summed as int64 and divided, which matches the shm backend bit for bit.
//
// A rank that dies under mpirun ends the job: Open MPI's runtime kills the other ranks, so
// they never wait for it.
#include <mpi.h>
#include <sched.h>

#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "dist/mpi_loader.h"
#include "dist/reduce.h"
#include "dist/transport.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#define TESSEL_LEAK_CHECK_BEFORE_MPI_FINALIZE 1
#endif

namespace tessel::dist {

namespace {

// Calls into MPI are serialised with this lock when the library was initialised without
// MPI_THREAD_MULTIPLE (for example by a program that called MPI_Init itself).
std::mutex mpi_mutex;
bool serialise_calls = false;

struct MpiLock {
  std::unique_lock<std::mutex> lock{mpi_mutex, std::defer_lock};
  MpiLock() {
    if (serialise_calls) lock.lock();
  }
};

// Runs one MPI call under the lock.
template <typename Fn>
int locked(Fn fn) {
  MpiLock lock;
  return fn();
}

std::string mpi_error(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  return std::string(text, static_cast<size_t>(length));
}

// ---- f16 / bf16 operators ----------------------------------------------------------------------

template <DataType kType, RedOp kOp>
void half_op(void* in, void* inout, int* length, MPI_Datatype*) {
  const void* inputs[2] = {inout, in};
  reduce(inout, nullptr, inputs, 2, static_cast<size_t>(*length), kType, kOp, 0);
}

struct HalfOps {
  MPI_Op ops[2][4];  // [f16, bf16][sum, prod, max, min]
};
HalfOps half_ops;

template <DataType kType>
void create_half_ops(MPI_Op* ops) {
  MPI_Op_create(half_op<kType, RedOp::kSum>, 1, &ops[0]);
  MPI_Op_create(half_op<kType, RedOp::kProd>, 1, &ops[1]);
  MPI_Op_create(half_op<kType, RedOp::kMax>, 1, &ops[2]);
  MPI_Op_create(half_op<kType, RedOp::kMin>, 1, &ops[3]);
}

MPI_Datatype mpi_type(DataType type) {
  switch (type) {
    case DataType::kInt8:
      return MPI_INT8_T;
    case DataType::kUint8:
      return MPI_UINT8_T;
    case DataType::kInt32:
      return MPI_INT32_T;
    case DataType::kUint32:
      return MPI_UINT32_T;
    case DataType::kInt64:
      return MPI_INT64_T;
    case DataType::kUint64:
      return MPI_UINT64_T;
    case DataType::kFloat16:
    case DataType::kBfloat16:
      return MPI_UINT16_T;
    case DataType::kFloat32:
      return MPI_FLOAT;
    case DataType::kFloat64:
      return MPI_DOUBLE;
  }
  return MPI_DATATYPE_NULL;
}

MPI_Op mpi_op(DataType type, RedOp op) {
  int index = op == RedOp::kProd ? 1 : op == RedOp::kMax ? 2 : op == RedOp::kMin ? 3 : 0;
  if (type == DataType::kFloat16) return half_ops.ops[0][index];
  if (type == DataType::kBfloat16) return half_ops.ops[1][index];
  static const MPI_Op kOps[4] = {MPI_SUM, MPI_PROD, MPI_MAX, MPI_MIN};
  return kOps[index];
}

// Integers narrower than 64 bits are averaged through int64 (see the top of the file).
bool widened_average(const Call& call) {
  return call.op == RedOp::kAvg && !is_floating(call.dtype) && dtype_size(call.dtype) < 8;
}

void widen(const void* from, DataType type, size_t count, int64_t* to) {
  for (size_t i = 0; i < count; ++i) {
    switch (type) {
      case DataType::kInt8:
        to[i] = static_cast<const int8_t*>(from)[i];
        break;
      case DataType::kUint8:
        to[i] = static_cast<const uint8_t*>(from)[i];
        break;
      case DataType::kInt32:
        to[i] = static_cast<const int32_t*>(from)[i];
        break;
      case DataType::kUint32:
        to[i] = static_cast<const uint32_t*>(from)[i];
        break;
      default:
        break;
    }
  }
}

void narrow_average(const int64_t* from, size_t count, int nranks, DataType type, void* to) {
  for (size_t i = 0; i < count; ++i) {
    int64_t v = from[i] / nranks;
    switch (type) {
      case DataType::kInt8:
        static_cast<int8_t*>(to)[i] = static_cast<int8_t>(v);
        break;
      case DataType::kUint8:
        static_cast<uint8_t*>(to)[i] = static_cast<uint8_t>(v);
        break;
      case DataType::kInt32:
        static_cast<int32_t*>(to)[i] = static_cast<int32_t>(v);
        break;
      case DataType::kUint32:
        static_cast<uint32_t*>(to)[i] = static_cast<uint32_t>(v);
        break;
      default:
        break;
    }
  }
}

// Divides a sum in place by nranks (floats, and 64-bit integers).
void divide_in_place(void* data, DataType type, size_t count, int nranks) {
  const void* inputs[1] = {data};
  reduce(data, nullptr, inputs, 1, count, type, RedOp::kAvg, nranks);
}

// ---- initialising MPI ----------------------------------------------------------------------

Status ensure_mpi() {
  static std::once_flag once;
  static Status status;
  std::call_once(once, [] {
    int initialized = 0, finalized = 0, provided = 0;
    MPI_Initialized(&initialized);
    MPI_Finalized(&finalized);
    if (finalized) {
      status = failed_precondition("MPI was already finalized in this process");
      return;
    }
    if (!initialized) {
#ifdef TESSEL_LEAK_CHECK_BEFORE_MPI_FINALIZE
      // What Open MPI allocates while it starts is its own until exit, some of it by components
      // it unloads again before MPI_Init returns (so no suppression can name their module).
      __lsan::ScopedDisabler open_mpi_keeps_what_it_allocates_here;
#endif
      int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
      if (rc != MPI_SUCCESS) {
        status = unavailable("MPI_Init_thread failed: {}", mpi_error(rc));
        return;
      }
      // tessel started MPI, so tessel ends it, after everything else at exit.
      std::atexit([] {
        int done = 0;
        MPI_Finalized(&done);
        if (done) return;
#ifdef TESSEL_LEAK_CHECK_BEFORE_MPI_FINALIZE
        // Under LeakSanitizer the leak check runs here, not after this handler: MPI_Finalize
        // unloads Open MPI's components, and what they keep until exit would then have no module
        // name for tools/sanitize/lsan.supp to match. The check runs once; exit does not repeat it.
        __lsan_do_leak_check();
#endif
        MPI_Finalize();
      });
    } else {
      MPI_Query_thread(&provided);
    }
    serialise_calls = provided < MPI_THREAD_MULTIPLE;
    create_half_ops<DataType::kFloat16>(half_ops.ops[0]);
    create_half_ops<DataType::kBfloat16>(half_ops.ops[1]);
  });
  return status;
}

// ---- the transport ---------------------------------------------------------------------------

class MpiTransport final : public Transport {
 public:
  MpiTransport(MPI_Comm collectives, MPI_Comm messages, int rank, int nranks,
               const CommOptions& options)
      : collectives_(collectives),
        messages_(messages),
        rank_(rank),
        nranks_(nranks),
        options_(options) {}

  const char* name() const override { return "mpi"; }

  Status run(std::span<const Call> calls) override {
    std::vector<Call> p2p;
    for (const Call& call : calls) {
      if (is_point_to_point(call.kind)) {
        p2p.push_back(call);
        continue;
      }
      ++seq_;
      if (options_.check_calls) TESSEL_TRY(compare_calls(call));
      TESSEL_TRY(collective(call));
    }
    if (!p2p.empty()) TESSEL_TRY(point_to_point(p2p));
    return ok_status();
  }

  void cancel(const Status& why) override {
    std::lock_guard lock(cancel_mu_);
    if (cancel_status_.ok()) cancel_status_ = why;
    cancelled_.store(true, std::memory_order_release);
  }

  void leave(bool aborted) override {
    // Freeing a communicator is collective in principle; after an abort the peers may never
    // join, so the handles are left to MPI_Finalize.
    if (aborted) return;
    MpiLock lock;
    MPI_Comm_free(&collectives_);
    MPI_Comm_free(&messages_);
  }

 private:
  // Drives `requests` to completion, watching for a cancel and the time limit.
  // On failure `statuses` (if given) holds each request's error.
  Status wait(std::vector<MPI_Request>& requests, const Call& call,
              std::vector<MPI_Status>* statuses = nullptr) {
    std::vector<MPI_Status> local(requests.size());
    std::vector<MPI_Status>& out = statuses ? *statuses : local;
    out.resize(requests.size());
    for (auto& s : out)
      s.MPI_ERROR = MPI_SUCCESS;
    const auto start = std::chrono::steady_clock::now();
    for (uint32_t polls = 0;; ++polls) {
      int done = 0, rc;
      {
        MpiLock lock;
        rc = MPI_Testall(static_cast<int>(requests.size()), requests.data(), &done, out.data());
      }
      if (rc != MPI_SUCCESS) {
        for (auto& s : out)
          if (s.MPI_ERROR != MPI_SUCCESS && s.MPI_ERROR != MPI_ERR_PENDING) rc = s.MPI_ERROR;
        return aborted("{} failed in MPI: {}", describe(call), mpi_error(rc));
      }
      if (done) return ok_status();
      if (cancelled_.load(std::memory_order_acquire)) {
        std::lock_guard lock(cancel_mu_);
        return cancel_status_;
      }
      if (polls < 256) continue;
      auto waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (options_.op_timeout_s > 0 && waited > options_.op_timeout_s)
        return deadline_exceeded("rank {} waited {:.1f} s in {} (op timeout {:.1f} s)", rank_,
                                 waited, describe(call), options_.op_timeout_s);
      if (waited > 0.005)
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      else
        sched_yield();
    }
  }

  Status compare_calls(const Call& call) {
    uint64_t mine[4] = {seq_,
                        static_cast<uint64_t>(call.kind) | static_cast<uint64_t>(call.dtype) << 8 |
                            static_cast<uint64_t>(call.op) << 16,
                        static_cast<uint64_t>(static_cast<int64_t>(call.peer)), call.count};
    std::vector<uint64_t> all(4 * nranks_);
    std::vector<MPI_Request> request(1);
    {
      MpiLock lock;
      MPI_Iallgather(mine, 4, MPI_UINT64_T, all.data(), 4, MPI_UINT64_T, collectives_, &request[0]);
    }
    TESSEL_TRY(wait(request, call));
    std::vector<Call> calls(nranks_);
    for (int r = 0; r < nranks_; ++r) {
      const uint64_t* d = &all[4 * r];
      calls[r].kind = static_cast<CallKind>(d[1] & 0xFF);
      calls[r].dtype = static_cast<DataType>((d[1] >> 8) & 0xFF);
      calls[r].op = static_cast<RedOp>((d[1] >> 16) & 0xFF);
      calls[r].peer = static_cast<int>(static_cast<int64_t>(d[2]));
      calls[r].count = d[3];
    }
    std::string mismatch = describe_mismatch(seq_, calls);
    if (mismatch.empty()) return ok_status();
    return failed_precondition("{}", mismatch);
  }

  Status start(int rc, const Call& call) {
    if (rc == MPI_SUCCESS) return ok_status();
    return aborted("{} failed in MPI: {}", describe(call), mpi_error(rc));
  }

  Status collective(const Call& call) {
    const size_t elem = dtype_size(call.dtype);
    const MPI_Datatype type = mpi_type(call.dtype);
    const MPI_Op op = mpi_op(call.dtype, call.op);
    if (call.count > static_cast<size_t>(INT_MAX))
      return unimplemented("{}: the mpi backend takes at most {} elements per call", describe(call),
                           INT_MAX);
    const int count = static_cast<int>(call.count);
    std::vector<MPI_Request> request(1, MPI_REQUEST_NULL);
    const bool in_place = call.send == call.recv;
    std::vector<int64_t> wide_in, wide_out;
    switch (call.kind) {
      case CallKind::kBarrier:
        TESSEL_TRY(start(locked([&] { return MPI_Ibarrier(collectives_, &request[0]); }), call));
        break;
      case CallKind::kAllReduce:
      case CallKind::kReduce: {
        const bool root = call.kind == CallKind::kAllReduce || rank_ == call.peer;
        const bool all = call.kind == CallKind::kAllReduce;
        int rc;
        if (widened_average(call)) {
          wide_in.resize(call.count);
          wide_out.resize(root ? call.count : 0);
          widen(call.send, call.dtype, call.count, wide_in.data());
          rc = locked([&] {
            return all ? MPI_Iallreduce(wide_in.data(), wide_out.data(), count, MPI_INT64_T,
                                        MPI_SUM, collectives_, &request[0])
                       : MPI_Ireduce(wide_in.data(), wide_out.data(), count, MPI_INT64_T, MPI_SUM,
                                     call.peer, collectives_, &request[0]);
          });
        } else {
          const void* send = root && in_place ? MPI_IN_PLACE : call.send;
          rc = locked([&] {
            return all ? MPI_Iallreduce(send, call.recv, count, type, op, collectives_, &request[0])
                       : MPI_Ireduce(send, call.recv, count, type, op, call.peer, collectives_,
                                     &request[0]);
          });
        }
        TESSEL_TRY(start(rc, call));
        TESSEL_TRY(wait(request, call));
        if (root && call.op == RedOp::kAvg) {
          if (widened_average(call))
            narrow_average(wide_out.data(), call.count, nranks_, call.dtype, call.recv);
          else
            divide_in_place(call.recv, call.dtype, call.count, nranks_);
        }
        return ok_status();
      }
      case CallKind::kBroadcast: {
        if (rank_ == call.peer && !in_place && count > 0)
          std::memcpy(call.recv, call.send, call.count * elem);
        TESSEL_TRY(start(locked([&] {
                           return MPI_Ibcast(call.recv, count, type, call.peer, collectives_,
                                             &request[0]);
                         }),
                         call));
        break;
      }
      case CallKind::kAllGather: {
        const void* send =
            call.send == static_cast<unsigned char*>(call.recv) + rank_ * call.count * elem
                ? MPI_IN_PLACE
                : call.send;
        TESSEL_TRY(start(locked([&] {
                           return MPI_Iallgather(send, count, type, call.recv, count, type,
                                                 collectives_, &request[0]);
                         }),
                         call));
        break;
      }
      case CallKind::kReduceScatter: {
        // NCCL's in-place layout (recv inside send) is not MPI's, so in place goes through a
        // temporary output.
        const bool nccl_in_place =
            call.recv == static_cast<const unsigned char*>(call.send) + rank_ * call.count * elem;
        std::vector<unsigned char> temporary;
        void* out = call.recv;
        int rc;
        if (widened_average(call)) {
          wide_in.resize(call.count * nranks_);
          wide_out.resize(call.count);
          widen(call.send, call.dtype, call.count * nranks_, wide_in.data());
          rc = locked([&] {
            return MPI_Ireduce_scatter_block(wide_in.data(), wide_out.data(), count, MPI_INT64_T,
                                             MPI_SUM, collectives_, &request[0]);
          });
        } else {
          if (nccl_in_place) {
            temporary.resize(call.count * elem);
            out = temporary.data();
          }
          rc = locked([&] {
            return MPI_Ireduce_scatter_block(call.send, out, count, type, op, collectives_,
                                             &request[0]);
          });
        }
        TESSEL_TRY(start(rc, call));
        TESSEL_TRY(wait(request, call));
        if (widened_average(call)) {
          narrow_average(wide_out.data(), call.count, nranks_, call.dtype, call.recv);
          return ok_status();
        }
        if (nccl_in_place && call.count)
          std::memcpy(call.recv, temporary.data(), call.count * elem);
        if (call.op == RedOp::kAvg) divide_in_place(call.recv, call.dtype, call.count, nranks_);
        return ok_status();
      }
      default:
        return internal_error("not a collective: {}", describe(call));
    }
    return wait(request, call);
  }

  Status point_to_point(const std::vector<Call>& calls) {
    // Messages go as bytes in pieces of at most 1 GiB; MPI keeps pieces between two ranks in
    // order. A piece's size tells the receiver whether the sender sent what it expects.
    constexpr size_t kPiece = 1u << 30;
    std::vector<MPI_Request> requests;
    std::vector<const Call*> owners;
    std::vector<size_t> expected;
    {
      MpiLock lock;
      for (const Call& call : calls) {
        const size_t bytes = call.count * dtype_size(call.dtype);
        for (size_t offset = 0; offset == 0 || offset < bytes; offset += kPiece) {
          const int piece = static_cast<int>(std::min(kPiece, bytes - offset));
          requests.emplace_back();
          owners.push_back(&call);
          expected.push_back(static_cast<size_t>(piece));
          int rc = call.kind == CallKind::kSend
                       ? MPI_Isend(static_cast<const unsigned char*>(call.send) + offset, piece,
                                   MPI_BYTE, call.peer, 0, messages_, &requests.back())
                       : MPI_Irecv(static_cast<unsigned char*>(call.recv) + offset, piece, MPI_BYTE,
                                   call.peer, 0, messages_, &requests.back());
          TESSEL_TRY(start(rc, call));
        }
      }
    }
    std::vector<MPI_Status> statuses;
    Status waited = wait(requests, calls.front(), &statuses);
    for (size_t i = 0; i < requests.size(); ++i) {
      const Call& call = *owners[i];
      if (call.kind != CallKind::kRecv) continue;
      int received = 0;
      MPI_Get_count(&statuses[i], MPI_BYTE, &received);
      bool truncated = statuses[i].MPI_ERROR == MPI_ERR_TRUNCATE;
      if (truncated || static_cast<size_t>(received) != expected[i])
        return failed_precondition(
            "mismatched send/recv: rank {} called {} but rank {} sent {} bytes", rank_,
            describe(call), call.peer,
            truncated ? std::string("more than ") + std::to_string(expected[i])
                      : std::to_string(received));
    }
    return waited;
  }

  MPI_Comm collectives_;
  MPI_Comm messages_;
  int rank_;
  int nranks_;
  CommOptions options_;
  uint64_t seq_ = 0;
  std::atomic<bool> cancelled_{false};
  std::mutex cancel_mu_;
  Status cancel_status_;
};

}  // namespace

}  // namespace tessel::dist

extern "C" {

__attribute__((visibility("default"))) int tessel_mpi_plugin_abi() {
  return tessel::dist::kMpiPluginAbi;
}

__attribute__((visibility("default"))) tessel::dist::Transport* tessel_mpi_create_transport(
    int nranks, int rank, const tessel::dist::CommOptions* options, char* error,
    size_t error_bytes) {
  using namespace tessel::dist;
  auto fail = [&](const tessel::Status& status) -> Transport* {
    std::snprintf(error, error_bytes, "%s", status.to_string().c_str());
    return nullptr;
  };
  tessel::Status started = ensure_mpi();
  if (!started.ok()) return fail(started);
  int world_rank = 0, world_size = 0;
  MpiLock lock;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  if (world_size != nranks || world_rank != rank)
    return fail(tessel::invalid_argument(
        "asked for rank {} of {}, but MPI says this process is rank {} of {} (start the program "
        "with mpirun -n {})",
        rank, nranks, world_rank, world_size, nranks));
  // Two private communicators: collectives and point-to-point messages never match each other
  // or the application's own MPI traffic.
  MPI_Comm collectives, messages;
  MPI_Comm_dup(MPI_COMM_WORLD, &collectives);
  MPI_Comm_dup(MPI_COMM_WORLD, &messages);
  MPI_Comm_set_errhandler(collectives, MPI_ERRORS_RETURN);
  MPI_Comm_set_errhandler(messages, MPI_ERRORS_RETURN);
  return new MpiTransport(collectives, messages, rank, nranks, *options);
}

__attribute__((visibility("default"))) int tessel_mpi_world(int* rank, int* size, char* error,
                                                            size_t error_bytes) {
  tessel::Status started = tessel::dist::ensure_mpi();
  if (!started.ok()) {
    std::snprintf(error, error_bytes, "%s", started.to_string().c_str());
    return -1;
  }
  tessel::dist::MpiLock lock;
  MPI_Comm_rank(MPI_COMM_WORLD, rank);
  MPI_Comm_size(MPI_COMM_WORLD, size);
  return 0;
}

}  // extern "C"
