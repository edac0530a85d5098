// Test-only: runs one collective through the C API on this rank and checks what this rank got
// against collective_check.h. Shared by the in-process (threads) tests and the rank helper
// program that the multi-process tests start.
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include "dist/tessel_comm.h"
#include "dist/testing/collective_check.h"

namespace tessel::dist::testing {

struct Case {
  CallKind kind;
  DataType type;
  RedOp op;
  size_t count;  // per NCCL: per rank for all_gather's input and reduce_scatter's output
  int root;
  bool in_place;
};

inline std::string describe(const Case& c) {
  Call call;
  call.kind = c.kind, call.dtype = c.type, call.op = c.op, call.count = c.count, call.peer = c.root;
  return dist::describe(call) + (c.in_place ? " in place" : "");
}

// A buffer size: `bytes` worth of elements plus `extra` elements ("1 MiB + 3 elements").
struct Size {
  size_t bytes = 0;
  size_t extra = 0;
  size_t count(DataType type) const { return bytes / dtype_size(type) + extra; }
};

// Every kind x type (x op for reductions) x size; roots vary; in-place variants for a few
// types.
inline std::vector<Case> case_matrix(int nranks, const std::vector<Size>& sizes) {
  std::vector<Case> cases;
  int variety = 0;
  for (const Size& size : sizes)
    for (int t = 0; t < kNumDataTypes; ++t) {
      auto type = static_cast<DataType>(t);
      const size_t count = size.count(type);
      for (CallKind kind : {CallKind::kAllReduce, CallKind::kReduce, CallKind::kReduceScatter})
        for (int o = 0; o < kNumRedOps; ++o)
          cases.push_back({kind, type, static_cast<RedOp>(o), count, (variety++) % nranks, false});
      for (CallKind kind : {CallKind::kBroadcast, CallKind::kAllGather})
        cases.push_back({kind, type, RedOp::kSum, count, (variety++) % nranks, false});
      if (type == DataType::kFloat32 || type == DataType::kBfloat16 || type == DataType::kInt8)
        for (CallKind kind : {CallKind::kAllReduce, CallKind::kReduce, CallKind::kReduceScatter,
                              CallKind::kBroadcast, CallKind::kAllGather})
          cases.push_back({kind, type, RedOp::kMax, count, (variety++) % nranks, true});
    }
  return cases;
}

// Expected reduction over one period of the inputs.
inline std::vector<double> reduction_table(DataType type, RedOp op, int nranks) {
  std::vector<double> table(input_period(op));
  for (size_t i = 0; i < table.size(); ++i)
    table[i] = as_stored(type, exact_reduction(type, op, nranks, i));
  return table;
}

// Runs `c` on this rank and waits; returns "" or what went wrong.
inline std::string run_case(tesselComm_t comm, tesselStream_t stream, const Case& c) {
  int rank = 0, n = 1;
  tesselCommUserRank(comm, &rank);
  tesselCommCount(comm, &n);
  const size_t elem = dtype_size(c.type);
  const auto type = static_cast<tesselDataType_t>(c.type);
  const auto op = static_cast<tesselRedOp_t>(c.op);
  std::vector<unsigned char> send_buffer, recv_buffer;
  const void* send = nullptr;
  void* recv = nullptr;
  tesselResult_t result = tesselSuccess;
  auto reduce_value = [](DataType t, RedOp o, int r, size_t i) { return reduce_input(t, o, r, i); };
  auto copy_value = [](DataType, RedOp, int r, size_t i) { return copy_input(r, i); };
  // + 1 element so that a zero count still has valid pointers.
  switch (c.kind) {
    case CallKind::kAllReduce:
    case CallKind::kReduce: {
      recv_buffer.resize((c.count + 1) * elem);
      if (c.in_place) {
        fill(c.type, recv_buffer.data(), c.count, 0, reduce_value, c.op, rank);
        send = recv_buffer.data();
      } else {
        send_buffer.resize((c.count + 1) * elem);
        fill(c.type, send_buffer.data(), c.count, 0, reduce_value, c.op, rank);
        send = send_buffer.data();
      }
      recv = recv_buffer.data();
      if (c.kind == CallKind::kAllReduce)
        result = tesselAllReduce(send, recv, c.count, type, op, comm, stream);
      else
        result = tesselReduce(send, rank == c.root ? recv : nullptr, c.count, type, op, c.root,
                              comm, stream);
      break;
    }
    case CallKind::kReduceScatter: {
      send_buffer.resize((c.count * n + 1) * elem);
      fill(c.type, send_buffer.data(), c.count * n, 0, reduce_value, c.op, rank);
      send = send_buffer.data();
      if (c.in_place) {
        recv = send_buffer.data() + rank * c.count * elem;
      } else {
        recv_buffer.resize((c.count + 1) * elem);
        recv = recv_buffer.data();
      }
      result = tesselReduceScatter(send, recv, c.count, type, op, comm, stream);
      break;
    }
    case CallKind::kBroadcast: {
      recv_buffer.resize((c.count + 1) * elem);
      recv = recv_buffer.data();
      if (rank == c.root) {
        if (c.in_place) {
          fill(c.type, recv_buffer.data(), c.count, 0, copy_value, c.op, rank);
          send = recv;
        } else {
          send_buffer.resize((c.count + 1) * elem);
          fill(c.type, send_buffer.data(), c.count, 0, copy_value, c.op, rank);
          send = send_buffer.data();
        }
      }
      result = tesselBroadcast(send, recv, c.count, type, c.root, comm, stream);
      break;
    }
    case CallKind::kAllGather: {
      recv_buffer.resize((c.count * n + 1) * elem);
      recv = recv_buffer.data();
      if (c.in_place) {
        unsigned char* mine = recv_buffer.data() + rank * c.count * elem;
        fill(c.type, mine, c.count, 0, copy_value, c.op, rank);
        send = mine;
      } else {
        send_buffer.resize((c.count + 1) * elem);
        fill(c.type, send_buffer.data(), c.count, 0, copy_value, c.op, rank);
        send = send_buffer.data();
      }
      result = tesselAllGather(send, recv, c.count, type, comm, stream);
      break;
    }
    default:
      return "unsupported case";
  }
  if (result == tesselSuccess) result = tesselStreamSynchronize(stream);
  if (result != tesselSuccess)
    return describe(c) + ": " + tesselGetErrorString(result) + ": " + tesselGetLastError(comm);

  std::string first;
  size_t bad = 0;
  auto exact = [](double) { return 0.0; };
  switch (c.kind) {
    case CallKind::kAllReduce:
    case CallKind::kReduce:
    case CallKind::kReduceScatter: {
      if (c.kind == CallKind::kReduce && rank != c.root) break;
      std::vector<double> table = reduction_table(c.type, c.op, n);
      const size_t offset = c.kind == CallKind::kReduceScatter ? rank * c.count : 0;
      bad = count_mismatches(
          c.type, recv, c.count, [&](size_t i) { return table[(offset + i) % table.size()]; },
          [&](double w) { return tolerance(c.type, c.op, w); }, &first);
      break;
    }
    case CallKind::kBroadcast:
      bad = count_mismatches(
          c.type, recv, c.count, [&](size_t i) { return as_stored(c.type, copy_input(c.root, i)); },
          exact, &first);
      break;
    case CallKind::kAllGather:
      bad = count_mismatches(
          c.type, recv, c.count * n,
          [&](size_t i) {
            return as_stored(c.type, copy_input(static_cast<int>(i / std::max<size_t>(1, c.count)),
                                                i % std::max<size_t>(1, c.count)));
          },
          exact, &first);
      break;
    default:
      break;
  }
  if (bad == 0) return "";
  return describe(c) + " on rank " + std::to_string(rank) + " of " + std::to_string(n) + ": " +
         std::to_string(bad) + " wrong elements; first: " + first;
}

// Each rank sends `count` elements to the next rank and receives from the previous one, all in
// one group. Returns "" or what went wrong.
inline std::string run_ring(tesselComm_t comm, tesselStream_t stream, DataType t, size_t count) {
  int rank = 0, n = 1;
  tesselCommUserRank(comm, &rank);
  tesselCommCount(comm, &n);
  const size_t elem = dtype_size(t);
  const auto type = static_cast<tesselDataType_t>(t);
  std::vector<unsigned char> out((count + 1) * elem), in((count + 1) * elem, 0xA5);
  for (size_t i = 0; i < count; ++i)
    store_value(t, out.data(), i, copy_input(rank, i));
  const int next = (rank + 1) % n, prev = (rank + n - 1) % n;
  tesselGroupStart();
  tesselResult_t sent = tesselSend(out.data(), count, type, next, comm, stream);
  tesselResult_t received = tesselRecv(in.data(), count, type, prev, comm, stream);
  tesselResult_t result = tesselGroupEnd();
  if (sent != tesselSuccess) result = sent;
  if (received != tesselSuccess) result = received;
  if (result == tesselSuccess) result = tesselStreamSynchronize(stream);
  if (result != tesselSuccess)
    return std::string("send/recv ring: ") + tesselGetErrorString(result) + ": " +
           tesselGetLastError(comm);
  std::string first;
  size_t bad = count_mismatches(
      t, in.data(), count, [&](size_t i) { return as_stored(t, copy_input(prev, i)); },
      [](double) { return 0.0; }, &first);
  if (bad == 0) return "";
  return "send/recv ring of " + std::to_string(count) + " x " + dtype_name(t) + " on rank " +
         std::to_string(rank) + ": " + std::to_string(bad) + " wrong; first: " + first;
}

}  // namespace tessel::dist::testing
