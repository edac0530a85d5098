// How ranks find each other. Two ways:
//
// - NCCL's: one rank calls tesselGetUniqueId, which starts a store in that process, and hands
//   the 128-byte id (store address + communicator key) to the others by any means.
// - torchrun's: every rank reads its rank, the world size and the store's address from the
//   environment; rank 0 hosts the store at that address unless a launcher already does
//   (TESSEL_USE_AGENT_STORE=1, set by `tessel launch`). Read, first match wins:
//     TESSEL_RANK, TESSEL_WORLD_SIZE, TESSEL_LOCAL_RANK, TESSEL_MASTER_ADDR, TESSEL_MASTER_PORT
//     RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT                 (torchrun)
//     OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_RANK   (mpirun)
//     SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID                                (srun)
//   Under mpirun and srun the address defaults to 127.0.0.1 and needs TESSEL_MASTER_PORT or
//   MASTER_PORT, except for the mpi backend, which needs no store (and asks MPI for the rank if
//   none of these is set).
#pragma once

#include <functional>
#include <string>

#include "support/status.h"

namespace tessel::dist {

// What a tesselUniqueId holds.
struct UniqueId {
  std::string host;  // where the store listens
  int port = 0;
  std::string key;  // names the communicator in the store
};
inline constexpr size_t kUniqueIdBytes = 128;
void encode_unique_id(const UniqueId& id, char (&out)[kUniqueIdBytes]);
Expected<UniqueId> decode_unique_id(const char (&in)[kUniqueIdBytes]);

// Starts a store in this process for one communicator (it stops once every rank has joined) and
// returns the id naming it. The store listens on TESSEL_MASTER_ADDR, or else on this machine's
// first non-loopback IPv4 address, or else on 127.0.0.1.
Expected<UniqueId> create_unique_id();

struct RankEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  std::string master_addr;   // empty: none given
  int master_port = 0;       // 0: none given
  bool agent_store = false;  // a launcher hosts the store; rank 0 must not start one
  std::string source;        // "TESSEL_*", "torchrun", "OpenMPI", "Slurm"
};
// Reads the variables through `get` (std::getenv in real use).
Expected<RankEnv> rank_env_from(const std::function<const char*(const char*)>& get);
Expected<RankEnv> rank_env();

// A fresh random key for a communicator (32 hex digits).
std::string random_key();

}  // namespace tessel::dist
