// The nccl backend: a communicator that hands each call to libnccl on the caller's CUDA stream
// (buffers are device memory). Rank 0 makes the ncclUniqueId and shares it through the
// rendezvous store. As with NCCL itself, select the CUDA device before creating it.
#pragma once

#include <memory>
#include <string>

#include "dist/comm.h"
#include "dist/store.h"
#include "dist/transport.h"

namespace tessel::dist {

Expected<std::unique_ptr<Comm>> init_nccl_comm(StoreClient& store, const std::string& key,
                                               int nranks, int rank, const CommOptions& options);

}  // namespace tessel::dist
