// A step-time model for data-parallel training: from the compute of one rank (forward, backward
// with the moment each gradient bucket is ready, optimizer) and a network (alpha-beta links and
// the all-reduce algorithm), the step time and the communication the step waits for, on N ranks,
// with the buckets' all-reduces overlapped with backward (as parallel/data_parallel does it) or
// run after it.
//
//   Network net{.ranks = 128, .link = *parse_link("25GB/s,5us")};
//   StepPrediction p = predict_step(profile, net, /*overlap=*/true);   // p.exposed_s / p.step_s
//
// Costs (alpha = a link's latency, beta = 1 / its bandwidth, S = bytes, p = ranks):
//   ring          2 (p-1) alpha + 2 (p-1)/p S beta       (reduce-scatter + all-gather)
//   doubling      ceil(log2 p) (alpha + S beta)          (recursive doubling: full buffers)
//   hierarchical  inside each machine of k ranks: a reduce and a broadcast over the local link,
//                 2 (alpha_l + S beta_l) when k > 1; between the m machines: ring over m
//   auto          what Open MPI's non-blocking all-reduce (libnbc, which the mpi backend calls)
//                 picks: doubling below 4 ranks or 64 KiB, ring otherwise
// Each call first compares a 32-byte descriptor across ranks (CommOptions::check_calls), one
// more latency per doubling round: ceil(log2 p) alpha.
// The buckets' all-reduces run one at a time, in launch order, each starting when its gradients
// are ready (overlap) or when backward ends (no overlap) and the previous one has finished. After
// backward the optimizer updates bucket by bucket, each once its all-reduce is done (as
// DataParallel's bucketed optimizer does); exposed = the time the step waits for collectives.
//
// Contention (ranks that share cores, as the simulated machines of `tessel bench plan` share this
// host's): p ranks, each one compute thread, on C cores compute at 1 / max(1, p / C) of their
// speed alone. While a collective is in flight each rank's communication thread (the stream's
// progress thread, polling MPI) is runnable for a share u of the time, so compute then runs at
// max(1, p / C) / max(1, p (1 + u) / C) of that. The other way round, a collective in flight
// beside backward progresses at a rate eta of its own (the progress thread polls MPI only when it
// gets a core). C, u and eta are calibrated from measurements (`tessel bench plan`); Contention{}
// (one rank per core, u = 0, eta = 1) is a machine of its own per rank.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "support/status.h"

namespace tessel::plan {

// A message of b bytes takes latency_s + b / bytes_per_s.
struct Link {
  double bytes_per_s = 0;
  double latency_s = 0;
};
// "25GB/s,5us", "100Mbit/s,1ms", "12.5MB/s" (latency 0); units B, KB, MB, GB (10^3 steps), bit,
// Kbit, Mbit, Gbit per second; s, ms, us, ns.
Expected<Link> parse_link(std::string_view text);
std::string describe(const Link& link);  // "25 GB/s, 5 us"

enum class Algorithm { kAuto, kRing, kDoubling, kHierarchical };
Expected<Algorithm> parse_algorithm(std::string_view name);  // auto, ring, doubling, hierarchical
const char* algorithm_name(Algorithm algorithm);

struct Network {
  int ranks = 1;
  Link link;  // between machines (every rank its own machine unless hierarchical)
  Algorithm algorithm = Algorithm::kAuto;
  int ranks_per_machine = 1;                           // hierarchical: k
  Link local{.bytes_per_s = 20e9, .latency_s = 2e-6};  // hierarchical: inside a machine (shm)
  bool check_calls = true;
};

// The algorithm `kAuto` stands for at this size, or the network's own.
Algorithm algorithm_for(double bytes, const Network& network);
// Seconds one all-reduce of `bytes` takes.
double all_reduce_seconds(double bytes, const Network& network);

struct BucketProfile {
  double bytes = 0;
  double ready_s = 0;  // after backward started, when its last gradient is in
};

// One rank's compute in one step, as measured (plan/profile.h).
struct ComputeProfile {
  double forward_s = 0;
  double backward_s = 0;
  double optimizer_s = 0;
  std::vector<BucketProfile> buckets;  // in launch order
  double gradient_bytes() const;
};

struct Contention {
  double ranks = 1;       // compute threads sharing the cores: p
  double cores = 1e9;     // cores they share: C (effective: what other load leaves)
  double comm_share = 0;  // u, the share of a core a rank's communication thread takes
  // eta: the rate a collective progresses at while backward computes beside it, relative to its
  // rate alone (MPI over TCP moves data only when the progress thread gets a core to poll it).
  double comm_rate_in_compute = 1;
  double compute_slowdown() const;          // max(1, p / C)
  double compute_slowdown_in_comm() const;  // max(1, p (1 + u) / C)
};

struct StepPrediction {
  double compute_s = 0;   // forward + backward + optimizer
  double comm_s = 0;      // every bucket's all-reduce, back to back
  double exposed_s = 0;   // what of it the step waits for
  double step_s = 0;      // compute + exposed
  double backward_s = 0;  // backward as slowed by contention (and communication beside it)
  double overhead() const { return step_s > 0 ? exposed_s / step_s : 0; }
};

// `profile` is one rank's compute alone on its cores; `contention` slows it (compute_s and
// backward_s are the slowed times).
StepPrediction predict_step(const ComputeProfile& profile, const Network& network, bool overlap,
                            const Contention& contention = {});

// Least squares (in seconds) over (bytes, seconds) all-reduce timings of several sizes: the link
// under which all_reduce_seconds fits them best; latency 0 when a negative one would fit better
// (an error when no positive bandwidth fits).
Expected<Link> fit_link(const Network& network,
                        const std::vector<std::pair<double, double>>& timings);

// The compute profile scaled to a device `speedup` times faster (bucket sizes unchanged).
ComputeProfile scaled(const ComputeProfile& profile, double speedup);

}  // namespace tessel::plan
