// The mpi backend lives in a plug-in, libtessel_mpi.so, the only part of tessel linked to MPI:
// libtessel loads it with dlopen when a communicator asks for the mpi backend, so programs
// built on libtessel start and run (with shm or nccl) where MPI is not installed.
//
// The plug-in is looked up at $TESSEL_MPI_PLUGIN, then next to libtessel.so, then on the
// library path.
#pragma once

#include <memory>

#include "dist/transport.h"

namespace tessel::dist {

// Rank `rank` of `nranks` over MPI_COMM_WORLD (initialising MPI if nobody has), which must have
// exactly that rank and size: start the program with mpirun or srun.
Expected<std::unique_ptr<Transport>> make_mpi_transport(int nranks, int rank,
                                                        const CommOptions& options);

// This process's rank and the size of MPI_COMM_WORLD, initialising MPI if nobody has: for
// programs started by a launcher that sets no rank variables tessel knows.
struct MpiWorld {
  int rank = 0;
  int size = 1;
};
Expected<MpiWorld> mpi_world();

// What the plug-in exports (plain C names, found with dlsym). Bump the version when the
// Transport interface or these signatures change.
inline constexpr int kMpiPluginAbi = 1;
extern "C" {
using MpiPluginAbiFn = int (*)();
// Returns a new transport, or null with a message in `error`.
using MpiPluginCreateFn = Transport* (*)(int nranks, int rank, const CommOptions* options,
                                         char* error, size_t error_bytes);
// Fills rank and size; returns 0, or -1 with a message in `error`.
using MpiPluginWorldFn = int (*)(int* rank, int* size, char* error, size_t error_bytes);
}

}  // namespace tessel::dist
