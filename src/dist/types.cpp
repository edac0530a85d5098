// Names, sizes and argument checks for the collectives vocabulary (types.h).
#include "dist/types.h"

#include <algorithm>

namespace tessel::dist {

size_t dtype_size(DataType type) {
  switch (type) {
    case DataType::kInt8:
    case DataType::kUint8:
      return 1;
    case DataType::kFloat16:
    case DataType::kBfloat16:
      return 2;
    case DataType::kInt32:
    case DataType::kUint32:
    case DataType::kFloat32:
      return 4;
    case DataType::kInt64:
    case DataType::kUint64:
    case DataType::kFloat64:
      return 8;
  }
  return 0;
}

const char* dtype_name(DataType type) {
  switch (type) {
    case DataType::kInt8:
      return "i8";
    case DataType::kUint8:
      return "u8";
    case DataType::kInt32:
      return "i32";
    case DataType::kUint32:
      return "u32";
    case DataType::kInt64:
      return "i64";
    case DataType::kUint64:
      return "u64";
    case DataType::kFloat16:
      return "f16";
    case DataType::kFloat32:
      return "f32";
    case DataType::kFloat64:
      return "f64";
    case DataType::kBfloat16:
      return "bf16";
  }
  return "?";
}

const char* redop_name(RedOp op) {
  switch (op) {
    case RedOp::kSum:
      return "sum";
    case RedOp::kProd:
      return "prod";
    case RedOp::kMax:
      return "max";
    case RedOp::kMin:
      return "min";
    case RedOp::kAvg:
      return "avg";
  }
  return "?";
}

bool is_floating(DataType type) {
  return type == DataType::kFloat16 || type == DataType::kFloat32 || type == DataType::kFloat64 ||
         type == DataType::kBfloat16;
}

Expected<DataType> parse_dtype(std::string_view name) {
  for (int i = 0; i < kNumDataTypes; ++i) {
    auto type = static_cast<DataType>(i);
    if (name == dtype_name(type)) return type;
  }
  return invalid_argument(
      "unknown data type '{}' (expected i8, u8, i32, u32, i64, u64, f16, "
      "f32, f64 or bf16)",
      name);
}

Expected<RedOp> parse_redop(std::string_view name) {
  for (int i = 0; i < kNumRedOps; ++i) {
    auto op = static_cast<RedOp>(i);
    if (name == redop_name(op)) return op;
  }
  return invalid_argument("unknown reduction '{}' (expected sum, prod, max, min or avg)", name);
}

const char* call_kind_name(CallKind kind) {
  switch (kind) {
    case CallKind::kAllReduce:
      return "all_reduce";
    case CallKind::kBroadcast:
      return "broadcast";
    case CallKind::kReduce:
      return "reduce";
    case CallKind::kAllGather:
      return "all_gather";
    case CallKind::kReduceScatter:
      return "reduce_scatter";
    case CallKind::kSend:
      return "send";
    case CallKind::kRecv:
      return "recv";
    case CallKind::kBarrier:
      return "barrier";
  }
  return "?";
}

namespace {
bool reduces(CallKind kind) {
  return kind == CallKind::kAllReduce || kind == CallKind::kReduce ||
         kind == CallKind::kReduceScatter;
}
bool has_root(CallKind kind) {
  return kind == CallKind::kBroadcast || kind == CallKind::kReduce;
}
}  // namespace

std::string describe(const Call& call) {
  if (call.kind == CallKind::kBarrier) return "barrier()";
  std::string text =
      fmt::format("{}(count={}, {}", call_kind_name(call.kind), call.count, dtype_name(call.dtype));
  if (reduces(call.kind)) text += fmt::format(", {}", redop_name(call.op));
  if (has_root(call.kind)) text += fmt::format(", root={}", call.peer);
  if (is_point_to_point(call.kind)) text += fmt::format(", peer={}", call.peer);
  return text + ")";
}

std::string describe_mismatch(uint64_t seq, const std::vector<Call>& calls) {
  std::vector<std::pair<std::string, std::vector<int>>> groups;  // a call and who made it
  for (size_t r = 0; r < calls.size(); ++r) {
    std::string text = describe(calls[r]);
    auto it =
        std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == text; });
    if (it == groups.end())
      groups.push_back({text, {static_cast<int>(r)}});
    else
      it->second.push_back(static_cast<int>(r));
  }
  if (groups.size() <= 1) return "";
  std::string message = fmt::format("mismatched collective #{} across ranks:", seq);
  for (size_t i = 0; i < groups.size(); ++i) {
    const auto& ranks = groups[i].second;
    std::string who = ranks.size() == 1 ? "rank " : "ranks ";
    for (size_t k = 0; k < ranks.size(); ++k)
      who += (k ? ", " : "") + std::to_string(ranks[k]);
    message += fmt::format("{} {} called {}", i ? ";" : "", who, groups[i].first);
  }
  return message;
}

size_t send_bytes(const Call& call, int rank, int nranks) {
  size_t bytes = call.count * dtype_size(call.dtype);
  switch (call.kind) {
    case CallKind::kAllReduce:
    case CallKind::kReduce:
    case CallKind::kAllGather:
    case CallKind::kSend:
      return bytes;
    case CallKind::kBroadcast:
      return rank == call.peer ? bytes : 0;
    case CallKind::kReduceScatter:
      return bytes * nranks;
    case CallKind::kRecv:
    case CallKind::kBarrier:
      return 0;
  }
  return 0;
}

size_t recv_bytes(const Call& call, int rank, int nranks) {
  size_t bytes = call.count * dtype_size(call.dtype);
  switch (call.kind) {
    case CallKind::kAllReduce:
    case CallKind::kBroadcast:
    case CallKind::kReduceScatter:
    case CallKind::kRecv:
      return bytes;
    case CallKind::kReduce:
      return rank == call.peer ? bytes : 0;
    case CallKind::kAllGather:
      return bytes * nranks;
    case CallKind::kSend:
    case CallKind::kBarrier:
      return 0;
  }
  return 0;
}

Status validate(const Call& call, int rank, int nranks) {
  // A rank may send to itself, as with NCCL (in a group with the matching receive).
  if (static_cast<int>(call.dtype) >= kNumDataTypes)
    return invalid_argument("{}: data type {} is not one of tessel's", call_kind_name(call.kind),
                            static_cast<int>(call.dtype));
  if (static_cast<int>(call.op) >= kNumRedOps)
    return invalid_argument("{}: reduction {} is not one of tessel's", call_kind_name(call.kind),
                            static_cast<int>(call.op));
  if ((has_root(call.kind) || is_point_to_point(call.kind)) &&
      (call.peer < 0 || call.peer >= nranks))
    return invalid_argument("{}: {} {} is outside the communicator's ranks 0..{}", describe(call),
                            has_root(call.kind) ? "root" : "peer", call.peer, nranks - 1);
  if (send_bytes(call, rank, nranks) > 0 && call.send == nullptr)
    return invalid_argument("{}: the send buffer is null", describe(call));
  if (recv_bytes(call, rank, nranks) > 0 && call.recv == nullptr)
    return invalid_argument("{}: the receive buffer is null", describe(call));
  return ok_status();
}

}  // namespace tessel::dist
