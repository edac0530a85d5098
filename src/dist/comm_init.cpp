// Options, backend choice and the set-up of each backend's communicator (comm_init.h).
#include "dist/comm_init.h"

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <random>

#include "dist/hier_transport.h"
#include "dist/host_comm.h"
#include "dist/mpi_loader.h"
#include "dist/nccl/nccl_comm.h"
#include "dist/process_info.h"
#include "dist/rendezvous.h"
#include "dist/shm/shm_transport.h"

namespace tessel::dist {

const char* backend_name(Backend backend) {
  switch (backend) {
    case Backend::kShm:
      return "shm";
    case Backend::kMpi:
      return "mpi";
    case Backend::kNccl:
      return "nccl";
  }
  return "?";
}

Expected<Backend> parse_backend(std::string_view name) {
  if (name == "shm") return Backend::kShm;
  if (name == "mpi") return Backend::kMpi;
  if (name == "nccl") return Backend::kNccl;
  return invalid_argument("unknown backend '{}' (expected shm, mpi or nccl)", name);
}

namespace {

Expected<double> env_seconds(const char* name, double fallback) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return fallback;
  char* end = nullptr;
  double value = std::strtod(text, &end);
  if (end == text || *end != '\0' || !(value >= 0))
    return invalid_argument("{}='{}': expected a number of seconds >= 0", name, text);
  return value;
}

std::string random_hex(int digits) {
  std::random_device device;
  std::string out;
  while (static_cast<int>(out.size()) < digits)
    out += fmt::format("{:08x}", device());
  return out.substr(0, digits);
}

// Segment names carry the launcher's job id, so `tessel launch` can remove what a crashed job
// left behind (the normal path removes the name as soon as every rank has mapped it).
std::string segment_name() {
  const char* job = std::getenv("TESSEL_JOB_ID");
  return fmt::format("/tessel-{}-{}-{}", job && *job ? job : "x", ::getpid(), random_hex(8));
}

constexpr int kMaxShmRanks = 64;

// Every rank waits for the set-up key `key`; on a timeout, says which ranks never arrived.
Status missing_ranks_error(StoreClient& store, const std::string& key, int nranks,
                           const Status& cause) {
  std::vector<int> missing;
  for (int r = 0; r < nranks; ++r) {
    auto there = store.contains(fmt::format("{}/rank/{}", key, r));
    if (there.ok() && !*there) missing.push_back(r);
  }
  if (missing.empty()) return cause;
  std::string list;
  for (int r : missing)
    list += (list.empty() ? "" : ", ") + std::to_string(r);
  return Status(cause.code(), fmt::format("{} of {} ranks never joined (missing: {}): {}",
                                          missing.size(), nranks, list, cause.message()));
}

Expected<std::unique_ptr<Comm>> init_shm_comm(StoreClient& store, const std::string& key,
                                              int nranks, int rank, const CommOptions& options) {
  if (nranks > kMaxShmRanks)
    return invalid_argument("the shm backend supports up to {} ranks, not {}", kMaxShmRanks,
                            nranks);
  const std::string host = host_identity();
  TESSEL_TRY(store.set(fmt::format("{}/rank/{}", key, rank), host));
  std::shared_ptr<shm::Segment> segment;
  if (rank == 0) {
    for (int r = 1; r < nranks; ++r) {
      auto theirs = store.get(fmt::format("{}/rank/{}", key, r), options.timeout_s);
      if (!theirs.ok()) return missing_ranks_error(store, key, nranks, theirs.status());
      if (*theirs != host)
        return failed_precondition(
            "the shm backend needs every rank on one machine, but rank "
            "{} runs on {} and rank 0 on {}; use the mpi backend",
            r, *theirs, host);
    }
    TESSEL_ASSIGN_OR_RETURN(shm::Params params, shm::params_from_env());
    TESSEL_ASSIGN_OR_RETURN(segment,
                            shm::Segment::create(segment_name(), shm::make_layout(nranks, params)));
    Status published = store.set(key + "/segment", segment->name());
    if (!published.ok()) {
      (void)segment->unlink();
      return published;
    }
  } else {
    auto name = store.get(key + "/segment", options.timeout_s);
    if (!name.ok()) return missing_ranks_error(store, key, nranks, name.status());
    TESSEL_ASSIGN_OR_RETURN(segment, shm::Segment::open(*name));
    if (segment->layout().nranks != static_cast<uint32_t>(nranks))
      return invalid_argument(
          "rank {} was told the communicator has {} ranks, rank 0 made it "
          "for {}",
          rank, nranks, segment->layout().nranks);
  }
  auto transport = std::make_unique<shm::ShmTransport>(segment, rank, options);
  // Once every rank has mapped the segment its name can go: the memory is freed when the last
  // rank unmaps it or dies, so nothing is left in /dev/shm whatever happens later.
  Status attached = store.barrier(key + "/attached", nranks, options.timeout_s);
  (void)segment->unlink();
  if (!attached.ok()) {
    transport->leave(/*aborted=*/true);
    return missing_ranks_error(store, key, nranks, attached)
        .with_context("setting up the shm communicator");
  }
  return std::unique_ptr<Comm>(new HostComm(rank, nranks, std::move(transport)));
}

}  // namespace

