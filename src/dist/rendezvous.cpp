// Unique ids and rank discovery from the environment (rendezvous.h).
#include "dist/rendezvous.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <random>
#include <vector>

#include "dist/store.h"

namespace tessel::dist {

namespace {

constexpr char kIdMagic[4] = {'T', 'S', 'L', '1'};
constexpr size_t kHostBytes = 64;
constexpr size_t kKeyBytes = 40;

std::string default_store_host() {
  if (const char* addr = std::getenv("TESSEL_MASTER_ADDR"); addr && *addr) return addr;
  ifaddrs* list = nullptr;
  std::string found = "127.0.0.1";
  if (::getifaddrs(&list) == 0) {
    for (ifaddrs* a = list; a; a = a->ifa_next) {
      if (!a->ifa_addr || a->ifa_addr->sa_family != AF_INET) continue;
      if ((a->ifa_flags & IFF_LOOPBACK) || !(a->ifa_flags & IFF_UP)) continue;
      char text[INET_ADDRSTRLEN] = {};
      ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr, text,
                  sizeof(text));
      found = text;
      break;
    }
    ::freeifaddrs(list);
  }
  return found;
}

// Stores started by tesselGetUniqueId; each stops by itself once its communicator is set up.
struct IdStores {
  std::mutex mu;
  std::vector<std::unique_ptr<StoreServer>> servers;
};
IdStores& id_stores() {
  static IdStores* stores = new IdStores();  // never destroyed: ranks may still be joining at exit
  return *stores;
}

Expected<int> parse_int(const char* name, const char* text, int min) {
  char* end = nullptr;
  long value = std::strtol(text, &end, 10);
  if (end == text || *end != '\0' || value < min || value > 1 << 24)
    return invalid_argument("{}='{}': expected a whole number >= {}", name, text, min);
  return static_cast<int>(value);
}

}  // namespace

std::string random_key() {
  std::random_device device;
  return fmt::format("{:08x}{:08x}{:08x}{:08x}", device(), device(), device(), device());
}

void encode_unique_id(const UniqueId& id, char (&out)[kUniqueIdBytes]) {
  std::memset(out, 0, kUniqueIdBytes);
  std::memcpy(out, kIdMagic, 4);
  out[4] = static_cast<char>(id.port & 0xFF);
  out[5] = static_cast<char>((id.port >> 8) & 0xFF);
  std::strncpy(out + 8, id.host.c_str(), kHostBytes - 1);
  std::strncpy(out + 8 + kHostBytes, id.key.c_str(), kKeyBytes - 1);
}

Expected<UniqueId> decode_unique_id(const char (&in)[kUniqueIdBytes]) {
  if (std::memcmp(in, kIdMagic, 4) != 0)
    return invalid_argument("not a tessel unique id (make it with tesselGetUniqueId)");
  UniqueId id;
  id.port = static_cast<unsigned char>(in[4]) | (static_cast<unsigned char>(in[5]) << 8);
  id.host.assign(in + 8, strnlen(in + 8, kHostBytes));
  id.key.assign(in + 8 + kHostBytes, strnlen(in + 8 + kHostBytes, kKeyBytes));
  if (id.port == 0 || id.host.empty() || id.key.empty())
    return invalid_argument("corrupt tessel unique id");
  return id;
}

Expected<UniqueId> create_unique_id() {
  UniqueId id;
  id.host = default_store_host();
  if (id.host.size() >= kHostBytes)
    return invalid_argument("rendezvous host name '{}' is longer than {} characters", id.host,
                            kHostBytes - 1);
  id.key = random_key();
  TESSEL_ASSIGN_OR_RETURN(auto server, StoreServer::start(id.host, 0));
  id.port = server->port();
  server->stop_when_counter_reaches(id.key + "/done", id.key + "/nranks");
  IdStores& stores = id_stores();
  std::lock_guard lock(stores.mu);
  std::erase_if(stores.servers, [](const auto& s) { return s->stopped(); });
  stores.servers.push_back(std::move(server));
  return id;
}

Expected<RankEnv> rank_env_from(const std::function<const char*(const char*)>& get) {
  auto value = [&](const char* name) -> const char* {
    const char* v = get(name);
    return v && *v ? v : nullptr;
  };
  struct Scheme {
    const char* source;
    const char* rank;
    const char* size;
    const char* local_rank;
    const char* addr;
    const char* port;
  };
  static const Scheme kSchemes[] = {
      {"TESSEL_*", "TESSEL_RANK", "TESSEL_WORLD_SIZE", "TESSEL_LOCAL_RANK", "TESSEL_MASTER_ADDR",
       "TESSEL_MASTER_PORT"},
      {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"},
      {"OpenMPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
       nullptr, nullptr},
      {"Slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", nullptr, nullptr},
  };
  for (const Scheme& s : kSchemes) {
    if (!value(s.rank) && !value(s.size)) continue;
    if (!value(s.rank) || !value(s.size))
      return invalid_argument("{} is set but {} is not", value(s.rank) ? s.rank : s.size,
                              value(s.rank) ? s.size : s.rank);
    RankEnv env;
    env.source = s.source;
    TESSEL_ASSIGN_OR_RETURN(env.rank, parse_int(s.rank, value(s.rank), 0));
    TESSEL_ASSIGN_OR_RETURN(env.world_size, parse_int(s.size, value(s.size), 1));
    if (env.rank >= env.world_size)
      return invalid_argument("{}={} is not below {}={}", s.rank, env.rank, s.size, env.world_size);
    env.local_rank = env.rank;
    if (value(s.local_rank)) {
      TESSEL_ASSIGN_OR_RETURN(env.local_rank, parse_int(s.local_rank, value(s.local_rank), 0));
    }
    // The address and port may come from TESSEL_* or torchrun's names whatever gave the rank.
    for (const char* name : {s.addr, "TESSEL_MASTER_ADDR", "MASTER_ADDR"})
      if (name && value(name) && env.master_addr.empty()) env.master_addr = value(name);
    for (const char* name : {s.port, "TESSEL_MASTER_PORT", "MASTER_PORT"}) {
      if (name && value(name) && env.master_port == 0) {
        TESSEL_ASSIGN_OR_RETURN(env.master_port, parse_int(name, value(name), 1));
      }
    }
    if (env.master_port > 65535)
      return invalid_argument("rendezvous port {} is not a TCP port", env.master_port);
    if (env.master_addr.empty() && env.master_port != 0) env.master_addr = "127.0.0.1";
    env.agent_store =
        value("TESSEL_USE_AGENT_STORE") && std::string_view(value("TESSEL_USE_AGENT_STORE")) == "1";
    return env;
  }
  return not_found(
      "no rank in the environment: set TESSEL_RANK and TESSEL_WORLD_SIZE (or "
      "torchrun's RANK and WORLD_SIZE), or start the program with `tessel launch`, "
      "mpirun or srun");
}

Expected<RankEnv> rank_env() {
  return rank_env_from([](const char* name) { return std::getenv(name); });
}

}  // namespace tessel::dist
