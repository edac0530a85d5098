// The sparse planner's cost model (see planner.h). Every estimate is a sum of named terms, so
// explain() can say why a candidate won. The efficiencies (fractions of the FP32 peak that each
// kernel's inner loop reaches) were measured on a Zen 4 (Genoa) as perf sample counts of the
// kernels run in one process (CPU time, which a shared machine disturbs less than wall time):
// at 4096 x 4096 x 256 and 5% density, spmm_csr took 0.68x and spmm_coo 0.44x the CPU time of the
// dense gemm doing 20x the multiply-adds at ~70% of peak, so 0.05 and 0.08; bsr on 16 x 16
// blocks ~0.25. They are ratios, so they carry to other CPUs with the device's own figures.
// spmm_csr_tiled (csr since) took 0.17x and 0.18x the dense gemm's process CPU time in two runs
// of that case (16.6 / 95.3 ms and 17.5 / 95 ms on 2 threads, load average ~20), so 0.19.
#include "sparse/planner.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <mutex>

#include "hw/cpu_info.h"
#include "hw/measure.h"
#include "sparse/sparse_ops.h"
#include "support/thread_pool.h"

namespace tessel::sparse {

const char* choice_name(Choice c) {
  switch (c) {
    case Choice::kCoo:
      return "coo";
    case Choice::kCsr:
      return "csr";
    case Choice::kBsr:
      return "bsr";
    case Choice::kDense:
      return "dense";
  }
  return "?";
}

Expected<Choice> parse_choice(const std::string& name) {
  for (Choice c : {Choice::kCoo, Choice::kCsr, Choice::kBsr, Choice::kDense})
    if (name == choice_name(c)) return c;
  return invalid_argument("unknown sparse choice '{}': expected coo, csr, bsr or dense", name);
}

const char* op_name(SparseOp op) {
  switch (op) {
    case SparseOp::kSpmm:
      return "spmm";
    case SparseOp::kSpmv:
      return "spmv";
    case SparseOp::kAddDense:
      return "add";
  }
  return "?";
}

StructureStats StructureStats::measure(const HostPattern& p, int64_t block) {
  StructureStats s;
  s.rows = p.rows;
  s.cols = p.cols;
  s.nnz = p.nnz();
  s.block = block;
  double cells = static_cast<double>(p.rows) * static_cast<double>(p.cols);
  s.density = cells == 0 ? 0 : static_cast<double>(s.nnz) / cells;
  s.mean_row = p.rows == 0 ? 0 : static_cast<double>(s.nnz) / static_cast<double>(p.rows);
  double sq = 0;
  int64_t empty = 0;
  for (int64_t r = 0; r < p.rows; ++r) {
    int64_t len = p.indptr[r + 1] - p.indptr[r];
    s.max_row = std::max(s.max_row, len);
    empty += len == 0;
    double d = static_cast<double>(len) - s.mean_row;
    sq += d * d;
  }
  s.row_cv = s.mean_row == 0 ? 0 : std::sqrt(sq / static_cast<double>(p.rows)) / s.mean_row;
  s.empty_rows = p.rows == 0 ? 0 : static_cast<double>(empty) / static_cast<double>(p.rows);
  // Distinct blocks per block row: a marker per block column, reset after each block row.
  std::vector<int64_t> seen(static_cast<size_t>((p.cols + block - 1) / block + 1), -1);
  for (int64_t r = 0; r < p.rows; ++r)
    for (int64_t k = p.indptr[r]; k < p.indptr[r + 1]; ++k) {
      int64_t b = p.col_indices[k] / block;
      if (seen[b] != r / block) {
        seen[b] = r / block;
        ++s.blocks;
      }
    }
  s.block_fill = s.blocks == 0
                     ? 0
                     : static_cast<double>(s.nnz) / (static_cast<double>(s.blocks) * block * block);
  return s;
}

std::string StructureStats::describe() const {
  return fmt::format(
      "{} x {}, {} nnz (density {:.3g}%), row length mean {:.1f} cv {:.2f} max {}, empty rows "
      "{:.1f}%, {}x{} blocks {} (fill {:.1f}%)",
      rows, cols, nnz, 100 * density, mean_row, row_cv, max_row, 100 * empty_rows, block, block,
      blocks, 100 * block_fill);
}

DeviceFigures DeviceFigures::of(Device* device) {
  static std::mutex mutex;
  static std::optional<DeviceFigures> cpu;
  DeviceFigures f;
  std::lock_guard<std::mutex> lock(mutex);
  if (!cpu) {
    const CpuInfo& info = host_cpu_info();
    DeviceFigures c;
    c.device = "cpu";
    c.threads = ThreadPool::global().num_threads();
    c.vector_lanes = info.features.has(CpuFeature::kAvx512f) ? 16
                     : info.features.has(CpuFeature::kAvx2)  ? 8
                                                             : 4;
    if (info.caches.l2_bytes > 0) c.l2_bytes = info.caches.l2_bytes;
    if (info.caches.l3_bytes > 0) c.l3_bytes = info.caches.l3_bytes;
    // 2 FMA pipes at ~3 GHz per core unless `tessel info --measure` cached better figures (the
    // planner never measures: that takes seconds).
    c.peak_gflops = c.threads * 3.0 * 2 * 2 * c.vector_lanes;
    c.source = "defaults from cpu_info";
    if (Expected<std::filesystem::path> dir = hardware_cache_dir(); dir.ok()) {
      if (auto cached = load_measured_figures(*dir, info); cached.ok() && cached->has_value()) {
        c.bandwidth_gbs = (*cached)->bandwidth_gbs;
        c.peak_gflops = (*cached)->peak_f32_gflops;
        c.source = "measured (" + measured_cache_path(*dir, info).string() + ")";
      }
    }
    cpu = c;
  }
  f = *cpu;
  // An OpenCL device here is PoCL on the same CPU; other accelerators get the same model until
  // their figures are measured (hw/ has none for them yet), with their own name.
  f.device = device ? device->id() : "cpu";
  return f;
}

std::string DeviceFigures::describe() const {
  return fmt::format(
      "{}: {} threads, {} f32 lanes, {:.0f} GB/s, {:.0f} GFLOP/s, L2 {} KiB, L3 {} "
      "MiB ({})",
      device, threads, vector_lanes, bandwidth_gbs, peak_gflops, l2_bytes >> 10, l3_bytes >> 20,
      source);
}

int tie_rank(SparseOp op, Choice c) {
  switch (c) {
    case Choice::kDense:
      return op == SparseOp::kAddDense ? 0 : 4;
    case Choice::kCsr:
      return 1;
    case Choice::kCoo:
      return 2;
    case Choice::kBsr:
      return 3;
  }
  return 5;
}

double close_call_majority(int rounds) {
  // z such that 1/2 + z / (2 sqrt(20)) = kCloseCallMajority.
  const double z = (kCloseCallMajority - 0.5) * 2 * std::sqrt(20.0);
  return std::min(kCloseCallMajority, 0.5 + z / (2 * std::sqrt(std::max(1, rounds))));
}

CloseCall decide_close_call(SparseOp op, Choice first, Choice second, double speedup,
                            double second_faster_share, double tie, double majority) {
  if (speedup > tie && second_faster_share >= majority) return {second, false};
  if (speedup * tie < 1 && 1 - second_faster_share >= majority) return {first, false};
  return {tie_rank(op, second) < tie_rank(op, first) ? second : first, true};
}

Expected<std::optional<Choice>> forced_choice(const PlanOptions& options) {
  if (options.force) return options.force;
  const char* env = std::getenv("TESSEL_SPARSE_FORMAT");
  if (env == nullptr || *env == 0 || std::string(env) == "auto") return std::optional<Choice>();
  TESSEL_ASSIGN_OR_RETURN(Choice c, parse_choice(env));
  return std::optional<Choice>(c);
}

namespace {

// Fractions of the FP32 peak each inner loop reaches (see the top of the file).
constexpr double kCsrEfficiency = 0.19;    // rows of B gathered from L3, unmasked 256-wide rows
constexpr double kCooEfficiency = 0.08;    // 64 columns per block: B's slice stays in L2
constexpr double kBsrEfficiency = 0.25;    // 16 x 16 blocks through the gemm micro-kernel
constexpr double kDenseEfficiency = 0.70;  // kernels/gemm.tile at these sizes
constexpr double kBlockOverheadUs = 0.05;  // one grid block: clear, two index loads, a store

// SpMV is latency, not arithmetic: a gathered element of x and a chain of adds per nonzero. Its
// terms are costs per element of one thread, measured on the development machine (AMD EPYC,
// AVX-512, 2 threads) with the rendered kernels called in a loop on 4096 x 4096 matrices of 4 to
// 200 nonzeros a row and on the bench's hypersparse one: spmv_csr 0.75-0.9 ns a nonzero plus
// ~1.2 ns a row (its per-row loop set-up; 16384 rows, 98% empty, cost 25 of 74 us); spmv_coo
// 0.85 ns a nonzero while its 20 bytes a nonzero stay in L2, 2.3-3.3 ns past it (a
// read-modify-write of y per nonzero, one after another in one thread).
constexpr double kSpmvCsrNsPerNonzero = 0.85;
constexpr double kSpmvCsrNsPerRow = 1.2;
constexpr double kSpmvCooNsPerNonzeroInL2 = 0.85;
constexpr double kSpmvCooNsPerNonzero = 2.5;
constexpr double kLaunchUs = 3;  // one op's launch on the host: binding, allocation, dispatch
constexpr double kWakeUs = 10;   // waking the pool's workers (and their spinning after)

struct Terms {
  double us = 0;
  std::string why;
  void add(const std::string& name, double t) {
    us += t;
    why += fmt::format("{}{} {:.1f}", why.empty() ? "" : " + ", name, t);
  }
};

// Microseconds to stream `bytes` at `gbs`.
double stream_us(double bytes, double gbs) {
  return bytes / (gbs * 1e3);
}

// Microseconds for `fmas` multiply-adds at `efficiency` of the peak over `threads` of the
// device's threads.
double fma_us(double fmas, double efficiency, int threads, const DeviceFigures& d) {
  double per_thread = d.peak_gflops / d.threads;
  return 2 * fmas / (per_thread * efficiency * std::max(1, threads) * 1e3);
}

// The bandwidth at which rows of the dense operand arrive: from L2 when all of it fits, from L3
// at about four times memory bandwidth, else from memory.
double operand_gbs(double bytes, const DeviceFigures& d) {
  if (bytes <= static_cast<double>(d.l2_bytes)) return d.bandwidth_gbs * 16;
  if (bytes <= static_cast<double>(d.l3_bytes)) return d.bandwidth_gbs * 4;
  return d.bandwidth_gbs;
}

Candidate estimate(Choice c, SparseOp op, const StructureStats& s, const DeviceFigures& d,
                   int64_t n) {
  Terms t;
  const double nnz = static_cast<double>(s.nnz), rows = static_cast<double>(s.rows),
               cols = static_cast<double>(s.cols), nn = static_cast<double>(n);
  const double dense_bytes = cols * nn * 4, out_bytes = rows * nn * 4;
  if (op == SparseOp::kAddDense) {
    // The dense candidate's densified matrix is made once per plan (as PreparedSpmm does); the
    // sparse one copies D, then scatters: a cache line per nonzero once D is past L3.
    if (c == Choice::kDense) {
      t.add("add", stream_us(rows * cols * 12, d.bandwidth_gbs));
    } else {
      const bool cached = rows * cols * 4 <= static_cast<double>(d.l3_bytes);
      t.add("copy", stream_us(rows * cols * 8, d.bandwidth_gbs));
      t.add("scatter", stream_us(nnz * 20 + nnz * (cached ? 8 : 128), d.bandwidth_gbs));
    }
    return {c, t.us, std::nullopt, false, t.why, d.threads};
  }
  if (op == SparseOp::kSpmv && c != Choice::kDense) {
    // csr: blocks of at least kSpmvBlockNonzeros (sparse_ops.h), so a small product runs on the
    // calling thread; coo: one block walks every nonzero, after a launch that zeroes y.
    const int64_t blocks = spmv_cpu_blocks(s.rows, s.nnz);
    const int par = c == Choice::kCsr ? static_cast<int>(std::min<int64_t>(d.threads, blocks)) : 1;
    if (c == Choice::kCsr) {
      t.add("nonzeros", nnz * kSpmvCsrNsPerNonzero * 1e-3 / par);
      t.add("rows", rows * kSpmvCsrNsPerRow * 1e-3 / par);
      t.add("launch", kLaunchUs + (par > 1 ? kWakeUs : 0));
    } else {
      const bool in_l2 = nnz * 20 <= static_cast<double>(d.l2_bytes);
      t.add("nonzeros", nnz * (in_l2 ? kSpmvCooNsPerNonzeroInL2 : kSpmvCooNsPerNonzero) * 1e-3);
      t.add("zero output", stream_us(out_bytes, d.bandwidth_gbs));
      t.add("launches", 2 * kLaunchUs);
    }
    return {c, t.us, std::nullopt, false, t.why, par};
  }
  const int64_t col_tiles = std::max<int64_t>(1, (n + 255) / 256);
  int threads = d.threads;
  switch (c) {
    case Choice::kDense: {
      t.add("densify", stream_us(rows * cols * 4 + nnz * 20, d.bandwidth_gbs));
      t.add("gemm", fma_us(rows * cols * nn, op == SparseOp::kSpmv ? 0.08 : kDenseEfficiency,
                           d.threads, d));
      t.add("memory", stream_us(rows * cols * 4 + dense_bytes + out_bytes, d.bandwidth_gbs));
      break;
    }
    case Choice::kCsr: {
      // Rows are blocks claimed dynamically: the longest row bounds one thread's share.
      double share = std::max(nnz / d.threads, static_cast<double>(s.max_row));
      double eff = kCsrEfficiency * std::min(1.0, nn / d.vector_lanes);
      t.add("multiply-add", fma_us(share * nn, eff, 1, d));
      t.add("rows of B", stream_us(share * nn * 4, operand_gbs(dense_bytes, d)));
      t.add("indices", stream_us(nnz * 16 + rows * 8, d.bandwidth_gbs));
      t.add("blocks", rows * static_cast<double>(col_tiles) * kBlockOverheadUs / d.threads);
      t.add("output", stream_us(out_bytes, d.bandwidth_gbs));
      break;
    }
    case Choice::kCoo: {
      // One block per 64 columns walks every nonzero.
      int par = static_cast<int>(std::min<int64_t>(d.threads, (n + 63) / 64));
      threads = par;
      double eff = kCooEfficiency * std::min(1.0, nn / d.vector_lanes);
      t.add("multiply-add", fma_us(nnz * nn, eff, par, d));
      t.add("rows of B", stream_us(nnz * nn * 4 / par, operand_gbs(dense_bytes, d)));
      t.add("indices",
            stream_us(nnz * 24 * static_cast<double>((n + 63) / 64) / par, d.bandwidth_gbs));
      t.add("zero output", stream_us(out_bytes, d.bandwidth_gbs));
      break;
    }
    case Choice::kBsr: {
      double blocks = static_cast<double>(s.blocks), b = static_cast<double>(s.block);
      double block_rows = std::ceil(rows / b);
      t.add("block gemms", fma_us(blocks * b * b * nn, kBsrEfficiency, d.threads, d));
      t.add("packing", stream_us(blocks * b * nn * 4 / d.threads, operand_gbs(dense_bytes, d)));
      t.add("blocks",
            block_rows * static_cast<double>(col_tiles) * kBlockOverheadUs * 4 / d.threads);
      t.add("output", stream_us(out_bytes, d.bandwidth_gbs));
      break;
    }
  }
  return {c, t.us, std::nullopt, false, t.why, threads};
}

}  // namespace

Plan plan_operation(SparseOp op, const StructureStats& stats, const DeviceFigures& device,
                    int64_t n, bool needs_grad, const PlanOptions& options) {
  Plan p;
  p.op = op;
  p.stats = stats;
  p.device = device;
  p.n = n;
  std::vector<Choice> allowed{Choice::kCsr, Choice::kCoo, Choice::kDense};
  if (op == SparseOp::kSpmm && !needs_grad) allowed.push_back(Choice::kBsr);
  for (Choice c : allowed)
    p.candidates.push_back(estimate(c, op, stats, device, n));
  std::sort(p.candidates.begin(), p.candidates.end(),
            [](const Candidate& a, const Candidate& b) { return a.estimate_us < b.estimate_us; });
  Expected<std::optional<Choice>> forced = forced_choice(options);
  if (forced.ok() && forced->has_value() &&
      std::find(allowed.begin(), allowed.end(), **forced) != allowed.end()) {
    p.choice = **forced;
    p.reason = options.force ? "forced by the caller" : "forced by TESSEL_SPARSE_FORMAT";
    return p;
  }
  p.choice = p.candidates.front().choice;
  p.reason = "cheapest estimate";
  if (!forced.ok())
    p.reason += " (TESSEL_SPARSE_FORMAT ignored: " + forced.status().message() + ")";
  return p;
}

std::string Plan::explain() const {
  std::string out =
      fmt::format("sparse {} plan: {} ({}), N = {}\n  matrix: {}\n  device: {}\n", op_name(op),
                  choice_name(choice), reason, n, stats.describe(), device.describe());
  for (const Candidate& c : candidates) {
    std::string measured =
        c.measured_us
            ? (c.measured_wall
                   ? fmt::format(", measured {:.1f} us (fastest wall time)", *c.measured_us)
                   : fmt::format(", measured {:.1f} us (CPU time / {} threads)", *c.measured_us,
                                 c.threads))
            : "";
    out += fmt::format("  {} {:<5} estimate {:9.1f} us{} = {}\n", c.choice == choice ? "*" : " ",
                       choice_name(c.choice), c.estimate_us, measured, c.why);
  }
  return out;
}

}  // namespace tessel::sparse