Expected<CommOptions> resolve_options(double timeout_s, double op_timeout_s, int check_calls) {
  CommOptions options;
  if (timeout_s >= 0) {
    options.timeout_s = timeout_s;
  } else {
    TESSEL_ASSIGN_OR_RETURN(options.timeout_s,
                            env_seconds("TESSEL_COMM_TIMEOUT", options.timeout_s));
  }
  if (options.timeout_s <= 0) return invalid_argument("the communicator timeout must be > 0 s");
  if (op_timeout_s >= 0) {
    options.op_timeout_s = op_timeout_s;
  } else {
    TESSEL_ASSIGN_OR_RETURN(options.op_timeout_s,
                            env_seconds("TESSEL_COMM_OP_TIMEOUT", options.op_timeout_s));
  }
  if (check_calls >= 0) {
    options.check_calls = check_calls != 0;
  } else if (const char* text = std::getenv("TESSEL_COMM_CHECK_CALLS"); text && *text) {
    std::string_view value(text);
    if (value != "0" && value != "1")
      return invalid_argument("TESSEL_COMM_CHECK_CALLS='{}': expected 0 or 1", value);
    options.check_calls = value == "1";
  }
  return options;
}

Expected<Backend> resolve_backend(std::optional<Backend> requested) {
  if (requested) return *requested;
  const char* text = std::getenv("TESSEL_BACKEND");
  if (text == nullptr || *text == '\0') return Backend::kShm;
  auto backend = parse_backend(text);
  if (!backend.ok()) return backend.status().with_context("TESSEL_BACKEND");
  return backend;
}

Expected<std::vector<std::unique_ptr<Comm>>> init_local_comms(int nranks,
                                                              const CommOptions& options) {
  if (nranks < 1 || nranks > kMaxShmRanks)
    return invalid_argument("a communicator in one process needs 1 to {} ranks, not {}",
                            kMaxShmRanks, nranks);
  TESSEL_ASSIGN_OR_RETURN(shm::Params params, shm::params_from_env());
  TESSEL_ASSIGN_OR_RETURN(auto segment,
                          shm::Segment::create_anonymous(shm::make_layout(nranks, params)));
  std::vector<std::unique_ptr<Comm>> comms;
  for (int rank = 0; rank < nranks; ++rank)
    comms.push_back(std::make_unique<HostComm>(
        rank, nranks, std::make_unique<shm::ShmTransport>(segment, rank, options)));
  return comms;
}

Expected<std::unique_ptr<Comm>> init_comm(StoreClient* store, const std::string& key, int nranks,
                                          int rank, Backend backend, const CommOptions& options) {
  if (nranks < 1) return invalid_argument("a communicator needs at least one rank, not {}", nranks);
  if (rank < 0 || rank >= nranks)
    return invalid_argument("rank {} is outside 0..{}", rank, nranks - 1);
  if (store == nullptr && backend != Backend::kMpi)
    return invalid_argument("the {} backend needs a rendezvous store", backend_name(backend));
  // Tells a store made for this one communicator (tesselGetUniqueId) when it can shut down.
  if (store && rank == 0) TESSEL_TRY(store->set(key + "/nranks", std::to_string(nranks)));
  Expected<std::unique_ptr<Comm>> comm = unavailable("no backend");
  switch (backend) {
    case Backend::kShm:
      comm = init_shm_comm(*store, key, nranks, rank, options);
      break;
    case Backend::kMpi: {
      auto world = make_mpi_transport(nranks, rank, options);
      if (!world.ok()) return world.status();
      // Ranks that share a machine reduce through shared memory first (hier_transport.h).
      auto transport = maybe_hierarchical(std::move(*world), rank, nranks, options, segment_name());
      if (!transport.ok()) return transport.status();
      comm = std::unique_ptr<Comm>(new HostComm(rank, nranks, std::move(*transport)));
      break;
    }
    case Backend::kNccl:
      comm = init_nccl_comm(*store, key, nranks, rank, options);
      break;
  }
  if (store) (void)store->add(key + "/done", 1);
  return comm;
}

Expected<std::unique_ptr<Comm>> init_comm_from_env(Backend backend, const CommOptions& options) {
  auto found = rank_env();
  if (backend == Backend::kMpi) {
    // MPI knows the ranks itself; the variables, where set, must agree (the plug-in checks).
    if (found.ok()) return init_comm(nullptr, "", found->world_size, found->rank, backend, options);
    TESSEL_ASSIGN_OR_RETURN(MpiWorld world, mpi_world());
    return init_comm(nullptr, "", world.size, world.rank, backend, options);
  }
  if (!found.ok()) return found.status();
  const RankEnv& env = *found;
  if (env.master_port == 0)
    return invalid_argument(
        "rank {} of {} (from {}) has no rendezvous port: set "
        "TESSEL_MASTER_PORT (or MASTER_PORT)",
        env.rank, env.world_size, env.source);
  // Communicators made from the environment are numbered in the order each process makes them.
  static std::atomic<int> made{0};
  const std::string key = fmt::format("env/comm{}", made.fetch_add(1));
  if (env.rank == 0 && !env.agent_store) {
    // Rank 0 hosts the store until every rank has joined this communicator.
    TESSEL_ASSIGN_OR_RETURN(auto server, StoreServer::start(env.master_addr, env.master_port));
    server->stop_when_counter_reaches(key + "/done", key + "/nranks");
    static std::mutex mu;
    static auto* servers = new std::vector<std::unique_ptr<StoreServer>>();
    std::lock_guard lock(mu);
    std::erase_if(*servers, [](const auto& s) { return s->stopped(); });
    servers->push_back(std::move(server));
  }
  TESSEL_ASSIGN_OR_RETURN(
      StoreClient store, StoreClient::connect(env.master_addr, env.master_port, options.timeout_s));
  auto comm = init_comm(&store, key, env.world_size, env.rank, backend, options);
  if (!comm.ok())
    return comm.status().with_context("rank {} of {} (from {})", env.rank, env.world_size,
                                      env.source);
  return comm;
}

}  // namespace tessel::dist
