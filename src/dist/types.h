// The vocabulary of the collectives layer in C++: element types, reduction operators, and one
// call (all_reduce, send, ...) as the core and its backends see it. The numeric values equal
// NCCL's (and those of the C API in tessel_comm.h), so converting is a cast.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "support/status.h"

namespace tessel::dist {

enum class DataType : uint8_t {
  kInt8 = 0,
  kUint8 = 1,
  kInt32 = 2,
  kUint32 = 3,
  kInt64 = 4,
  kUint64 = 5,
  kFloat16 = 6,
  kFloat32 = 7,
  kFloat64 = 8,
  kBfloat16 = 9,
};
inline constexpr int kNumDataTypes = 10;

enum class RedOp : uint8_t { kSum = 0, kProd = 1, kMax = 2, kMin = 3, kAvg = 4 };
inline constexpr int kNumRedOps = 5;

size_t dtype_size(DataType type);
const char* dtype_name(DataType type);  // "f32", "bf16", "i8", "u64", ...
const char* redop_name(RedOp op);       // "sum", "prod", "max", "min", "avg"
bool is_floating(DataType type);
Expected<DataType> parse_dtype(std::string_view name);
Expected<RedOp> parse_redop(std::string_view name);

enum class CallKind : uint8_t {
  kAllReduce,
  kBroadcast,
  kReduce,
  kAllGather,
  kReduceScatter,
  kSend,
  kRecv,
  kBarrier,  // internal: a collective that moves no data (the process group's barrier)
};
const char* call_kind_name(CallKind kind);  // "all_reduce", "broadcast", ...
inline bool is_point_to_point(CallKind kind) {
  return kind == CallKind::kSend || kind == CallKind::kRecv;
}

// One call as the user made it. `count` follows NCCL: elements per rank for all_gather's input
// and reduce_scatter's output, elements of the whole buffer otherwise.
struct Call {
  CallKind kind = CallKind::kAllReduce;
  DataType dtype = DataType::kFloat32;
  RedOp op = RedOp::kSum;
  int peer = 0;  // root for broadcast and reduce, the other rank for send and recv
  size_t count = 0;
  const void* send = nullptr;
  void* recv = nullptr;
};

// "all_reduce(count=1024, f32, sum)", "broadcast(count=7, i32, root=2)", "send(count=3, u8,
// peer=1)"
std::string describe(const Call& call);

// "" if every rank made the same call (calls[r] is rank r's), otherwise e.g.
// "mismatched collective #5 across ranks: ranks 0, 2 called all_reduce(count=8, f32, sum);
// rank 1 called all_reduce(count=7, f32, sum)".
std::string describe_mismatch(uint64_t seq, const std::vector<Call>& calls);

// Checks what can be checked on one rank: pointers present where the call reads or writes
// (count > 0), root/peer inside [0, nranks), types and operators in range.
Status validate(const Call& call, int rank, int nranks);

// Bytes the call reads from `send` and writes to `recv` on this rank.
size_t send_bytes(const Call& call, int rank, int nranks);
size_t recv_bytes(const Call& call, int rank, int nranks);

}  // namespace tessel::dist
