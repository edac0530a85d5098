// The run-time choice of format and kernel for a sparse operation: measured structure of the
// matrix (density, row-length spread, empty rows, block fill) and figures of the device (memory
// bandwidth, FP32 peak, cache sizes, vector width, threads) go into a cost model per candidate
// (csr, coo, bsr, dense gemm); the cheapest wins. Where the model's two best are within
// `measure_margin` of each other and the caller allows it, both are timed on the real operands,
// taking turns, in CPU time, and the faster is kept (planning is per matrix, so this is paid
// once).
//
//   Plan p = plan_spmm(a, /*n=*/256, /*needs_grad=*/false);
//   log_debug("{}", p.explain());     // every candidate, its estimate and why the winner won
//
// The user fixes the choice with PlanOptions::force or TESSEL_SPARSE_FORMAT=csr|coo|bsr|dense
// (the option wins over the variable). `tessel bench sparse --explain` prints the plans, and
// TESSEL_LOG=debug logs each plan as it is made.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "sparse/sparse_matrix.h"

namespace tessel::sparse {

// What the planner can run: a sparse format's kernel, or a dense gemm on the densified matrix.
enum class Choice { kCoo, kCsr, kBsr, kDense };
const char* choice_name(Choice c);
Expected<Choice> parse_choice(const std::string& name);

enum class SparseOp { kSpmm, kSpmv, kAddDense };
const char* op_name(SparseOp op);

// The structure of a matrix, measured once per pattern (StructureStats::of caches it).
struct StructureStats {
  int64_t rows = 0, cols = 0, nnz = 0;
  double density = 0;
  double mean_row = 0;  // nonzeros per row
  double row_cv = 0;    // standard deviation / mean of the row lengths
  int64_t max_row = 0;
  double empty_rows = 0;  // fraction of rows without a nonzero
  int64_t block = 16;     // the block edge measured (BR = BC)
  int64_t blocks = 0;     // nonzero blocks of block x block
  double block_fill = 0;  // nnz / (blocks * block^2): 1 = perfectly block-sparse
  static StructureStats measure(const HostPattern& p, int64_t block = 16);
  std::string describe() const;
};

// The device's side of the model.
struct DeviceFigures {
  std::string device;  // "cpu", "opencl:0"
  int threads = 1;
  int vector_lanes = 8;        // f32 lanes of the widest vector unit
  double bandwidth_gbs = 20;   // main memory (measured triad where cached, else a default)
  double peak_gflops = 100;    // FP32 FMA peak, all threads
  int64_t l2_bytes = 1 << 20;  // per core
  int64_t l3_bytes = 32 << 20;
  std::string source;  // where the figures came from
  static DeviceFigures of(Device* device);
  std::string describe() const;
};

struct PlanOptions {
  std::optional<Choice> force;  // the user's choice; else TESSEL_SPARSE_FORMAT; else the model
  bool allow_measure = true;    // time the two best when the model cannot separate them
  double measure_margin = 1.0;  // "cannot separate": the second within (1 + this) x the first
};

struct Candidate {
  Choice choice;
  double estimate_us = 0;
  // Where timed, its time on an idle machine: the median process CPU time of its runs over
  // `threads` (moves little when other work shares the cores), or for short calls the fastest
  // wall time (`measured_wall`; see plan_for).
  std::optional<double> measured_us;
  bool measured_wall = false;
  std::string why;  // the terms of the estimate
  int threads = 1;  // the threads its kernel spreads over
};

struct Plan {
  SparseOp op = SparseOp::kSpmm;
  Choice choice = Choice::kCsr;
  std::string reason;  // "forced by TESSEL_SPARSE_FORMAT", "cheapest estimate", "measured"
  StructureStats stats;
  DeviceFigures device;
  int64_t n = 1;  // dense columns
  std::vector<Candidate> candidates;
  std::string explain() const;
};

// The model alone (no timing): every candidate the operation allows (bsr only without
// gradients, since its kernel has no backward; bsr and coo only for spmm / spmv).
Plan plan_operation(SparseOp op, const StructureStats& stats, const DeviceFigures& device,
                    int64_t n, bool needs_grad, const PlanOptions& options = {});

// The user's fixed choice from options or the environment, if any.
Expected<std::optional<Choice>> forced_choice(const PlanOptions& options);

}  // namespace tessel::sparse
