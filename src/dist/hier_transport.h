// Hierarchical collectives for ranks spread over machines several to a machine: an all-reduce
// reduces inside each machine through a shared-memory segment (the shm engine), the machines'
// leaders (the lowest rank on each) all-reduce among themselves over the world transport (MPI:
// a ring of sends and receives, 2 (L-1) steps of 1/L of the buffer for L machines), and each
// leader broadcasts the result inside its machine. So a machine's ranks cross the network once
// per all-reduce instead of each of them, as NCCL does between nodes.
//
// Every other call (broadcast, all-gather, sends, ...) goes to the world transport unchanged.
// Chosen by the mpi backend when it sees, from the ranks' host identities (process_info.h),
// that some machine runs more than one rank and more than one machine takes part; set
// TESSEL_HIERARCHICAL=0 for the flat world transport, =1 to make it an error when the ranks'
// machines do not call for the hierarchy. Results equal the flat ones for
// integers, max and min, and for floating-point sums up to the order of additions (f16/bf16
// round at each level).
#pragma once

#include <memory>
#include <string>

#include "dist/transport.h"

namespace tessel::dist {

// Wraps `world` (rank `rank` of `nranks`) when the ranks' machines call for it; otherwise returns
// `world` itself. Collective: every rank of the world calls it at the same point.
// `segment_name` names the shared-memory segment if this rank leads its machine.
Expected<std::unique_ptr<Transport>> maybe_hierarchical(std::unique_ptr<Transport> world, int rank,
                                                        int nranks, const CommOptions& options,
                                                        const std::string& segment_name);

}  // namespace tessel::dist
