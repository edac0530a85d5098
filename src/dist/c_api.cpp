// The C API (tessel_comm.h) over the C++ core: argument checks, group bookkeeping, result
// codes and last-error messages.
#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "dist/comm_init.h"
#include "dist/nccl/nccl_library.h"
#include "dist/rendezvous.h"
#include "dist/store.h"
#include "dist/tessel_comm.h"
#include "support/log.h"

using tessel::Code;
using tessel::Status;
namespace dist = tessel::dist;

struct tesselComm {
  std::unique_ptr<dist::Comm> impl;
  std::mutex mu;
  std::string last_error;
  uint64_t last_error_order = 0;
};

struct tesselStream {
  std::unique_ptr<dist::Stream> impl;
};

struct tesselEvent {
  dist::Event impl;
};

namespace {

// The last failure on this thread; a communicator's own last failure is kept with it. Both carry
// an order number, so tesselGetLastError(comm) can return whichever is newer (a failure seen
// by tesselStreamSynchronize belongs to no communicator until then).
thread_local std::string thread_last_error;
thread_local uint64_t thread_last_error_order = 0;
std::atomic<uint64_t> error_order{0};

tesselResult_t to_result(const Status& status) {
  switch (status.code()) {
    case Code::kOk:
      return tesselSuccess;
    case Code::kInvalidArgument:
    case Code::kOutOfRange:
      return tesselInvalidArgument;
    case Code::kFailedPrecondition:
    case Code::kUnimplemented:
      return tesselInvalidUsage;
    case Code::kAborted:
    case Code::kDeadlineExceeded:
      return tesselRemoteError;
    case Code::kInternal:
      return tesselInternalError;
    default:
      return tesselSystemError;
  }
}

// Remembers the message (per communicator and per thread) and returns the result code.
tesselResult_t fail(tesselComm* comm, const Status& status) {
  if (status.ok()) return tesselSuccess;
  std::string text = status.to_string();
  tessel::log_debug("tessel: {}", text);
  uint64_t order = error_order.fetch_add(1) + 1;
  if (comm) {
    std::lock_guard lock(comm->mu);
    comm->last_error = text;
    comm->last_error_order = order;
  }
  thread_last_error = std::move(text);
  thread_last_error_order = order;
  return to_result(status);
}

dist::Stream* stream_of(tesselStream_t stream) {
  return stream ? stream->impl.get() : &dist::Stream::default_stream();
}

// Calls made between tesselGroupStart and tesselGroupEnd on this thread.
struct Group {
  int depth = 0;
  struct Pending {
    tesselComm* comm;
    dist::Stream* stream;
    dist::Call call;
  };
  std::vector<Pending> pending;
};
thread_local Group group;

tesselResult_t enqueue(tesselComm* comm, dist::Call call, tesselStream_t stream) {
  if (comm == nullptr || !comm->impl)
    return fail(nullptr, tessel::invalid_argument("{}: the communicator is null",
                                                  dist::call_kind_name(call.kind)));
  Status valid = dist::validate(call, comm->impl->rank(), comm->impl->size());
  if (!valid.ok()) return fail(comm, valid);
  if (group.depth > 0) {
    group.pending.push_back({comm, stream_of(stream), call});
    return tesselSuccess;
  }
  return fail(comm, comm->impl->submit(std::span<const dist::Call>(&call, 1), stream_of(stream)));
}

tesselComm* wrap(std::unique_ptr<dist::Comm> impl) {
  auto* comm = new tesselComm();
  comm->impl = std::move(impl);
  return comm;
}

}  // namespace

