// Calls of the nccl backend translated to libnccl (nccl_comm.h).
#include "dist/nccl/nccl_comm.h"

#include <cstring>

#include "dist/nccl/nccl_library.h"

namespace tessel::dist {

namespace {

using namespace nccl;

class NcclComm final : public Comm {
 public:
  NcclComm(int rank, int nranks, const Library& library, ncclComm_t comm)
      : Comm(rank, nranks), library_(library), comm_(comm) {}
  ~NcclComm() override {
    if (comm_) library_.CommDestroy(comm_);
  }

  const char* backend_name() const override { return "nccl"; }

  Status submit(std::span<const Call> calls, Stream* stream, uint64_t /*after*/) override {
    if (!stream->cuda_stream())
      return invalid_argument(
          "the nccl backend runs on CUDA streams: make the stream with "
          "tesselStreamCreateFromCuda");
    auto cuda = static_cast<cudaStream_t>(stream->cuda_stream());
    TESSEL_TRY(from_nccl(library_, library_.GroupStart(), "ncclGroupStart"));
    Status status;
    for (const Call& call : calls) {
      status = issue(call, cuda);
      if (!status.ok()) break;
    }
    Status ended = from_nccl(library_, library_.GroupEnd(), "ncclGroupEnd");
    return status.ok() ? ended : status;
  }

  Status async_error() override {
    ncclResult_t result = 0;
    TESSEL_TRY(
        from_nccl(library_, library_.CommGetAsyncError(comm_, &result), "ncclCommGetAsyncError"));
    return from_nccl(library_, result, "NCCL communicator");
  }

  Status destroy() override {
    ncclComm_t comm = std::exchange(comm_, nullptr);
    return from_nccl(library_, library_.CommDestroy(comm), "ncclCommDestroy");
  }

  void abort() override {
    ncclComm_t comm = std::exchange(comm_, nullptr);
    if (comm) library_.CommAbort(comm);
  }

 private:
  Status issue(const Call& call, cudaStream_t stream) {
    const int version = library_.version;
    TESSEL_ASSIGN_OR_RETURN(ncclDataType_t type, to_nccl(call.dtype, version));
    TESSEL_ASSIGN_OR_RETURN(ncclRedOp_t op, to_nccl(call.op, version));
    switch (call.kind) {
      case CallKind::kAllReduce:
        return from_nccl(
            library_, library_.AllReduce(call.send, call.recv, call.count, type, op, comm_, stream),
            "ncclAllReduce");
      case CallKind::kBroadcast:
        return from_nccl(
            library_,
            library_.Broadcast(call.send, call.recv, call.count, type, call.peer, comm_, stream),
            "ncclBroadcast");
      case CallKind::kReduce:
        return from_nccl(
            library_,
            library_.Reduce(call.send, call.recv, call.count, type, op, call.peer, comm_, stream),
            "ncclReduce");
      case CallKind::kAllGather:
        return from_nccl(library_,
                         library_.AllGather(call.send, call.recv, call.count, type, comm_, stream),
                         "ncclAllGather");
      case CallKind::kReduceScatter:
        return from_nccl(
            library_,
            library_.ReduceScatter(call.send, call.recv, call.count, type, op, comm_, stream),
            "ncclReduceScatter");
      case CallKind::kSend:
        return from_nccl(library_,
                         library_.Send(call.send, call.count, type, call.peer, comm_, stream),
                         "ncclSend");
      case CallKind::kRecv:
        return from_nccl(library_,
                         library_.Recv(call.recv, call.count, type, call.peer, comm_, stream),
                         "ncclRecv");
      case CallKind::kBarrier:
        return unimplemented("the nccl backend has no barrier; all-reduce one element instead");
    }
    return internal_error("unknown call kind");
  }

  const Library& library_;
  ncclComm_t comm_;
};

}  // namespace

Expected<std::unique_ptr<Comm>> init_nccl_comm(StoreClient& store, const std::string& key,
                                               int nranks, int rank, const CommOptions& options) {
  TESSEL_ASSIGN_OR_RETURN(const Library* library, load_library());
  ncclUniqueId id{};
  const std::string id_key = key + "/nccl_id";
  if (rank == 0) {
    TESSEL_TRY(from_nccl(*library, library->GetUniqueId(&id), "ncclGetUniqueId"));
    TESSEL_TRY(store.set(id_key, std::string_view(id.internal, sizeof(id.internal))));
  } else {
    TESSEL_ASSIGN_OR_RETURN(std::string bytes, store.get(id_key, options.timeout_s));
    if (bytes.size() != sizeof(id.internal))
      return internal_error("the NCCL id in the rendezvous store has {} bytes, not {}",
                            bytes.size(), sizeof(id.internal));
    std::memcpy(id.internal, bytes.data(), sizeof(id.internal));
  }
  ncclComm_t comm = nullptr;
  TESSEL_TRY(
      from_nccl(*library, library->CommInitRank(&comm, nranks, id, rank), "ncclCommInitRank"));
  return std::unique_ptr<Comm>(new NcclComm(rank, nranks, *library, comm));
}

}  // namespace tessel::dist
