// Process groups over communicators (process_group.h).
#include "dist/process_group.h"

namespace tessel::dist {

ProcessGroup::ProcessGroup(std::unique_ptr<Comm> comm)
    : comm_(std::move(comm)), stream_(std::make_shared<Stream>()) {}

ProcessGroup::~ProcessGroup() {
  if (!aborted_) (void)comm_->destroy();
}

Expected<std::unique_ptr<ProcessGroup>> ProcessGroup::from_env(const ProcessGroupOptions& options) {
  TESSEL_ASSIGN_OR_RETURN(
      CommOptions comm_options,
      resolve_options(options.timeout_s, options.op_timeout_s, options.check_calls));
  TESSEL_ASSIGN_OR_RETURN(Backend backend, resolve_backend(options.backend));
  TESSEL_ASSIGN_OR_RETURN(auto comm, init_comm_from_env(backend, comm_options));
  return std::unique_ptr<ProcessGroup>(new ProcessGroup(std::move(comm)));
}

Expected<std::vector<std::unique_ptr<ProcessGroup>>> ProcessGroup::in_process(
    int nranks, const ProcessGroupOptions& options) {
  if (options.backend && *options.backend != Backend::kShm)
    return invalid_argument("ranks as threads of one process use the shm backend, not {}",
                            backend_name(*options.backend));
  TESSEL_ASSIGN_OR_RETURN(
      CommOptions comm_options,
      resolve_options(options.timeout_s, options.op_timeout_s, options.check_calls));
  TESSEL_ASSIGN_OR_RETURN(auto comms, init_local_comms(nranks, comm_options));
  std::vector<std::unique_ptr<ProcessGroup>> groups;
  for (auto& comm : comms)
    groups.push_back(std::unique_ptr<ProcessGroup>(new ProcessGroup(std::move(comm))));
  return groups;
}

Expected<Work> ProcessGroup::group(std::vector<Call> calls) {
  for (const Call& call : calls)
    TESSEL_TRY(validate(call, rank(), size()));
  TESSEL_TRY(comm_->submit(calls, stream_.get()));
  return Work(stream_, stream_->last_issued());
}

namespace {
Call make(CallKind kind, const void* send, void* recv, size_t count, DataType type, RedOp op,
          int peer) {
  Call call;
  call.kind = kind, call.send = send, call.recv = recv, call.count = count, call.dtype = type,
  call.op = op, call.peer = peer;
  return call;
}
}  // namespace

Expected<Work> ProcessGroup::all_reduce(const void* send, void* recv, size_t count, DataType type,
                                        RedOp op) {
  return group({make(CallKind::kAllReduce, send, recv, count, type, op, 0)});
}

Expected<Work> ProcessGroup::broadcast(void* data, size_t count, DataType type, int root) {
  return group({make(CallKind::kBroadcast, data, data, count, type, RedOp::kSum, root)});
}

Expected<Work> ProcessGroup::reduce(const void* send, void* recv, size_t count, DataType type,
                                    RedOp op, int root) {
  return group({make(CallKind::kReduce, send, recv, count, type, op, root)});
}

Expected<Work> ProcessGroup::all_gather(const void* send, void* recv, size_t count, DataType type) {
  return group({make(CallKind::kAllGather, send, recv, count, type, RedOp::kSum, 0)});
}

Expected<Work> ProcessGroup::reduce_scatter(const void* send, void* recv, size_t count,
                                            DataType type, RedOp op) {
  return group({make(CallKind::kReduceScatter, send, recv, count, type, op, 0)});
}

Expected<Work> ProcessGroup::send(const void* data, size_t count, DataType type, int peer) {
  return group({make(CallKind::kSend, data, nullptr, count, type, RedOp::kSum, peer)});
}

Expected<Work> ProcessGroup::recv(void* data, size_t count, DataType type, int peer) {
  return group({make(CallKind::kRecv, nullptr, data, count, type, RedOp::kSum, peer)});
}

Status ProcessGroup::barrier() {
  TESSEL_ASSIGN_OR_RETURN(
      Work work,
      group({make(CallKind::kBarrier, nullptr, nullptr, 0, DataType::kUint8, RedOp::kSum, 0)}));
  return work.wait();
}

void ProcessGroup::abort() {
  if (aborted_) return;
  aborted_ = true;
  comm_->abort();
}

Expected<DataType> ProcessGroup::comm_dtype(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return DataType::kFloat32;
    case DType::kF64:
      return DataType::kFloat64;
    case DType::kF16:
      return DataType::kFloat16;
    case DType::kBF16:
      return DataType::kBfloat16;
    case DType::kI8:
      return DataType::kInt8;
    case DType::kU8:
      return DataType::kUint8;
    case DType::kI32:
      return DataType::kInt32;
    case DType::kI64:
      return DataType::kInt64;
    case DType::kI16:  // no collective library here reduces 16-bit integers
    case DType::kBool:
      break;
  }
  return invalid_argument("collectives have no {} element type; convert to u8 first",
                          tessel::dtype_name(dtype));
}

}  // namespace tessel::dist
