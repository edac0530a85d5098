// tessel_hw_bench: checks tessel's measured figures (hw/measure.h) against independent
// micro-benchmarks run in the same process, interleaved, so drift on a shared machine hits both:
//
//   asm      this file's own loops, written as raw inline assembly with a different number of
//            accumulators and a different harness (no intrinsics, no shared code with hw/)
//   likwid   likwid-bench from the Debian package `likwid` (peakflops_sp_*_fma, stream_*), run
//            when it is on PATH
//
// Prints one table (or --json) with each figure, each peer's figure and the ratio. The bar from
// the project's first issue: tessel's peak within 20% of an independent micro-benchmark.
//
//   tessel_hw_bench [--rounds N] [--json]
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "hw/cpu_info.h"
#include "hw/measure.h"

namespace tessel {
namespace {

using Clock = std::chrono::steady_clock;

#if defined(__x86_64__)
// 14 chains (not 16 as in hw/peak_avx512.cpp) of vfmadd231ps zmm, enough for a latency of 7
// cycles at 2 per cycle; 14 FMAs x 16 lanes x 2 flops per trip.
double asm_fma_avx512(long trips) {
  __asm__ volatile(
      "vxorps %%xmm0, %%xmm0, %%xmm0\n\t"
      "vmovaps %%zmm0, %%zmm1\n\tvmovaps %%zmm0, %%zmm2\n\tvmovaps %%zmm0, %%zmm3\n\t"
      "vmovaps %%zmm0, %%zmm4\n\tvmovaps %%zmm0, %%zmm5\n\tvmovaps %%zmm0, %%zmm6\n\t"
      "vmovaps %%zmm0, %%zmm7\n\tvmovaps %%zmm0, %%zmm8\n\tvmovaps %%zmm0, %%zmm9\n\t"
      "vmovaps %%zmm0, %%zmm10\n\tvmovaps %%zmm0, %%zmm11\n\tvmovaps %%zmm0, %%zmm12\n\t"
      "vmovaps %%zmm0, %%zmm13\n\tvmovaps %%zmm0, %%zmm14\n\tvmovaps %%zmm0, %%zmm15\n\t"
      "1:\n\t"
      "vfmadd231ps %%zmm14, %%zmm15, %%zmm0\n\tvfmadd231ps %%zmm14, %%zmm15, %%zmm1\n\t"
      "vfmadd231ps %%zmm14, %%zmm15, %%zmm2\n\tvfmadd231ps %%zmm14, %%zmm15, %%zmm3\n\t"
      "vfmadd231ps %%zmm14, %%zmm15, %%zmm4\n\tvfmadd231ps %%zmm14, %%zmm15, %%zmm5\n\t"
      "vfmadd231ps %%zmm14, %%zmm15, %%zmm6\n\tvfmadd231ps %%zmm14, %%zmm15, %%zmm7\n\t"
      "vfmadd231ps %%zmm14, %%zmm15, %%zmm8\n\tvfmadd231ps %%zmm14, %%zmm15, %%zmm9\n\t"
      "vfmadd231ps %%zmm14, %%zmm15, %%zmm10\n\tvfmadd231ps %%zmm14, %%zmm15, %%zmm11\n\t"
      "vfmadd231ps %%zmm14, %%zmm15, %%zmm12\n\tvfmadd231ps %%zmm14, %%zmm15, %%zmm13\n\t"
      "dec %0\n\tjnz 1b\n\t"
      "vzeroupper\n\t"
      : "+r"(trips)
      :
      : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10",
        "xmm11", "xmm12", "xmm13", "xmm14", "xmm15", "cc");
  return 14.0 * 16 * 2;
}

// 14 chains (not 12) of vfmadd231ps ymm: 14 x 8 lanes x 2 flops per trip.
double asm_fma_avx2(long trips) {
  __asm__ volatile(
      "vxorps %%xmm0, %%xmm0, %%xmm0\n\t"
      "vmovaps %%ymm0, %%ymm1\n\tvmovaps %%ymm0, %%ymm2\n\tvmovaps %%ymm0, %%ymm3\n\t"
      "vmovaps %%ymm0, %%ymm4\n\tvmovaps %%ymm0, %%ymm5\n\tvmovaps %%ymm0, %%ymm6\n\t"
      "vmovaps %%ymm0, %%ymm7\n\tvmovaps %%ymm0, %%ymm8\n\tvmovaps %%ymm0, %%ymm9\n\t"
      "vmovaps %%ymm0, %%ymm10\n\tvmovaps %%ymm0, %%ymm11\n\tvmovaps %%ymm0, %%ymm12\n\t"
      "vmovaps %%ymm0, %%ymm13\n\tvmovaps %%ymm0, %%ymm14\n\tvmovaps %%ymm0, %%ymm15\n\t"
      "1:\n\t"
      "vfmadd231ps %%ymm14, %%ymm15, %%ymm0\n\tvfmadd231ps %%ymm14, %%ymm15, %%ymm1\n\t"
      "vfmadd231ps %%ymm14, %%ymm15, %%ymm2\n\tvfmadd231ps %%ymm14, %%ymm15, %%ymm3\n\t"
      "vfmadd231ps %%ymm14, %%ymm15, %%ymm4\n\tvfmadd231ps %%ymm14, %%ymm15, %%ymm5\n\t"
      "vfmadd231ps %%ymm14, %%ymm15, %%ymm6\n\tvfmadd231ps %%ymm14, %%ymm15, %%ymm7\n\t"
      "vfmadd231ps %%ymm14, %%ymm15, %%ymm8\n\tvfmadd231ps %%ymm14, %%ymm15, %%ymm9\n\t"
      "vfmadd231ps %%ymm14, %%ymm15, %%ymm10\n\tvfmadd231ps %%ymm14, %%ymm15, %%ymm11\n\t"
      "vfmadd231ps %%ymm14, %%ymm15, %%ymm12\n\tvfmadd231ps %%ymm14, %%ymm15, %%ymm13\n\t"
      "dec %0\n\tjnz 1b\n\t"
      "vzeroupper\n\t"
      : "+r"(trips)
      :
      : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10",
        "xmm11", "xmm12", "xmm13", "xmm14", "xmm15", "cc");
  return 14.0 * 8 * 2;
}

// 14 chains of vdpbf16ps zmm: 14 x 16 lanes x 2 pairs x 2 flops per trip.
double asm_dot_bf16(long trips) {
  __asm__ volatile(
      "vxorps %%xmm0, %%xmm0, %%xmm0\n\t"
      "vmovaps %%zmm0, %%zmm1\n\tvmovaps %%zmm0, %%zmm2\n\tvmovaps %%zmm0, %%zmm3\n\t"
      "vmovaps %%zmm0, %%zmm4\n\tvmovaps %%zmm0, %%zmm5\n\tvmovaps %%zmm0, %%zmm6\n\t"
      "vmovaps %%zmm0, %%zmm7\n\tvmovaps %%zmm0, %%zmm8\n\tvmovaps %%zmm0, %%zmm9\n\t"
      "vmovaps %%zmm0, %%zmm10\n\tvmovaps %%zmm0, %%zmm11\n\tvmovaps %%zmm0, %%zmm12\n\t"
      "vmovaps %%zmm0, %%zmm13\n\tvmovaps %%zmm0, %%zmm14\n\tvmovaps %%zmm0, %%zmm15\n\t"
      "1:\n\t"
      "vdpbf16ps %%zmm14, %%zmm15, %%zmm0\n\tvdpbf16ps %%zmm14, %%zmm15, %%zmm1\n\t"
      "vdpbf16ps %%zmm14, %%zmm15, %%zmm2\n\tvdpbf16ps %%zmm14, %%zmm15, %%zmm3\n\t"
      "vdpbf16ps %%zmm14, %%zmm15, %%zmm4\n\tvdpbf16ps %%zmm14, %%zmm15, %%zmm5\n\t"
      "vdpbf16ps %%zmm14, %%zmm15, %%zmm6\n\tvdpbf16ps %%zmm14, %%zmm15, %%zmm7\n\t"
      "vdpbf16ps %%zmm14, %%zmm15, %%zmm8\n\tvdpbf16ps %%zmm14, %%zmm15, %%zmm9\n\t"
      "vdpbf16ps %%zmm14, %%zmm15, %%zmm10\n\tvdpbf16ps %%zmm14, %%zmm15, %%zmm11\n\t"
      "vdpbf16ps %%zmm14, %%zmm15, %%zmm12\n\tvdpbf16ps %%zmm14, %%zmm15, %%zmm13\n\t"
      "dec %0\n\tjnz 1b\n\t"
      "vzeroupper\n\t"
      : "+r"(trips)
      :
      : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10",
        "xmm11", "xmm12", "xmm13", "xmm14", "xmm15", "cc");
  return 14.0 * 16 * 4;
}
#endif

using AsmLoop = double (*)(long trips);

// GFLOP/s of `loop` on every cpu: each thread runs slices of kSlice trips until 50 ms have
// passed since a common start; the total flops over the longest thread's time.
double asm_rate(AsmLoop loop, const std::vector<int>& cpus) {
  constexpr long kSlice = 1 << 16;
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  std::vector<double> flops(cpus.size(), 0.0);
  std::vector<double> seconds(cpus.size(), 0.0);
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < cpus.size(); ++i) {
    threads.emplace_back([&, i] {
      cpu_set_t set;
      CPU_ZERO(&set);
      CPU_SET(cpus[i], &set);
      sched_setaffinity(0, sizeof set, &set);
      loop(kSlice);  // warm up (AVX-512 frequency licence, page-in)
      ready++;
      while (!go.load()) {
      }
      Clock::time_point start = Clock::now();
      double done = 0;
      while (Clock::now() - start < std::chrono::milliseconds(50))
        done += loop(kSlice) * kSlice;
      seconds[i] = std::chrono::duration<double>(Clock::now() - start).count();
      flops[i] = done;
    });
  }
  while (ready.load() < static_cast<int>(cpus.size())) {
  }
  go = true;
  for (auto& t : threads)
    t.join();
  double total = 0;
  for (double f : flops)
    total += f;
  return total / *std::max_element(seconds.begin(), seconds.end()) * 1e-9;
}

// One likwid-bench test. The first run() grows likwid's iteration count (-i) from a small one
// until a run lasts 50 ms (likwid's own -s calibration takes seconds), then every run lasts
// about 0.1 s. All three sides time windows of similar length (tessel's rounds are 50 ms), so on
// a busy machine none is favoured by the best-of.
class Likwid {
 public:
  Likwid(std::string test, std::string workgroup, int threads, const char* field)
      : test_(std::move(test)),
        workgroup_(std::move(workgroup)),
        field_(field),
        iterations_(16l * threads) {}

