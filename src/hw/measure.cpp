// The micro-benchmarks behind MeasuredFigures: a STREAM triad over arrays far larger than the
// last-level cache, and the peak-rate kernels of peak_kernels.h, each run by one pinned worker
// per usable core, best of a few rounds (the fastest round is the one least disturbed by other
// processes on a shared machine).
#include "hw/measure.h"

#include <pthread.h>
#include <sched.h>
#include <sys/mman.h>

#include <algorithm>
#include <barrier>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <functional>
#include <memory>
#include <thread>

#include "hw/peak_kernels.h"
#include "support/log.h"

namespace tessel {
namespace {

using Clock = std::chrono::steady_clock;

constexpr double kCalibrationSeconds = 0.02;  // a round at least this long is timed reliably
constexpr double kRoundSeconds = 0.05;        // length of each timed round
constexpr int kTimedRounds = 3;

void pin_current_thread(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  // Unpinned is still correct, only noisier; nothing to report to the user.
  (void)pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

// Runs body(worker, round) for `rounds` rounds on one thread per entry of `cpus`, pinned there.
// All workers start a round together; a round's time runs from that start until the last
// worker finishes it.
std::vector<double> timed_rounds(const std::vector<int>& cpus, int rounds,
                                 const std::function<void(int worker, int round)>& body) {
  const int workers = static_cast<int>(cpus.size());
  std::barrier sync(workers);
  std::vector<double> seconds(rounds, 0.0);
  std::vector<std::thread> threads;
  threads.reserve(workers);
  for (int w = 0; w < workers; ++w) {
    threads.emplace_back([&, w] {
      pin_current_thread(cpus[w]);
      for (int r = 0; r < rounds; ++r) {
        sync.arrive_and_wait();
        Clock::time_point start = Clock::now();
        body(w, r);
        sync.arrive_and_wait();
        if (w == 0) seconds[r] = std::chrono::duration<double>(Clock::now() - start).count();
      }
    });
  }
  for (std::thread& t : threads)
    t.join();
  return seconds;
}

// Flops per second of `kernel` on all `cpus`: the iteration count is grown until a round lasts
// long enough to time, then the best of kTimedRounds rounds of about kRoundSeconds counts.
double kernel_rate(const std::vector<int>& cpus, const hw_detail::PeakKernel& kernel) {
  // x -> x*a + b converges to b/(1-a) = 1: no overflow, no subnormals, however long it runs.
  const float a = 0.999999f, b = 0.000001f;
  std::vector<float> sink(cpus.size());
  std::vector<double> flops(cpus.size());
  auto run = [&](std::int64_t iterations) {
    return timed_rounds(
        cpus, 1, [&](int w, int) { flops[w] = kernel.run(iterations, 1.0f, a, b, &sink[w]); })[0];
  };
  std::int64_t iterations = 1 << 12;
  double seconds = run(iterations);
  while (seconds < kCalibrationSeconds) {
    double grow = seconds > 0 ? std::clamp(kCalibrationSeconds * 1.5 / seconds, 2.0, 64.0) : 64.0;
    iterations = static_cast<std::int64_t>(static_cast<double>(iterations) * grow);
    seconds = run(iterations);
  }
  iterations = std::max<std::int64_t>(
      1, static_cast<std::int64_t>(static_cast<double>(iterations) * kRoundSeconds / seconds));
  double best = 0;
  for (int r = 0; r < kTimedRounds; ++r) {
    double s = run(iterations);
    double total = 0;
    for (double f : flops)
      total += f;
    best = std::max(best, total / s);
  }
  log_debug("hw: {} on {} workers: {:.1f} GFLOP/s", kernel.name, cpus.size(), best * 1e-9);
  return best;
}

struct AlignedFree {
  void operator()(double* p) const { std::free(p); }
};
using Array = std::unique_ptr<double[], AlignedFree>;

// Uninitialised, 2 MiB aligned so the kernel can back it with huge pages (fewer TLB misses,
// faster first touch); the workers touch their own slices first so pages land on their node.
Array allocate_array(std::int64_t count) {
  constexpr std::size_t kAlign = 2u << 20;
  std::size_t bytes =
      (static_cast<std::size_t>(count) * sizeof(double) + kAlign - 1) / kAlign * kAlign;
  void* p = std::aligned_alloc(kAlign, bytes);
  TESSEL_CHECK(p != nullptr, "allocating {} bytes for the triad", bytes);
  (void)madvise(p, bytes, MADV_HUGEPAGE);  // a hint; fine to be refused
  return Array(static_cast<double*>(p));
}

std::string utc_now_iso8601() {
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::vector<int> benchmark_cpus(const CpuInfo& cpu) {
  if (!cpu.topology.one_cpu_per_usable_core.empty()) return cpu.topology.one_cpu_per_usable_core;
  return {sched_getcpu()};
}

}  // namespace

double measure_triad_bandwidth_gbs(const std::vector<int>& cpus, std::int64_t bytes_per_array) {
  const std::int64_t n = bytes_per_array / static_cast<std::int64_t>(sizeof(double));
  const int workers = static_cast<int>(cpus.size());
  Array a = allocate_array(n), b = allocate_array(n), c = allocate_array(n);
  const double scalar = 3.0;
  // Round 0 touches the pages (and is not counted); rounds 1.. are timed triads.
  const int rounds = 1 + 8;
  std::vector<double> seconds = timed_rounds(cpus, rounds, [&](int w, int round) {
    std::int64_t begin = n * w / workers, end = n * (w + 1) / workers;
    if (round == 0) {
      std::fill(a.get() + begin, a.get() + end, 0.0);
      std::fill(b.get() + begin, b.get() + end, 1.0);
      std::fill(c.get() + begin, c.get() + end, 2.0);
      return;
    }
    double* __restrict pa = a.get();
    const double* __restrict pb = b.get();
    const double* __restrict pc = c.get();
    for (std::int64_t i = begin; i < end; ++i)
      pa[i] = pb[i] + scalar * pc[i];
  });
  TESSEL_CHECK(a[n / 2] == 7.0, "triad result {} at {}", a[n / 2], n / 2);
  double best = *std::min_element(seconds.begin() + 1, seconds.end());
  double gbs = 3.0 * static_cast<double>(n) * sizeof(double) / best * 1e-9;
  log_debug("hw: triad over 3 x {} MiB on {} workers: {:.1f} GB/s", bytes_per_array >> 20, workers,
            gbs);
  return gbs;
}

double measure_peak_f32_gflops(const std::vector<int>& cpus, const CpuFeatureSet& features,
                               std::string* kernel) {
  const hw_detail::PeakKernel* k = &hw_detail::kFmaF32Scalar;
#if defined(__x86_64__)
  if (features.has(CpuFeature::kAvx512f)) {
    k = &hw_detail::kFmaF32Avx512;
  } else if (features.has(CpuFeature::kAvx2) && features.has(CpuFeature::kFma)) {
    k = &hw_detail::kFmaF32Avx2;
  }
#elif defined(__aarch64__)
  if (features.has(CpuFeature::kAsimd)) k = &hw_detail::kFmaF32Neon;
#endif
  if (kernel) *kernel = k->name;
  return kernel_rate(cpus, *k) * 1e-9;
}

std::optional<double> measure_peak_bf16_gflops(const std::vector<int>& cpus,
                                               const CpuFeatureSet& features, std::string* kernel) {
#if defined(__x86_64__)
  if (features.has(CpuFeature::kAvx512Bf16)) {
    if (kernel) *kernel = hw_detail::kDotBf16Avx512.name;
    return kernel_rate(cpus, hw_detail::kDotBf16Avx512) * 1e-9;
  }
#endif
  (void)cpus;
  (void)features;
  if (kernel) kernel->clear();
  return std::nullopt;
}

std::int64_t triad_bytes_per_array(const CpuInfo& cpu) {
  const CacheSizes& c = cpu.caches;
  std::int64_t last_level = c.l3_bytes > 0 ? c.l3_bytes : c.l2_bytes;
  int shared_by = c.l3_bytes > 0 ? c.l3_shared_by : c.l2_shared_by;
  int threads = std::max(1, cpu.topology.threads);
  std::int64_t instances = shared_by > 0 ? (threads + shared_by - 1) / shared_by : 1;
  std::int64_t bytes = std::max<std::int64_t>(64ll << 20, 4 * last_level * instances);
  if (cpu.memory_bytes > 0) bytes = std::min(bytes, cpu.memory_bytes / 16);
  return bytes;
}

MeasuredFigures measure_figures(const CpuInfo& cpu) {
  std::vector<int> cpus = benchmark_cpus(cpu);
  MeasuredFigures m;
  m.threads = static_cast<int>(cpus.size());
  m.triad_bytes_per_array = triad_bytes_per_array(cpu);
  m.bandwidth_gbs = measure_triad_bandwidth_gbs(cpus, m.triad_bytes_per_array);
  m.peak_f32_gflops = measure_peak_f32_gflops(cpus, cpu.features, &m.f32_kernel);
  m.peak_bf16_gflops = measure_peak_bf16_gflops(cpus, cpu.features, &m.bf16_kernel);
  m.measured_at = utc_now_iso8601();
  return m;
}

}  // namespace tessel
