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
// are ready (overlap) or when backward ends (no overlap) and the previous one has finished; the
// step waits for the last one: exposed = max(0, last end - backward end). Compute is assumed
// not slowed by the communication running beside it.
#pragma once

#include <string>
#include <string_view>
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

struct StepPrediction {
  double compute_s = 0;  // forward + backward + optimizer
  double comm_s = 0;     // every bucket's all-reduce, back to back
  double exposed_s = 0;  // what of it the step waits for
  double step_s = 0;     // compute + exposed
  double overhead() const { return step_s > 0 ? exposed_s / step_s : 0; }
};

StepPrediction predict_step(const ComputeProfile& profile, const Network& network, bool overlap);

// The compute profile scaled to a device `speedup` times faster (bucket sizes unchanged).
ComputeProfile scaled(const ComputeProfile& profile, double speedup);

}  // namespace tessel::plan
