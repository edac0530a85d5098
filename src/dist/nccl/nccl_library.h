// libnccl, loaded at run time: the few NCCL entry points tessel calls, declared here from
// NCCL's documented C API (nccl.h is not needed to build), and the CUDA driver's
// cuStreamSynchronize for tesselStreamSynchronize on a CUDA stream.
//
// The library is $TESSEL_NCCL_LIBRARY, else libnccl.so.2 on the library path; the CUDA driver
// is $TESSEL_CUDA_LIBRARY, else libcuda.so.1. Tests point both at a host-memory stand-in.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "dist/types.h"
#include "support/status.h"

namespace tessel::dist::nccl {

// NCCL's types, by their documented layout and values.
using ncclComm_t = struct ncclComm*;
using cudaStream_t = struct CUstream_st*;
struct ncclUniqueId {
  char internal[128];
};
using ncclResult_t = int;  // 0 = ncclSuccess ... 7 = ncclInProgress
using ncclDataType_t = int;
using ncclRedOp_t = int;

struct Library {
  int version = 0;  // NCCL_VERSION_CODE, e.g. 21803 for 2.18.3
  ncclResult_t (*GetVersion)(int*);
  const char* (*GetErrorString)(ncclResult_t);
  ncclResult_t (*GetUniqueId)(ncclUniqueId*);
  ncclResult_t (*CommInitRank)(ncclComm_t*, int, ncclUniqueId, int);
  ncclResult_t (*CommDestroy)(ncclComm_t);
  ncclResult_t (*CommAbort)(ncclComm_t);
  ncclResult_t (*CommGetAsyncError)(ncclComm_t, ncclResult_t*);
  ncclResult_t (*AllReduce)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                            cudaStream_t);
  ncclResult_t (*Broadcast)(const void*, void*, size_t, ncclDataType_t, int, ncclComm_t,
                            cudaStream_t);
  ncclResult_t (*Reduce)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, int, ncclComm_t,
                         cudaStream_t);
  ncclResult_t (*AllGather)(const void*, void*, size_t, ncclDataType_t, ncclComm_t, cudaStream_t);
  ncclResult_t (*ReduceScatter)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                                cudaStream_t);
  ncclResult_t (*Send)(const void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
  ncclResult_t (*Recv)(void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
  ncclResult_t (*GroupStart)();
  ncclResult_t (*GroupEnd)();
};

// Loads libnccl ($TESSEL_NCCL_LIBRARY, else libnccl.so.2) once per path. kUnavailable says
// why not.
Expected<const Library*> load_library();
// Loads the library at `path` (not cached; for tests).
Expected<std::unique_ptr<Library>> open_library(const std::string& path);

// tessel's data type and reduction as NCCL's, checked against what this NCCL version has
// (bf16 and avg need 2.10, send/recv 2.7).
Expected<ncclDataType_t> to_nccl(DataType type, int version);
Expected<ncclRedOp_t> to_nccl(RedOp op, int version);
// An NCCL failure as a Status: "ncclAllReduce: unhandled system error (2)".
Status from_nccl(const Library& library, ncclResult_t result, const char* what);

// cuStreamSynchronize from the CUDA driver, loaded on first use.
Status synchronize_cuda_stream(void* stream);

}  // namespace tessel::dist::nccl
