// The run-time choice of format and kernel for a sparse operation: measured structure of the
// matrix (density, row-length spread, empty rows, block fill) and figures of the device (memory
// bandwidth, FP32 peak, cache sizes, vector width, threads) go into a cost model per candidate
// (csr, coo, bsr, dense gemm); the cheapest wins. Where the model's two best are within
// `measure_margin` of each other and the caller allows it, both are timed on the real operands,
// taking turns, and the faster is kept; a pair that times within 2x is timed again, and one
// still within kCloseCallTie (or not faster in most rounds) goes to the more general format
// (decide_close_call). Planning is per
// matrix, so this is paid once.
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
  // Where the two best were timed: the model's first's time over the runner-up's (> 1: the
  // runner-up ran faster), the median of per-round ratios over `timed_rounds` rounds.
  std::optional<double> measured_speedup;
  double second_faster_share = 0;  // of the timed rounds, those in which the runner-up was faster
  int timed_rounds = 0;
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

// Within this factor either way, two timed formats are one to the measurement: on a quiet
// machine the same kernel's medians move by a few percent between runs, and a pair this close
// flipped from run to run (block16-1024-20% spmm: bsr and csr timed 2641 vs 2637 us at plan time,
// then 4312 vs 2326 us in the bench). Not wider: bsr runs block16-4096-5% spmm 5-8% faster than
// csr, which a 5% line gave to csr in one plan of three.
constexpr double kCloseCallTie = 1.03;

// The order in which formats win a tie of `op` (lower first). For products csr leads: it is what
// matrices are kept in (nothing to build), has a backward, and its blocks are short row groups
// claimed one at a time, so a thread delayed by other work holds up little; coo needs expanded
// row indices and walks its nonzeros on one thread per 64 columns; bsr needs a conversion, pads
// partial blocks, and has a few large blocks (64 block rows at 1024 rows); dense holds a
// densified copy. For sparse + dense, dense leads: its add streams in order while the scatter's
// time depends on the pattern and on what is in cache (csr lost 8% to it in a tie at 1%), and the
// output is as large as the densified copy anyway.
int tie_rank(SparseOp op, Choice c);

// A faster side must also be faster in at least this share of the paired rounds: under load
// the median ratio of block16-1024-20% spmm's csr and bsr fell at 0.94-1.02x from plan to plan,
// so a 5% line alone still split its plans 8 to 4.
constexpr double kCloseCallMajority = 0.75;

// The share needed after `rounds` rounds: kCloseCallMajority up to 20 rounds, then the share
// that is as unlikely for two equally fast sides (a sign test: 1/2 + z / (2 sqrt(rounds)), with
// the z that makes it 3 of 4 at 20 rounds), so a lean timed for longer can be decided: 68% of
// 40 rounds, 65% of 60. A real lead of 8-10% under per-round noise of about 10% wins 70-80% of
// the rounds, which at 20 rounds is often short of 3 in 4 and so a tie.
double close_call_majority(int rounds);

struct CloseCall {
  Choice choice;
  bool tie = false;  // decided by tie_rank, not by the timing
};
// How a timed pair is decided (pure: plan_for supplies the timing). `speedup` is the median of
// the per-round ratios of the first's time over the second's (> 1: the second ran faster), and
// `second_faster_share` the share of rounds in which the second ran faster. A side wins on time
// when it is faster by more than `tie` and in at least `majority` of the rounds; otherwise it is
// a tie, which the one of lower tie_rank wins whichever order the model put them in, so that
// repeated plans of one matrix agree however the noise falls.
CloseCall decide_close_call(SparseOp op, Choice first, Choice second, double speedup,
                            double second_faster_share, double tie = kCloseCallTie,
                            double majority = kCloseCallMajority);

// The user's fixed choice from options or the environment, if any.
Expected<std::optional<Choice>> forced_choice(const PlanOptions& options);

}  // namespace tessel::sparse
