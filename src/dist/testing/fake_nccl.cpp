// Test-only stand-in for libnccl and the CUDA driver, built as libtessel_fake_nccl.so: it has
// NCCL's C entry points (and cuStreamSynchronize), records the arguments of the last calls, and
// works on host memory for a communicator of one rank. nccl_test.cpp points
// TESSEL_NCCL_LIBRARY and TESSEL_CUDA_LIBRARY at it to check what tessel passes to NCCL, on a
// machine without GPUs.
#include <cstddef>
#include <cstring>

extern "C" {

struct FakeNcclLog {
  int init_nranks, init_rank;
  char init_id[128];
  int group_starts, group_ends;
  const char* last_call;
  const void* send;
  void* recv;
  size_t count;
  int datatype, op, root_or_peer;
  void* comm;
  void* stream;
  void* synchronized_stream;
  int destroyed, aborted;
  int async_error;  // what ncclCommGetAsyncError reports; set by the test
};

__attribute__((visibility("default"))) FakeNcclLog fake_nccl_log;

namespace {
int fake_comm_object;
size_t element_size(int datatype) {
  static const size_t sizes[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2};
  return datatype >= 0 && datatype < 10 ? sizes[datatype] : 0;
}
int record(const char* name, const void* send, void* recv, size_t count, int datatype, int op,
           int root, void* comm, void* stream) {
  FakeNcclLog& log = fake_nccl_log;
  log.last_call = name, log.send = send, log.recv = recv, log.count = count;
  log.datatype = datatype, log.op = op, log.root_or_peer = root, log.comm = comm;
  log.stream = stream;
  if (comm != &fake_comm_object) return 4;  // ncclInvalidArgument
  // One rank: every collective copies its input (sum/prod/max/min/avg of one value is itself).
  if (send && recv && send != recv) std::memmove(recv, send, count * element_size(datatype));
  return 0;
}
}  // namespace

__attribute__((visibility("default"))) int ncclGetVersion(int* version) {
  *version = 21803;
  return 0;
}
__attribute__((visibility("default"))) const char* ncclGetErrorString(int result) {
  static const char* names[] = {"no error",
                                "unhandled cuda error",
                                "unhandled system error",
                                "internal error",
                                "invalid argument",
                                "invalid usage",
                                "remote process exited or there was a network error",
                                "in progress"};
  return result >= 0 && result < 8 ? names[result] : "unknown";
}
__attribute__((visibility("default"))) int ncclGetUniqueId(char* id) {
  for (int i = 0; i < 128; ++i)
    id[i] = static_cast<char>(i * 7 + 1);
  return 0;
}
struct FakeId {
  char internal[128];
};
__attribute__((visibility("default"))) int ncclCommInitRank(void** comm, int nranks, FakeId id,
                                                            int rank) {
  fake_nccl_log.init_nranks = nranks;
  fake_nccl_log.init_rank = rank;
  std::memcpy(fake_nccl_log.init_id, id.internal, 128);
  if (nranks != 1) return 5;  // ncclInvalidUsage: the fake runs one rank only
  *comm = &fake_comm_object;
  return 0;
}
__attribute__((visibility("default"))) int ncclCommDestroy(void*) {
  ++fake_nccl_log.destroyed;
  return 0;
}
__attribute__((visibility("default"))) int ncclCommAbort(void*) {
  ++fake_nccl_log.aborted;
  return 0;
}
__attribute__((visibility("default"))) int ncclCommGetAsyncError(void*, int* error) {
  *error = fake_nccl_log.async_error;
  return 0;
}
__attribute__((visibility("default"))) int ncclAllReduce(const void* s, void* r, size_t n, int t,
                                                         int op, void* c, void* st) {
  return record("ncclAllReduce", s, r, n, t, op, -1, c, st);
}
__attribute__((visibility("default"))) int ncclBroadcast(const void* s, void* r, size_t n, int t,
                                                         int root, void* c, void* st) {
  return record("ncclBroadcast", s, r, n, t, -1, root, c, st);
}
__attribute__((visibility("default"))) int ncclReduce(const void* s, void* r, size_t n, int t,
                                                      int op, int root, void* c, void* st) {
  return record("ncclReduce", s, r, n, t, op, root, c, st);
}
__attribute__((visibility("default"))) int ncclAllGather(const void* s, void* r, size_t n, int t,
                                                         void* c, void* st) {
  return record("ncclAllGather", s, r, n, t, -1, -1, c, st);
}
__attribute__((visibility("default"))) int ncclReduceScatter(const void* s, void* r, size_t n,
                                                             int t, int op, void* c, void* st) {
  return record("ncclReduceScatter", s, r, n, t, op, -1, c, st);
}
__attribute__((visibility("default"))) int ncclSend(const void* s, size_t n, int t, int peer,
                                                    void* c, void* st) {
  return record("ncclSend", s, nullptr, n, t, -1, peer, c, st);
}
__attribute__((visibility("default"))) int ncclRecv(void* r, size_t n, int t, int peer, void* c,
                                                    void* st) {
  return record("ncclRecv", nullptr, r, n, t, -1, peer, c, st);
}
__attribute__((visibility("default"))) int ncclGroupStart() {
  ++fake_nccl_log.group_starts;
  return 0;
}
__attribute__((visibility("default"))) int ncclGroupEnd() {
  ++fake_nccl_log.group_ends;
  return 0;
}
__attribute__((visibility("default"))) int cuStreamSynchronize(void* stream) {
  fake_nccl_log.synchronized_stream = stream;
  return 0;
}

}  // extern "C"