extern "C" {

const char* tesselGetErrorString(tesselResult_t result) {
  switch (result) {
    case tesselSuccess:
      return "no error";
    case tesselUnhandledCudaError:
      return "unhandled cuda error";
    case tesselSystemError:
      return "unhandled system error (run with TESSEL_LOG=debug for details)";
    case tesselInternalError:
      return "internal error - please report this issue";
    case tesselInvalidArgument:
      return "invalid argument";
    case tesselInvalidUsage:
      return "invalid usage";
    case tesselRemoteError:
      return "remote process exited or there was a network error";
    case tesselInProgress:
      return "operation in progress";
    default:
      return "unknown result code";
  }
}

const char* tesselGetLastError(tesselComm_t comm) {
  if (comm) {
    std::lock_guard lock(comm->mu);
    if (comm->last_error_order >= thread_last_error_order) return comm->last_error.c_str();
  }
  return thread_last_error.c_str();
}

tesselResult_t tesselGetVersion(int* version) {
  if (!version) return fail(nullptr, tessel::invalid_argument("tesselGetVersion: version is null"));
  *version = 100;  // 0.1.0, as NCCL counts: major * 10000 + minor * 100 + patch
  return tesselSuccess;
}

tesselResult_t tesselGetUniqueId(tesselUniqueId* uniqueId) {
  if (!uniqueId) return fail(nullptr, tessel::invalid_argument("tesselGetUniqueId: id is null"));
  auto id = dist::create_unique_id();
  if (!id.ok()) return fail(nullptr, id.status());
  dist::encode_unique_id(*id, uniqueId->internal);
  return tesselSuccess;
}

namespace {
struct InitSettings {
  dist::CommOptions options;
  dist::Backend backend;
};
// Options and backend from a config (NULL: defaults), the environment filling in the rest.
tessel::Expected<InitSettings> settings_from(const tesselConfig_t* config) {
  tesselConfig_t defaults = TESSEL_CONFIG_INITIALIZER;
  if (!config) config = &defaults;
  if (config->size != sizeof(tesselConfig_t))
    return tessel::invalid_argument(
        "tesselConfig_t.size is {}, expected {} (start from "
        "TESSEL_CONFIG_INITIALIZER)",
        config->size, sizeof(tesselConfig_t));
  InitSettings settings;
  TESSEL_ASSIGN_OR_RETURN(
      settings.options,
      dist::resolve_options(config->timeoutSeconds, config->opTimeoutSeconds, config->checkCalls));
  std::optional<dist::Backend> requested;
  switch (config->backend) {
    case tesselBackendShm:
      requested = dist::Backend::kShm;
      break;
    case tesselBackendMpi:
      requested = dist::Backend::kMpi;
      break;
    case tesselBackendNccl:
      requested = dist::Backend::kNccl;
      break;
    default:
      break;
  }
  TESSEL_ASSIGN_OR_RETURN(settings.backend, dist::resolve_backend(requested));
  return settings;
}
}  // namespace

tesselResult_t tesselCommInitRankConfig(tesselComm_t* comm, int nranks, tesselUniqueId commId,
                                        int rank, const tesselConfig_t* config) {
  if (!comm) return fail(nullptr, tessel::invalid_argument("tesselCommInitRank: comm is null"));
  *comm = nullptr;
  if (group.depth > 0)
    return fail(nullptr, tessel::failed_precondition(
                             "tesselCommInitRank inside tesselGroupStart/End is not supported; "
                             "use tesselCommInitAll for several ranks in one process"));
  auto settings = settings_from(config);
  if (!settings.ok()) return fail(nullptr, settings.status());
  auto id = dist::decode_unique_id(commId.internal);
  if (!id.ok()) return fail(nullptr, id.status());
  auto store = dist::StoreClient::connect(id->host, id->port, settings->options.timeout_s);
  if (!store.ok()) return fail(nullptr, store.status());
  auto impl = dist::init_comm(&*store, id->key, nranks, rank, settings->backend, settings->options);
  if (!impl.ok())
    return fail(nullptr, impl.status().with_context("rank {} of {} joining a {} communicator", rank,
                                                    nranks, dist::backend_name(settings->backend)));
  *comm = wrap(std::move(*impl));
  return tesselSuccess;
}

tesselResult_t tesselCommInitFromEnv(tesselComm_t* comm, const tesselConfig_t* config) {
  if (!comm) return fail(nullptr, tessel::invalid_argument("tesselCommInitFromEnv: comm is null"));
  *comm = nullptr;
  auto settings = settings_from(config);
  if (!settings.ok()) return fail(nullptr, settings.status());
  auto impl = dist::init_comm_from_env(settings->backend, settings->options);
  if (!impl.ok()) return fail(nullptr, impl.status());
  *comm = wrap(std::move(*impl));
  return tesselSuccess;
}

tesselResult_t tesselCommInitRank(tesselComm_t* comm, int nranks, tesselUniqueId commId, int rank) {
  return tesselCommInitRankConfig(comm, nranks, commId, rank, nullptr);
}

tesselResult_t tesselCommInitAll(tesselComm_t* comms, int nranks, const int* /*devlist*/) {
  if (!comms) return fail(nullptr, tessel::invalid_argument("tesselCommInitAll: comms is null"));
  auto options = dist::resolve_options(-1, -1, -1);
  if (!options.ok()) return fail(nullptr, options.status());
  auto impls = dist::init_local_comms(nranks, *options);
  if (!impls.ok()) return fail(nullptr, impls.status());
  for (int r = 0; r < nranks; ++r)
    comms[r] = wrap(std::move((*impls)[r]));
  return tesselSuccess;
}

tesselResult_t tesselCommDestroy(tesselComm_t comm) {
  if (!comm) return tesselSuccess;
  if (comm->impl) (void)comm->impl->destroy();  // the error, if any, was reported already
  delete comm;
  return tesselSuccess;
}

tesselResult_t tesselCommAbort(tesselComm_t comm) {
  if (!comm) return tesselSuccess;
  if (comm->impl) comm->impl->abort();
  delete comm;
  return tesselSuccess;
}

tesselResult_t tesselCommGetAsyncError(tesselComm_t comm, tesselResult_t* asyncError) {
  if (!comm || !asyncError)
    return fail(comm, tessel::invalid_argument("tesselCommGetAsyncError: null argument"));
  Status status = comm->impl->async_error();
  *asyncError = status.ok() ? tesselSuccess : fail(comm, status);
  return tesselSuccess;
}

tesselResult_t tesselCommCount(const tesselComm_t comm, int* count) {
  if (!comm || !count)
    return fail(comm, tessel::invalid_argument("tesselCommCount: null argument"));
  *count = comm->impl->size();
  return tesselSuccess;
}

tesselResult_t tesselCommUserRank(const tesselComm_t comm, int* rank) {
  if (!comm || !rank)
    return fail(comm, tessel::invalid_argument("tesselCommUserRank: null argument"));
  *rank = comm->impl->rank();
  return tesselSuccess;
}

namespace {
dist::Call make_call(dist::CallKind kind, const void* send, void* recv, size_t count,
                     tesselDataType_t type, tesselRedOp_t op, int peer) {
  dist::Call call;
  call.kind = kind;
  call.send = send;
  call.recv = recv;
  call.count = count;
  call.dtype = static_cast<dist::DataType>(type);
  call.op = static_cast<dist::RedOp>(op);
  call.peer = peer;
  return call;
}
}  // namespace

tesselResult_t tesselAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                               tesselDataType_t datatype, tesselRedOp_t op, tesselComm_t comm,
                               tesselStream_t stream) {
  return enqueue(comm,
                 make_call(dist::CallKind::kAllReduce, sendbuff, recvbuff, count, datatype, op, 0),
                 stream);
}

