// Machines simulated on this one, for multi-machine tests and benchmarks: each "machine" is a
// network namespace with its own host name, joined to the others by a veth pair on a bridge in
// this namespace, with the bandwidth (and, where the kernel has netem, the latency) of each link
// limited by `tc`. Ranks started in different namespaces can only reach each other over TCP, as
// on separate machines; /dev/shm is still shared, so the mpi backend is told to use TCP alone.
//
//   auto cluster = NetnsCluster::create(2, {.rate_bytes_per_s = 12.5e6});  // 100 Mbit/s links
//   launch({.nranks = 4, .backend = Backend::kMpi, .hosts = (*cluster)->hosts(),
//           .mpirun_args = (*cluster)->mpirun_args(), .rsh_agent = {"tessel", "netns-exec"}})
//
// Needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN) and iproute2; `available()` says why not. Names are
// unique per process and call ("tslPID-K-i"), and the destructor removes everything made;
// what a killed process left behind is removed by the next create() in any process.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "support/status.h"

namespace tessel::dist {

struct LinkShape {
  double rate_bytes_per_s = 0;  // each direction of each machine's link; 0: not limited
  double delay_s = 0;           // added one way (netem only); 0: none
};

// The mpirun arguments for ranks on simulated machines on `subnet`: TCP alone (no shared memory
// between namespaces, which share /dev/shm), on that subnet for the data (btl) and for the
// runtime's wiring (oob).
std::vector<std::string> netns_mpirun_args(const std::string& subnet);

class NetnsCluster {
 public:
  // OK when namespaces, veth pairs and a bridge can be made here; otherwise why not.
  static Status available();
  static Expected<std::unique_ptr<NetnsCluster>> create(int machines, const LinkShape& link);
  ~NetnsCluster();
  NetnsCluster(const NetnsCluster&) = delete;
  NetnsCluster& operator=(const NetnsCluster&) = delete;

  // The namespaces' names, which are also their host names and the hosts given to mpirun.
  const std::vector<std::string>& hosts() const { return hosts_; }
  const std::vector<std::string>& addresses() const { return addresses_; }  // one per host
  std::string subnet() const { return subnet_; }                            // "10.A.B.0/24"
  // How the links are limited: "netem rate ... delay ...", "tbf rate ... (no netem: delay not
  // added)" or "none".
  std::string shaping() const { return shaping_; }
  std::vector<std::string> mpirun_args() const { return netns_mpirun_args(subnet_); }

 private:
  NetnsCluster() = default;
  Status build(int machines, const LinkShape& link);
  void tear_down();

  std::string bridge_;
  std::vector<std::string> hosts_, addresses_;
  std::string subnet_, shaping_ = "none";
};

// `tessel netns-exec HOST CMD...`, the rsh agent that mpirun uses to start its daemons on a
// simulated machine: enters network namespace HOST, takes a UTS namespace of its own with host
// name HOST, and runs CMD with /bin/sh -c (mpirun hands its agent one shell command line).
// Returns only on failure.
Status exec_in_namespace(const std::string& host, const std::vector<std::string>& command);

}  // namespace tessel::dist
