// The worker of `tessel bench comm`: one rank of a benchmark job, started by `tessel launch`
// (impl tessel-shm) or mpirun (tessel-mpi, openmpi). It times one collective over a range of
// sizes the way nccl-tests does (warm-up, then `iters` calls issued back to back and one wait,
// repeated; the median repetition counts) and rank 0 prints one JSON object per size:
//   {"impl":"tessel-shm","op":"all_reduce","ranks":2,"bytes":8,"count":2,"type":"f32",
//    "redop":"sum","time_us":0.61,"algbw":0.013,"busbw":0.013,"library":"..."}
// ("library": the MPI library's version line, for the openmpi rows).
// algbw = bytes / time; busbw = algbw * 2(n-1)/n for all_reduce (the bytes each rank must move,
// as nccl-tests defines it), algbw * (n-1)/n for all_gather and reduce_scatter.
//
// Usage: tessel_comm_bench --impl tessel-shm|tessel-mpi|openmpi [--op all_reduce]
//                          [--min-bytes 8] [--max-bytes 268435456] [--type f32]
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "dist/tessel_comm.h"
#include "dist/types.h"

namespace {

using Clock = std::chrono::steady_clock;
using tessel::dist::DataType;

struct Args {
  std::string impl = "tessel-shm";
  std::string op = "all_reduce";
  std::string type = "f32";
  size_t min_bytes = 8;
  size_t max_bytes = 256u << 20;
};

double bus_factor(const std::string& op, int n) {
  if (op == "all_reduce") return 2.0 * (n - 1) / n;
  if (op == "all_gather" || op == "reduce_scatter") return static_cast<double>(n - 1) / n;
  return 1.0;
}

// Issues `iters` calls and waits for them; returns seconds per call.
template <typename Issue, typename Wait, typename Barrier>
double time_per_call(int iters, Issue issue, Wait wait, Barrier barrier) {
  std::vector<double> reps;
  for (int rep = 0; rep < 3; ++rep) {
    barrier();
    auto start = Clock::now();
    for (int i = 0; i < iters; ++i)
      issue();
    wait();
    reps.push_back(std::chrono::duration<double>(Clock::now() - start).count() / iters);
  }
  std::sort(reps.begin(), reps.end());
  return reps[1];
}

// Enough calls for about 50 ms at the expected speed, at least 5.
int iterations(size_t bytes) {
  const double seconds_per_call = 2e-6 + bytes / 4e9;
  return static_cast<int>(std::clamp(0.05 / seconds_per_call, 5.0, 20000.0));
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string key = argv[i], value = argv[i + 1];
    if (key == "--impl")
      args.impl = value;
    else if (key == "--op")
      args.op = value;
    else if (key == "--type")
      args.type = value;
    else if (key == "--min-bytes")
      args.min_bytes = std::strtoull(value.c_str(), nullptr, 10);
    else if (key == "--max-bytes")
      args.max_bytes = std::strtoull(value.c_str(), nullptr, 10);
    else {
      std::fprintf(stderr, "tessel_comm_bench: unknown option %s\n", key.c_str());
      return 2;
    }
  }
  auto type = tessel::dist::parse_dtype(args.type);
  if (!type.ok()) {
    std::fprintf(stderr, "tessel_comm_bench: %s\n", type.status().to_string().c_str());
    return 2;
  }
  const size_t elem = tessel::dist::dtype_size(*type);
  const bool use_mpi = args.impl != "tessel-shm";
  if (use_mpi) {
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  }