tesselResult_t tesselBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                               tesselDataType_t datatype, int root, tesselComm_t comm,
                               tesselStream_t stream) {
  return enqueue(
      comm,
      make_call(dist::CallKind::kBroadcast, sendbuff, recvbuff, count, datatype, tesselSum, root),
      stream);
}

tesselResult_t tesselReduce(const void* sendbuff, void* recvbuff, size_t count,
                            tesselDataType_t datatype, tesselRedOp_t op, int root,
                            tesselComm_t comm, tesselStream_t stream) {
  return enqueue(comm,
                 make_call(dist::CallKind::kReduce, sendbuff, recvbuff, count, datatype, op, root),
                 stream);
}

tesselResult_t tesselAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                               tesselDataType_t datatype, tesselComm_t comm,
                               tesselStream_t stream) {
  return enqueue(
      comm,
      make_call(dist::CallKind::kAllGather, sendbuff, recvbuff, sendcount, datatype, tesselSum, 0),
      stream);
}

tesselResult_t tesselReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                   tesselDataType_t datatype, tesselRedOp_t op, tesselComm_t comm,
                                   tesselStream_t stream) {
  return enqueue(
      comm,
      make_call(dist::CallKind::kReduceScatter, sendbuff, recvbuff, recvcount, datatype, op, 0),
      stream);
}

tesselResult_t tesselSend(const void* sendbuff, size_t count, tesselDataType_t datatype, int peer,
                          tesselComm_t comm, tesselStream_t stream) {
  return enqueue(
      comm, make_call(dist::CallKind::kSend, sendbuff, nullptr, count, datatype, tesselSum, peer),
      stream);
}

