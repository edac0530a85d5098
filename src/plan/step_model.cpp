// The alpha-beta step-time model (step_model.h).
#include "plan/step_model.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>

namespace tessel::plan {

namespace {

// "25GB/s" -> bytes per second; "5us" -> seconds. Returns false on anything else.
bool parse_rate(std::string_view text, double* out) {
  std::string s(text);
  char* end = nullptr;
  const double value = std::strtod(s.c_str(), &end);
  if (end == s.c_str() || !(value > 0)) return false;
  std::string unit(end);
  if (unit.size() > 2 && unit.substr(unit.size() - 2) == "/s") unit.resize(unit.size() - 2);
  struct Unit {
    const char* name;
    double bytes;
  };
  static const Unit units[] = {{"B", 1},          {"KB", 1e3},       {"MB", 1e6},
                               {"GB", 1e9},       {"TB", 1e12},      {"bit", 1.0 / 8},
                               {"Kbit", 1e3 / 8}, {"Mbit", 1e6 / 8}, {"Gbit", 1e9 / 8},
                               {"Tbit", 1e12 / 8}};
  for (const Unit& u : units)
    if (unit == u.name) {
      *out = value * u.bytes;
      return true;
    }
  return false;
}

bool parse_time(std::string_view text, double* out) {
  std::string s(text);
  char* end = nullptr;
  const double value = std::strtod(s.c_str(), &end);
  if (end == s.c_str() || !(value >= 0)) return false;
  const std::string unit(end);
  const double scale = unit == "s"    ? 1
                       : unit == "ms" ? 1e-3
                       : unit == "us" ? 1e-6
                       : unit == "ns" ? 1e-9
                                      : -1;
  if (scale < 0) return false;
  *out = value * scale;
  return true;
}

std::string trim(std::string_view text) {
  size_t a = 0, b = text.size();
  while (a < b && std::isspace(static_cast<unsigned char>(text[a])))
    ++a;
  while (b > a && std::isspace(static_cast<unsigned char>(text[b - 1])))
    --b;
  return std::string(text.substr(a, b - a));
}

int log2_ceil(int p) {
  int rounds = 0;
  while ((1 << rounds) < p)
    ++rounds;
  return rounds;
}

double ring_seconds(double bytes, int p, const Link& link) {
  if (p <= 1) return 0;
  return 2.0 * (p - 1) * link.latency_s + 2.0 * (p - 1) / p * bytes / link.bytes_per_s;
}

double doubling_seconds(double bytes, int p, const Link& link) {
  return log2_ceil(p) * (link.latency_s + bytes / link.bytes_per_s);
}

}  // namespace

Expected<Link> parse_link(std::string_view text) {
  Link link;
  const size_t comma = text.find(',');
  if (!parse_rate(trim(text.substr(0, comma)), &link.bytes_per_s))
    return invalid_argument(
        "link '{}': expected a bandwidth such as 25GB/s or 100Mbit/s, then optionally ',' and a "
        "latency such as 5us",
        text);
  if (comma != std::string_view::npos && !parse_time(trim(text.substr(comma + 1)), &link.latency_s))
    return invalid_argument("link '{}': expected a latency such as 5us, 1ms or 0.5s after ','",
                            text);
  return link;
}

std::string describe(const Link& link) {
  const double b = link.bytes_per_s;
  std::string rate = b >= 1e9   ? fmt::format("{:.4g} GB/s", b / 1e9)
                     : b >= 1e6 ? fmt::format("{:.4g} MB/s", b / 1e6)
                                : fmt::format("{:.4g} KB/s", b / 1e3);
  return fmt::format("{}, {:.4g} us", rate, link.latency_s * 1e6);
}

Expected<Algorithm> parse_algorithm(std::string_view name) {
  if (name == "auto") return Algorithm::kAuto;
  if (name == "ring") return Algorithm::kRing;
  if (name == "doubling") return Algorithm::kDoubling;
  if (name == "hierarchical") return Algorithm::kHierarchical;
  return invalid_argument("unknown algorithm '{}' (expected auto, ring, doubling or hierarchical)",
                          name);
}

const char* algorithm_name(Algorithm algorithm) {
  switch (algorithm) {
    case Algorithm::kAuto:
      return "auto";
    case Algorithm::kRing:
      return "ring";
    case Algorithm::kDoubling:
      return "doubling";
    case Algorithm::kHierarchical:
      return "hierarchical";
  }
  return "?";
}

Algorithm algorithm_for(double bytes, const Network& network) {
  if (network.algorithm != Algorithm::kAuto) return network.algorithm;
  return network.ranks < 4 || bytes < 65536 ? Algorithm::kDoubling : Algorithm::kRing;
}

double all_reduce_seconds(double bytes, const Network& network) {
  const int p = network.ranks;
  if (p <= 1) return 0;
  const double check = network.check_calls ? log2_ceil(p) * network.link.latency_s : 0;
  switch (algorithm_for(bytes, network)) {
    case Algorithm::kRing:
      return check + ring_seconds(bytes, p, network.link);
    case Algorithm::kDoubling:
      return check + doubling_seconds(bytes, p, network.link);
    case Algorithm::kHierarchical: {
      const int k = std::max(1, network.ranks_per_machine);
      const int machines = (p + k - 1) / k;
      const double inside =
          k > 1 ? 2 * (network.local.latency_s + bytes / network.local.bytes_per_s) : 0;
      return check + inside + ring_seconds(bytes, machines, network.link);
    }
    case Algorithm::kAuto:
      break;
  }
  return 0;
}

Expected<Link> fit_link(const Network& network,
                        const std::vector<std::pair<double, double>>& timings) {
  // T = a(S) latency + b(S) / bandwidth, linear in (latency, 1 / bandwidth), fitted in seconds:
  // the big messages, which carry a step's bytes, weigh most. (Through a shaped queue TCP moves
  // big messages slower per byte than small ones, which a burst lets through at line rate.)
  double saa = 0, sab = 0, sbb = 0, sat = 0, sbt = 0;
  for (const auto& [bytes, seconds] : timings) {
    if (!(seconds > 0)) continue;
    Network n = network;
    n.link = {.bytes_per_s = 1e300, .latency_s = 1};
    const double a = all_reduce_seconds(bytes, n);
    n.link = {.bytes_per_s = 1, .latency_s = 0};
    const double b = all_reduce_seconds(bytes, n);
    saa += a * a;
    sab += a * b;
    sbb += b * b;
    sat += a * seconds;
    sbt += b * seconds;
  }
  const double det = saa * sbb - sab * sab;
  double latency = (sat * sbb - sbt * sab) / det;
  double inverse_rate = (saa * sbt - sab * sat) / det;
  if (std::isfinite(latency) && latency < 0) {  // no latency: bandwidth alone
    latency = 0;
    inverse_rate = sbt / sbb;
  }
  if (!(std::isfinite(latency) && std::isfinite(inverse_rate)) || inverse_rate <= 0)
    return invalid_argument("cannot fit a link to {} all-reduce timings", timings.size());
  return Link{.bytes_per_s = 1 / inverse_rate, .latency_s = latency};
}

double ComputeProfile::gradient_bytes() const {
  double total = 0;
  for (const BucketProfile& b : buckets)
    total += b.bytes;
  return total;
}

double Contention::compute_slowdown() const {
  return std::max(1.0, ranks / cores);
}
double Contention::compute_slowdown_in_comm() const {
  return std::max(1.0, ranks * (1 + comm_share) / cores);
}

StepPrediction predict_step(const ComputeProfile& profile, const Network& network, bool overlap,
                            const Contention& contention) {
  StepPrediction p;
  const double slow = contention.compute_slowdown();
  // Wall seconds per second of (contended) compute while a collective is in flight.
  const double in_comm = contention.compute_slowdown_in_comm() / slow;
  const double comm_rate = std::clamp(contention.comm_rate_in_compute, 1e-6, 1.0);
  const double backward_work = profile.backward_s * slow;
  std::vector<double> seconds;  // each bucket's all-reduce at full speed
  for (const BucketProfile& b : profile.buckets) {
    seconds.push_back(all_reduce_seconds(b.bytes, network));
    p.comm_s += seconds.back();
  }
  // Backward and the buckets' all-reduces as a walk through piecewise-constant rates: compute
  // (in seconds of contended work) goes at 1 / in_comm while a collective is in flight, else 1;
  // a collective (in seconds of its own) goes at comm_rate while backward computes, else 1.
  // Without overlap the all-reduces start when backward ends.
  const size_t n = profile.buckets.size();
  std::vector<double> ends(n, 0.0);
  double wall = 0, work = 0, left = 0;  // `left`: of the collective in flight
  size_t ready = 0, running = 0;        // buckets whose gradients are in; collectives begun
  bool busy = false;
  auto ready_at = [&](size_t i) {
    return overlap ? std::min(profile.buckets[i].ready_s, profile.backward_s) * slow
                   : backward_work;
  };
  while (true) {
    while (ready < n && ready_at(ready) <= work)
      ++ready;
    if (!busy && running < ready) {
      left = seconds[running++];
      busy = true;
    }
    const bool computing = work < backward_work;
    if (!computing && !busy) break;
    const double compute_speed = busy ? 1 / in_comm : 1;
    const double transfer_speed = computing ? comm_rate : 1;
    double dt = 1e300;
    if (computing) {
      const double target = ready < n ? std::min(ready_at(ready), backward_work) : backward_work;
      dt = std::min(dt, (target - work) / compute_speed);
    }
    if (busy) dt = std::min(dt, left / transfer_speed);
    wall += dt;
    if (computing) {
      work = std::min(backward_work, work + dt * compute_speed);
      if (work >= backward_work) p.backward_s = wall;
    }
    if (busy) {
      left -= dt * transfer_speed;
      if (left <= 1e-15) {
        ends[running - 1] = wall;
        busy = false;
      }
    }
  }
  if (backward_work <= 0) p.backward_s = 0;
  wall = p.backward_s;
  // The optimizer, bucket by bucket behind the all-reduces (its share of the time by bytes).
  const double optimizer = profile.optimizer_s * slow;
  const double total_bytes = profile.gradient_bytes();
  double end = wall;
  for (size_t i = 0; i < n; ++i) {
    const double share = total_bytes > 0 ? profile.buckets[i].bytes / total_bytes : 0;
    end = std::max(end, ends[i]) + optimizer * share;
  }
  if (profile.buckets.empty()) end += optimizer;
  p.compute_s = (profile.forward_s * slow) + p.backward_s + optimizer;
  p.step_s = profile.forward_s * slow + end;
  p.exposed_s = std::max(0.0, p.step_s - p.compute_s);
  return p;
}

ComputeProfile scaled(const ComputeProfile& profile, double speedup) {
  ComputeProfile out = profile;
  out.forward_s /= speedup;
  out.backward_s /= speedup;
  out.optimizer_s /= speedup;
  for (BucketProfile& b : out.buckets)
    b.ready_s /= speedup;
  return out;
}

}  // namespace tessel::plan