  // The figure in G units (likwid prints M units), nothing when likwid failed.
  std::optional<double> run() {
    for (int tries = 0; !calibrated_ && tries < 12; ++tries) {
      Result r = once();
      if (!r.value) return std::nullopt;
      if (r.seconds >= 0.05) {
        iterations_ =
            std::max(1l, static_cast<long>(static_cast<double>(iterations_) * 0.1 / r.seconds));
        calibrated_ = true;
      } else {
        double grow = r.seconds > 0 ? std::clamp(0.1 / r.seconds, 2.0, 64.0) : 64.0;
        iterations_ = static_cast<long>(static_cast<double>(iterations_) * grow);
      }
    }
    return once().value;
  }

 private:
  struct Result {
    std::optional<double> value;
    double seconds = 0;
  };

  Result once() {
    std::string cmd =
        fmt::format("likwid-bench -i {} -t {} -W {} 2>/dev/null", iterations_, test_, workgroup_);
    FILE* p = popen(cmd.c_str(), "r");
    if (!p) return {};
    char line[512];
    Result r;
    while (std::fgets(line, sizeof line, p)) {
      if (starts_with(line, field_)) r.value = std::atof(line + std::strlen(field_)) * 1e-3;
      if (starts_with(line, "Time:")) r.seconds = std::atof(line + 5);
    }
    if (pclose(p) != 0) return {};
    return r;
  }

