// Measured figures of the host CPU: memory bandwidth (STREAM triad), peak FP32 FMA rate and peak
// BF16 dot-product rate, each from a short micro-benchmark (a fraction of a second) run with one
// pinned worker per usable physical core. They give the roofline that kernels and the auto-tuner
// are judged against. measured_figures() keeps them on disk per CPU model, so `tessel info` only
// pays for the measurement once (or with --measure).
//
//   TESSEL_ASSIGN_OR_RETURN(MeasuredLookup m, measured_figures(host_cpu_info()));
//   double ridge = m.figures.peak_f32_gflops / m.figures.bandwidth_gbs;  // flops per byte
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "hw/cpu_info.h"
#include "support/status.h"

namespace tessel {

struct MeasuredFigures {
  double bandwidth_gbs = 0;                // triad a = b + s*c, 10^9 bytes/s, 24 bytes/element
  double peak_f32_gflops = 0;              // FP32 fused multiply-add, 2 flops each
  std::optional<double> peak_bf16_gflops;  // vdpbf16ps; absent where the CPU has no BF16 dot
  std::string f32_kernel;   // which kernel measured it: "avx512_fma", "avx2_fma", ...
  std::string bf16_kernel;  // "avx512_bf16_dot" or ""
  int threads = 0;          // workers used, one per usable core
  std::int64_t triad_bytes_per_array = 0;
  std::string measured_at;  // UTC, ISO 8601
};

// One worker per entry of `cpus`, each pinned there.
double measure_triad_bandwidth_gbs(const std::vector<int>& cpus, std::int64_t bytes_per_array);
// Returns the rate and names the kernel used in *kernel.
double measure_peak_f32_gflops(const std::vector<int>& cpus, const CpuFeatureSet& features,
                               std::string* kernel);
// Nothing where no BF16 dot-product kernel can run on this CPU.
std::optional<double> measure_peak_bf16_gflops(const std::vector<int>& cpus,
                                               const CpuFeatureSet& features, std::string* kernel);

// Triad arrays much larger than the last-level cache: 4x all L3 instances together, at least
// 64 MiB, at most 1/16 of memory.
std::int64_t triad_bytes_per_array(const CpuInfo& cpu);

// All three figures for `cpu`, measured now.
MeasuredFigures measure_figures(const CpuInfo& cpu);

// Where measured figures are kept: $XDG_CACHE_HOME/tessel, else $HOME/.cache/tessel.
Expected<std::filesystem::path> hardware_cache_dir();

// The cache file for this CPU model (and number of workers) inside `dir`.
std::filesystem::path measured_cache_path(const std::filesystem::path& dir, const CpuInfo& cpu);

// Reads the cached figures for `cpu` from `dir`. Nothing when there is no file, or the file is
// for another CPU or another format version; an error only for a file that cannot be read.
Expected<std::optional<MeasuredFigures>> load_measured_figures(const std::filesystem::path& dir,
                                                               const CpuInfo& cpu);
// Writes them atomically (temporary file + rename), so concurrent readers see old or new.
Status store_measured_figures(const std::filesystem::path& dir, const CpuInfo& cpu,
                              const MeasuredFigures& figures);

struct MeasuredLookup {
  MeasuredFigures figures;
  bool from_cache = false;
  std::filesystem::path cache_path;  // empty when there is no cache directory
  Status store_status;               // why the new figures could not be cached, if so
};

// The cached figures, or fresh ones (then cached) when there are none or `remeasure` is set.
// `cache_dir` overrides hardware_cache_dir().
MeasuredLookup measured_figures(const CpuInfo& cpu, bool remeasure = false,
                                std::optional<std::filesystem::path> cache_dir = std::nullopt);

}  // namespace tessel