tesselResult_t tesselRecv(void* recvbuff, size_t count, tesselDataType_t datatype, int peer,
                          tesselComm_t comm, tesselStream_t stream) {
  return enqueue(
      comm, make_call(dist::CallKind::kRecv, nullptr, recvbuff, count, datatype, tesselSum, peer),
      stream);
}

tesselResult_t tesselGroupStart(void) {
  ++group.depth;
  return tesselSuccess;
}

tesselResult_t tesselGroupEnd(void) {
  if (group.depth == 0)
    return fail(nullptr, tessel::failed_precondition("tesselGroupEnd without tesselGroupStart"));
  if (--group.depth > 0) return tesselSuccess;
  // One submission per (communicator, stream), in the order of first appearance.
  std::vector<std::pair<std::pair<tesselComm*, dist::Stream*>, std::vector<dist::Call>>> batches;
  for (auto& p : group.pending) {
    auto it = std::find_if(batches.begin(), batches.end(), [&](const auto& b) {
      return b.first.first == p.comm && b.first.second == p.stream;
    });
    if (it == batches.end()) {
      batches.push_back({{p.comm, p.stream}, {}});
      it = std::prev(batches.end());
    }
    it->second.push_back(p.call);
  }
  group.pending.clear();
  // The batches of one group wait for what came before the group, not for each other.
  std::map<dist::Stream*, uint64_t> before;
  for (auto& [key, calls] : batches)
    before.emplace(key.second, key.second->last_issued());
  tesselResult_t result = tesselSuccess;
  for (auto& [key, calls] : batches) {
    tesselResult_t r =
        fail(key.first, key.first->impl->submit(calls, key.second, before[key.second]));
    if (result == tesselSuccess) result = r;
  }
  return result;
}

tesselResult_t tesselStreamCreate(tesselStream_t* stream) {
  if (!stream) return fail(nullptr, tessel::invalid_argument("tesselStreamCreate: stream is null"));
  *stream = new tesselStream{std::make_unique<dist::Stream>()};
  return tesselSuccess;
}

tesselResult_t tesselStreamCreateFromCuda(void* cudaStream, tesselStream_t* stream) {
  if (!stream)
    return fail(nullptr, tessel::invalid_argument("tesselStreamCreateFromCuda: stream is null"));
  *stream =
      new tesselStream{dist::Stream::wrap_cuda(cudaStream, dist::nccl::synchronize_cuda_stream)};
  return tesselSuccess;
}

tesselResult_t tesselStreamDestroy(tesselStream_t stream) {
  if (!stream) return tesselSuccess;
  (void)stream->impl->synchronize();  // calls still running may not lose their stream
  delete stream;
  return tesselSuccess;
}

tesselResult_t tesselStreamSynchronize(tesselStream_t stream) {
  return fail(nullptr, stream_of(stream)->synchronize());
}

tesselResult_t tesselStreamQuery(tesselStream_t stream) {
  dist::Stream* s = stream_of(stream);
  if (s->cuda_stream())
    return fail(nullptr, tessel::unimplemented("tesselStreamQuery on a CUDA stream: use "
                                               "cudaStreamQuery"));
  if (!s->finished(s->last_issued())) return tesselInProgress;
  return fail(nullptr, s->first_error());
}

tesselResult_t tesselEventCreate(tesselEvent_t* event) {
  if (!event) return fail(nullptr, tessel::invalid_argument("tesselEventCreate: event is null"));
  *event = new tesselEvent{};
  return tesselSuccess;
}

tesselResult_t tesselEventDestroy(tesselEvent_t event) {
  delete event;
  return tesselSuccess;
}

tesselResult_t tesselEventRecord(tesselEvent_t event, tesselStream_t stream) {
  if (!event) return fail(nullptr, tessel::invalid_argument("tesselEventRecord: event is null"));
  event->impl.record(stream_of(stream));
  return tesselSuccess;
}

tesselResult_t tesselEventSynchronize(tesselEvent_t event) {
  if (!event)
    return fail(nullptr, tessel::invalid_argument("tesselEventSynchronize: event is null"));
  return fail(nullptr, event->impl.synchronize());
}

tesselResult_t tesselEventQuery(tesselEvent_t event) {
  if (!event) return fail(nullptr, tessel::invalid_argument("tesselEventQuery: event is null"));
  return event->impl.finished() ? tesselSuccess : tesselInProgress;
}

}  // extern "C"