  static bool starts_with(const char* line, const char* prefix) {
    return std::strncmp(line, prefix, std::strlen(prefix)) == 0;
  }

  std::string test_, workgroup_;
  const char* field_;
  long iterations_;
  bool calibrated_ = false;
};

bool have_likwid() {
  return std::system("command -v likwid-bench > /dev/null 2>&1") == 0;
}

struct Row {
  Row(std::string figure, std::string unit) : figure(std::move(figure)), unit(std::move(unit)) {}
  std::string figure, unit, tessel_kernel;
  double tessel = 0;
  std::optional<double> asm_peer, likwid_peer;
  std::string likwid_test;
};

void keep_best(std::optional<double>& best, std::optional<double> v) {
  if (v && (!best || *v > *best)) best = v;
}

int run(int argc, char** argv) {
  bool json = false;
  int rounds = 3;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--json")) {
      json = true;
    } else if (!std::strcmp(argv[i], "--rounds") && i + 1 < argc) {
      rounds = std::max(1, std::atoi(argv[++i]));
    } else {
      std::fprintf(stderr, "usage: tessel_hw_bench [--rounds N] [--json]\n");
      return 2;
    }
  }
  const CpuInfo& cpu = host_cpu_info();
  const CpuFeatureSet& f = cpu.features;
  std::vector<int> cpus = cpu.topology.one_cpu_per_usable_core;
  int workers = static_cast<int>(cpus.size());
  bool likwid_ok = have_likwid();
  bool avx512 = f.has(CpuFeature::kAvx512f);
  bool avx2 = f.has(CpuFeature::kAvx2) && f.has(CpuFeature::kFma);
  bool bf16 = f.has(CpuFeature::kAvx512Bf16);
  std::int64_t triad_bytes = triad_bytes_per_array(cpu);

  Row bw("memory bandwidth (triad)", "GB/s");
  Row f32("peak f32 fma", "GFLOP/s");
  Row b16("peak bf16 dot", "GFLOP/s");
  bw.tessel_kernel = "triad";
  bw.likwid_test = avx512 ? "stream_avx512" : avx2 ? "stream_avx_fma" : "stream";
  f32.likwid_test = avx512 ? "peakflops_sp_avx512_fma" : avx2 ? "peakflops_sp_avx_fma" : "";
  // likwid's working set is all arrays of all threads together; 16 kB a thread sits in L1.
  Likwid likwid_triad(bw.likwid_test, fmt::format("N:{}MB:{}", 3 * triad_bytes / 1000000, workers),
                      workers, "MByte/s:");
  Likwid likwid_peak(f32.likwid_test, fmt::format("N:{}kB:{}", 16 * workers, workers), workers,
                     "MFlops/s:");

  // Interleaved rounds, best of each: the least disturbed measurement of each side.
  for (int r = 0; r < rounds; ++r) {
    bw.tessel = std::max(bw.tessel, measure_triad_bandwidth_gbs(cpus, triad_bytes));
    if (likwid_ok) keep_best(bw.likwid_peer, likwid_triad.run());

    f32.tessel = std::max(f32.tessel, measure_peak_f32_gflops(cpus, f, &f32.tessel_kernel));
#if defined(__x86_64__)
    if (avx512) {
      keep_best(f32.asm_peer, asm_rate(asm_fma_avx512, cpus));
    } else if (avx2) {
      keep_best(f32.asm_peer, asm_rate(asm_fma_avx2, cpus));
    }
    if (likwid_ok && !f32.likwid_test.empty()) keep_best(f32.likwid_peer, likwid_peak.run());
    if (bf16) {
      b16.tessel = std::max(b16.tessel, *measure_peak_bf16_gflops(cpus, f, &b16.tessel_kernel));
      keep_best(b16.asm_peer, asm_rate(asm_dot_bf16, cpus));
    }
#endif
  }

  std::vector<Row> rows = {bw, f32};
  if (bf16) rows.push_back(b16);
  auto ratio = [](double a, std::optional<double> b) -> std::optional<double> {
    if (!b || *b <= 0) return std::nullopt;
    return a / *b;
  };
  if (json) {
    nlohmann::json out = {{"cpu", cpu.model},
                          {"workers", workers},
                          {"rounds", rounds},
                          {"likwid", likwid_ok},
                          {"rows", nlohmann::json::array()}};
    for (const Row& row : rows) {
      nlohmann::json j = {{"figure", row.figure},
                          {"unit", row.unit},
                          {"tessel", row.tessel},
                          {"tessel_kernel", row.tessel_kernel}};
      if (row.asm_peer) j["asm"] = *row.asm_peer;
      if (row.likwid_peer) {
        j["likwid"] = *row.likwid_peer;
        j["likwid_test"] = row.likwid_test;
      }
      if (auto q = ratio(row.tessel, row.asm_peer)) j["ratio_asm"] = *q;
      if (auto q = ratio(row.tessel, row.likwid_peer)) j["ratio_likwid"] = *q;
      out["rows"].push_back(j);
    }
    std::printf("%s\n", out.dump(2).c_str());
    return 0;
  }
  std::printf("%s, %d workers, best of %d interleaved rounds%s\n", cpu.model.c_str(), workers,
              rounds, likwid_ok ? "" : " (likwid-bench not found: install likwid for that peer)");
  std::printf("%-26s %-8s %10s %10s %10s %8s %8s\n", "figure", "unit", "tessel", "asm", "likwid",
              "/asm", "/likwid");
  auto cell = [](std::optional<double> v, const char* fmt_str) {
    return v ? fmt::format(fmt::runtime(fmt_str), *v) : std::string("-");
  };
  for (const Row& row : rows) {
    std::printf("%-26s %-8s %10.1f %10s %10s %8s %8s\n", row.figure.c_str(), row.unit.c_str(),
                row.tessel, cell(row.asm_peer, "{:.1f}").c_str(),
                cell(row.likwid_peer, "{:.1f}").c_str(),
                cell(ratio(row.tessel, row.asm_peer), "{:.2f}").c_str(),
                cell(ratio(row.tessel, row.likwid_peer), "{:.2f}").c_str());
  }
  std::printf("kernels: f32 %s%s%s; likwid tests: %s, %s\n", f32.tessel_kernel.c_str(),
              bf16 ? ", bf16 " : "", b16.tessel_kernel.c_str(), bw.likwid_test.c_str(),
              f32.likwid_test.empty() ? "-" : f32.likwid_test.c_str());
  return 0;
}

}  // namespace
}  // namespace tessel

int main(int argc, char** argv) {
  return tessel::run(argc, argv);
}