  tesselComm_t comm = nullptr;
  tesselStream_t stream = nullptr;
  int rank = 0, nranks = 1;
  if (args.impl == "openmpi") {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  } else {
    tesselConfig_t config = TESSEL_CONFIG_INITIALIZER;
    config.backend = args.impl == "tessel-mpi" ? tesselBackendMpi : tesselBackendShm;
    if (tesselCommInitFromEnv(&comm, &config) != tesselSuccess) {
      std::fprintf(stderr, "tessel_comm_bench: %s\n", tesselGetLastError(nullptr));
      return 1;
    }
    tesselCommUserRank(comm, &rank);
    tesselCommCount(comm, &nranks);
    tesselStreamCreate(&stream);
  }
  std::string library = "tessel";
  if (args.impl == "openmpi") {
    char version[MPI_MAX_LIBRARY_VERSION_STRING] = {};
    int length = 0;
    MPI_Get_library_version(version, &length);
    library.assign(version, strcspn(version, ",\n"));
  }
  const bool gather_like = args.op == "all_gather" || args.op == "reduce_scatter";
  // Sizes follow nccl-tests: the size of the larger buffer.
  std::vector<unsigned char> send(args.max_bytes + 64, 1), recv(args.max_bytes + 64, 0);
  std::vector<float> one(1);
  auto barrier = [&] {
    if (comm) {
      tesselAllReduce(one.data(), one.data(), 1, tesselFloat32, tesselSum, comm, stream);
      tesselStreamSynchronize(stream);
    } else {
      MPI_Barrier(MPI_COMM_WORLD);
    }
  };
  for (size_t bytes = args.min_bytes; bytes <= args.max_bytes; bytes *= 2) {
    const size_t count = bytes / elem;
    const size_t per_rank = gather_like ? count / nranks : count;
    if (per_rank == 0) continue;
    const auto t = static_cast<tesselDataType_t>(*type);
    MPI_Datatype mpi_type = elem == 8 ? MPI_DOUBLE : elem == 4 ? MPI_FLOAT : MPI_UINT16_T;
    auto issue = [&] {
      if (comm) {
        if (args.op == "all_reduce")
          tesselAllReduce(send.data(), recv.data(), count, t, tesselSum, comm, stream);
        else if (args.op == "all_gather")
          tesselAllGather(send.data(), recv.data(), per_rank, t, comm, stream);
        else if (args.op == "reduce_scatter")
          tesselReduceScatter(send.data(), recv.data(), per_rank, t, tesselSum, comm, stream);
        else if (args.op == "broadcast")
          tesselBroadcast(send.data(), recv.data(), count, t, 0, comm, stream);
      } else {
        if (args.op == "all_reduce")
          MPI_Allreduce(send.data(), recv.data(), static_cast<int>(count), mpi_type, MPI_SUM,
                        MPI_COMM_WORLD);
        else if (args.op == "all_gather")
          MPI_Allgather(send.data(), static_cast<int>(per_rank), mpi_type, recv.data(),
                        static_cast<int>(per_rank), mpi_type, MPI_COMM_WORLD);
        else if (args.op == "reduce_scatter")
          MPI_Reduce_scatter_block(send.data(), recv.data(), static_cast<int>(per_rank), mpi_type,
                                   MPI_SUM, MPI_COMM_WORLD);
        else if (args.op == "broadcast")
          MPI_Bcast(recv.data(), static_cast<int>(count), mpi_type, 0, MPI_COMM_WORLD);
      }
    };
    auto wait = [&] {
      if (comm && tesselStreamSynchronize(stream) != tesselSuccess) {
        std::fprintf(stderr, "tessel_comm_bench: %s\n", tesselGetLastError(nullptr));
        std::exit(1);
      }
    };
    const int iters = iterations(bytes);
    for (int i = 0; i < std::min(iters, 20); ++i)
      issue();  // warm-up
    wait();
    const double seconds = time_per_call(iters, issue, wait, barrier);
    if (rank == 0) {
      const double algbw = bytes / seconds / 1e9;
      std::printf(
          "{\"impl\":\"%s\",\"op\":\"%s\",\"ranks\":%d,\"bytes\":%zu,\"count\":%zu,"
          "\"type\":\"%s\",\"redop\":\"sum\",\"time_us\":%.3f,\"algbw\":%.4f,"
          "\"busbw\":%.4f,\"library\":\"%s\"}\n",
          args.impl.c_str(), args.op.c_str(), nranks, bytes, count, args.type.c_str(),
          seconds * 1e6, algbw, algbw * bus_factor(args.op, nranks), library.c_str());
      std::fflush(stdout);
    }
  }
  if (comm) {
    tesselStreamDestroy(stream);
    tesselCommDestroy(comm);
  }
  if (use_mpi) MPI_Finalize();
  return 0;
}
