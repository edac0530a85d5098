// Making communicators: options from the config and the environment, the backend choice, and
// the set-up each backend needs (a shared segment for shm, MPI's world for mpi, an NCCL id for
// nccl), agreed through the rendezvous store.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dist/comm.h"
#include "dist/store.h"
#include "dist/transport.h"

namespace tessel::dist {

enum class Backend { kShm, kMpi, kNccl };
const char* backend_name(Backend backend);
Expected<Backend> parse_backend(std::string_view name);

// A setting below zero means "not given": it comes from TESSEL_COMM_TIMEOUT,
// TESSEL_COMM_OP_TIMEOUT, TESSEL_COMM_CHECK_CALLS, or the defaults in CommOptions.
Expected<CommOptions> resolve_options(double timeout_s, double op_timeout_s, int check_calls);
// An explicit choice wins; otherwise TESSEL_BACKEND; otherwise shm.
Expected<Backend> resolve_backend(std::optional<Backend> requested);

// `nranks` communicators of one process, one per rank (ranks as threads; shm only).
Expected<std::vector<std::unique_ptr<Comm>>> init_local_comms(int nranks,
                                                              const CommOptions& options);

// Rank `rank` of `nranks` joins the communicator named by `key` (unique per communicator) in
// `store`. Every rank must pass the same key and backend. The mpi backend needs no store (MPI
// has its own rendezvous), so `store` may be null for it.
Expected<std::unique_ptr<Comm>> init_comm(StoreClient* store, const std::string& key, int nranks,
                                          int rank, Backend backend, const CommOptions& options);

// The communicator of every rank of the job described by the environment (rendezvous.h): rank
// 0 hosts the store at the master address unless a launcher does. Every rank must create its
// communicators from the environment in the same order.
Expected<std::unique_ptr<Comm>> init_comm_from_env(Backend backend, const CommOptions& options);

}  // namespace tessel::dist
