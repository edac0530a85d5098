// Sparse operations on the autograd tape, the per-pattern plan cache and PreparedSpmm (see
// functional.h).
#include "sparse/functional.h"

#include <time.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <map>
#include <mutex>

#include "autograd/functional.h"
#include "ops/ops.h"
#include "sparse/sparse_ops.h"
#include "support/log.h"

namespace tessel::sparse {

SparseVariable SparseVariable::of(SparseMatrix m, bool requires_grad) {
  Variable v(m.values(), requires_grad);
  return SparseVariable{std::move(m), std::move(v)};
}

namespace {

// Structure and plans per pattern, for as long as the pattern lives.
struct PatternEntry {
  std::weak_ptr<const HostPattern> pattern;
  StructureStats stats;
  std::map<std::string, Plan> plans;
};

std::mutex& cache_mutex() {
  static std::mutex m;
  return m;
}
std::map<const HostPattern*, PatternEntry>& pattern_cache() {
  static std::map<const HostPattern*, PatternEntry> c;
  return c;
}

// The cache entry of `p` (made, and stale entries of dead patterns dropped, under the lock).
PatternEntry& entry_for(const std::shared_ptr<const HostPattern>& p) {
  auto& cache = pattern_cache();
  auto it = cache.find(p.get());
  if (it != cache.end() && it->second.pattern.lock() == p) return it->second;
  for (auto i = cache.begin(); i != cache.end();)
    i = i->second.pattern.expired() ? cache.erase(i) : std::next(i);
  PatternEntry& e = cache[p.get()];
  e = PatternEntry{p, StructureStats::measure(*p), {}};
  return e;
}

Variable index(const Tensor& t) {
  return Variable(t, false);
}

Expected<ops::OpDef const*> op(std::string_view name) {
  return find_sparse_op(name);
}

Expected<Variable> record(std::string_view name, const std::vector<Variable>& inputs,
                          const ops::Attrs& attrs = {}) {
  TESSEL_ASSIGN_OR_RETURN(const ops::OpDef* def, op(name));
  return autograd::apply(*def, inputs, attrs);
}

Status check_autograd_format(const SparseVariable& a) {
  if (a.matrix.format() == SparseFormat::kBsr)
    return invalid_argument(
        "sparse autograd ops take COO or CSR matrices (BSR is for inference: "
        "PreparedSpmm), got {}",
        a.matrix.describe());
  return ok_status();
}

// The product with a dense operand b ([K, N], or [K] when `vector`) in a fixed format.
Expected<Variable> product_as(const SparseVariable& a, const Variable& b, Choice choice,
                              bool vector) {
  if (choice != Choice::kBsr) TESSEL_TRY(check_autograd_format(a));
  const SparseMatrix& m = a.matrix;
  const int64_t k = vector ? b.shape()[0] : b.shape().size() == 2 ? b.shape()[0] : -1;
  if (k != m.cols())
    return invalid_argument("sparse {}: {} times {}", vector ? "spmv" : "spmm", m.describe(),
                            shape_string(b.shape()));
  switch (choice) {
    case Choice::kCsr: {
      TESSEL_ASSIGN_OR_RETURN(Tensor rows, m.expanded_rows());
      TESSEL_ASSIGN_OR_RETURN(SparseMatrix::Transposed t, m.transposed());
      TESSEL_ASSIGN_OR_RETURN(SparseMatrix csr, m.to(SparseFormat::kCsr));
      return record(vector ? "spmv_csr" : "spmm_csr",
                    {index(csr.indptr()), index(m.col_indices()), a.values, b, index(rows),
                     index(t.indptr), index(t.col_indices), index(t.permutation)});
    }
    case Choice::kCoo: {
      TESSEL_ASSIGN_OR_RETURN(Tensor rows, m.expanded_rows());
      return record(vector ? "spmv_coo" : "spmm_coo",
                    {index(rows), index(m.col_indices()), a.values, b},
                    ops::Attrs().set("rows", m.rows()));
    }
    case Choice::kDense: {
      TESSEL_ASSIGN_OR_RETURN(Variable d, to_dense(a));
      if (!vector) return autograd::matmul(d, b);
      TESSEL_ASSIGN_OR_RETURN(Variable x2, autograd::reshape(b, {k, 1}));
      TESSEL_ASSIGN_OR_RETURN(Variable y, autograd::matmul(d, x2));
      return autograd::reshape(y, {m.rows()});
    }
    case Choice::kBsr: {
      if (a.values.requires_grad() || vector)
        return invalid_argument(
            "sparse {}: the bsr kernel is a forward spmm only; plan without "
            "it for values that need gradients",
            vector ? "spmv" : "spmm");
      SparseMatrix bsr = m;
      if (m.format() != SparseFormat::kBsr) {
        TESSEL_ASSIGN_OR_RETURN(bsr, m.to(SparseFormat::kBsr));
      }
      TESSEL_ASSIGN_OR_RETURN(const ops::OpDef* def, op("spmm_bsr"));
      return autograd::apply(
          *def, {index(bsr.indptr()), index(bsr.col_indices()), index(bsr.values()), b},
          ops::Attrs().set("rows", m.rows()));
    }
  }
  return internal_error("unknown sparse choice");
}

// The process's CPU time (all threads) in microseconds.
double cpu_now_us() {
  timespec t{};
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) * 1e6 + static_cast<double>(t.tv_nsec) * 1e-3;
}

double wall_now_us() {
  return std::chrono::duration<double, std::micro>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// One candidate's timed calls, one sample of each per round: process CPU time and wall time.
struct Timing {
  std::vector<double> cpu_us, wall_us;
};

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Times each of `fns` (adding to `t`, one sample each per round) after one untimed call of each
// (kernel compiles): at least `rounds` rounds in which every one runs once, the order reversed
// every other round so that neither always runs second (on warmer or colder caches). Short calls
// get more rounds (up to 25, about 20 ms of CPU time in all): a median of five sub-millisecond
// calls still moves by a fifth under load.
Status time_in_turns(const std::vector<std::function<Status()>>& fns, int rounds,
                     std::vector<Timing>& t) {
  double warm_us = 0;
  for (const auto& fn : fns) {
    const double start = cpu_now_us();
    TESSEL_TRY(fn());
    warm_us += cpu_now_us() - start;
  }
  if (warm_us > 0)
    rounds = std::clamp(static_cast<int>(20000 / warm_us), rounds, std::max(rounds, 25));
  t.resize(fns.size());
  for (int r = 0; r < rounds; ++r)
    for (size_t j = 0; j < fns.size(); ++j) {
      const size_t i = r % 2 == 0 ? j : fns.size() - 1 - j;
      const double wall = wall_now_us(), start = cpu_now_us();
      TESSEL_TRY(fns[i]());
      t[i].cpu_us.push_back(cpu_now_us() - start);
      t[i].wall_us.push_back(wall_now_us() - wall);
    }
  return ok_status();
}

// A timed pair read out: each one's figure for explain() and the median of the per-round ratios
// first / second. Calls of under 1 ms CPU time are compared by wall time (and shown by their
// fastest, an idle machine's time): their CPU time carries the pool's spinning after a job (tens
// of us) and counts a one-thread kernel's idle partner. Longer calls are compared by CPU time
// over the threads a kernel spreads over: under load a thread that loses its core stalls the
// call's wall time (block16-1024-20% spmm, ~2.6 ms CPU: median wall ratios of five rounds of
// 0.36x and 0.58x between csr and bsr, CPU ratios of 0.99-1.04x in the same runs). A ratio per
// round compares two calls made one after the other, so load that comes and goes cancels.
struct PairTiming {
  std::array<double, 2> us{};
  bool wall = false;
  double speedup = 1;        // first / second
  double second_faster = 0;  // the share of rounds in which the second was faster
  int rounds = 0;
};
PairTiming read_pair(const std::array<Timing, 2>& t, const std::array<int, 2>& threads) {
  PairTiming p;
  p.wall = std::min(median_of(t[0].cpu_us), median_of(t[1].cpu_us)) < 1000;
  auto figure = [&](size_t i, size_t r) {
    return p.wall ? t[i].wall_us[r] : t[i].cpu_us[r] / std::max(1, threads[i]);
  };
  std::vector<double> ratios;
  p.rounds = static_cast<int>(t[0].cpu_us.size());
  int faster = 0;
  for (size_t r = 0; r < t[0].cpu_us.size(); ++r) {
    ratios.push_back(figure(0, r) / std::max(figure(1, r), 1e-3));
    faster += figure(1, r) < figure(0, r);
  }
  p.speedup = median_of(ratios);
  p.second_faster = static_cast<double>(faster) / std::max(1, p.rounds);
  for (size_t i = 0; i < 2; ++i)
    p.us[i] = p.wall ? *std::min_element(t[i].wall_us.begin(), t[i].wall_us.end())
                     : median_of(t[i].cpu_us) / std::max(1, threads[i]);
  return p;
}

// A first timing within this factor either way is timed again (kRetimeRounds more rounds,
// pooled) before the pair is decided: passes of five rounds of block16-1024-20% spmm put bsr
// 1.39x and 1.56x ahead of csr where the bench's medians had them within 8% (load 4-6).
constexpr double kRetimeBand = 2;
constexpr int kRetimeRounds = 15;
// A tie whose median ratio still leans past kCloseCallTie is timed for up to kLeanPasses more
// passes of kLeanRounds (pooled), and decided at close_call_majority of the rounds it then has:
// a lean that holds is a lead the first 20 rounds were too few to call.
constexpr int kLeanRounds = 20;
constexpr int kLeanPasses = 2;

// d + a by one scatter of a's (row, column) pairs, for both COO and CSR.
Expected<Variable> scatter_add(const SparseVariable& a, const Variable& d) {
  TESSEL_ASSIGN_OR_RETURN(Tensor rows, a.matrix.expanded_rows());
  return record("sparse_add_dense", {index(rows), index(a.matrix.col_indices()), a.values, d});
}

}  // namespace

Expected<Plan> plan_for(const SparseMatrix& a, SparseOp op, int64_t n, bool needs_grad,
                        const PlanOptions& options, const Tensor* dense) {
  std::string key = fmt::format("{}|{}|{}|{}|{}", op_name(op), n, needs_grad, a.device()->id(),
                                options.force ? choice_name(*options.force) : "");
  StructureStats stats;
  {
    std::lock_guard<std::mutex> lock(cache_mutex());
    PatternEntry& e = entry_for(a.pattern());
    if (auto it = e.plans.find(key); it != e.plans.end()) return it->second;
    stats = e.stats;
  }
  Plan plan = plan_operation(op, stats, DeviceFigures::of(a.device()), n, needs_grad, options);
  const std::vector<Candidate>& c = plan.candidates;
  // The runner-up: the next candidate that runs other code than the first (sparse + dense is one
  // scatter for csr and coo alike, so timing one against the other measures only noise).
  size_t other = 1;
  auto same_code = [op](Choice x, Choice y) {
    return x == y || (op == SparseOp::kAddDense && x != Choice::kDense && y != Choice::kDense);
  };
  while (other < c.size() && same_code(c[0].choice, c[other].choice))
    ++other;
  bool close =
      other < c.size() && c[other].estimate_us <= c[0].estimate_us * (1 + options.measure_margin);
  if (plan.reason == "cheapest estimate" && close && options.allow_measure && dense) {
    // The model cannot separate the two best: time both on the real operand (again if close).
    // Forward runs only, each format made first (as PreparedSpmm keeps it).
    autograd::NoGrad no_grad;
    Variable b(*dense);
    std::vector<std::function<Status()>> runs;
    const std::array<size_t, 2> timed{0, other};
    for (size_t i : timed) {
      const Choice choice = plan.candidates[i].choice;
      TESSEL_ASSIGN_OR_RETURN(PreparedSpmm prepared, PreparedSpmm::fixed(a, choice));
      SparseVariable sv = SparseVariable::of(a);
      Tensor densified;
      if (op == SparseOp::kAddDense && choice == Choice::kDense) {
        TESSEL_ASSIGN_OR_RETURN(densified, a.to_dense());
      }
      runs.push_back([=]() -> Status {
        switch (op) {
          case SparseOp::kSpmm:
            return prepared.run(*dense).status();
          case SparseOp::kSpmv:
            return product_as(sv, b, choice, true).status();
          case SparseOp::kAddDense:
            if (densified.defined()) return ops::add(densified, *dense).status();
            return scatter_add(sv, b).status();
        }
        return ok_status();
      });
    }
    std::vector<Timing> times;
    TESSEL_TRY(time_in_turns(runs, 5, times));
    const std::array<int, 2> threads{c[0].threads, c[other].threads};
    PairTiming pair = read_pair({times[0], times[1]}, threads);
    if (pair.speedup < kRetimeBand && pair.speedup * kRetimeBand > 1) {
      TESSEL_TRY(time_in_turns(runs, kRetimeRounds, times));
      pair = read_pair({times[0], times[1]}, threads);
    }
    auto decide = [&] {
      return decide_close_call(op, c[0].choice, c[other].choice, pair.speedup, pair.second_faster,
                               kCloseCallTie, close_call_majority(pair.rounds));
    };
    CloseCall call = decide();
    for (int pass = 0; pass < kLeanPasses && call.tie &&
                       (pair.speedup > kCloseCallTie || pair.speedup * kCloseCallTie < 1);
         ++pass) {
      TESSEL_TRY(time_in_turns(runs, kLeanRounds, times));
      pair = read_pair({times[0], times[1]}, threads);
      call = decide();
    }
    for (size_t i = 0; i < 2; ++i) {
      Candidate& cand = plan.candidates[timed[i]];
      cand.measured_wall = pair.wall;
      cand.measured_us = pair.us[i];
    }
    plan.measured_speedup = pair.speedup;
    plan.second_faster_share = pair.second_faster;
    plan.timed_rounds = pair.rounds;
    plan.choice = call.choice;
    plan.reason = fmt::format(
        "measured: the two best estimates were within {:.0f}%; over {} rounds the second ran "
        "{:.2f}x as fast (median {} time ratio), faster in {:.0f}% of them{}",
        100 * options.measure_margin, pair.rounds, pair.speedup, pair.wall ? "wall" : "CPU",
        100 * pair.second_faster,
        call.tie
            ? fmt::format(" (not {:.2f}x faster in {:.0f}% of the rounds): a tie, which {} wins",
                          kCloseCallTie, 100 * close_call_majority(pair.rounds),
                          choice_name(call.choice))
            : "");
  }
  log_debug("{}", plan.explain());
  std::lock_guard<std::mutex> lock(cache_mutex());
  entry_for(a.pattern()).plans[key] = plan;
  return plan;
}

Expected<Variable> spmm_as(const SparseVariable& a, const Variable& b, Choice choice) {
  return product_as(a, b, choice, false);
}

Expected<Variable> spmv_as(const SparseVariable& a, const Variable& x, Choice choice) {
  return product_as(a, x, choice, true);
}

Expected<Variable> spmm(const SparseVariable& a, const Variable& b, const PlanOptions& o) {
  if (b.shape().size() != 2)
    return invalid_argument("sparse spmm: {} times {}", a.matrix.describe(),
                            shape_string(b.shape()));
  TESSEL_ASSIGN_OR_RETURN(Plan p,
                          plan_for(a.matrix, SparseOp::kSpmm, b.shape()[1],
                                   a.values.requires_grad() || b.requires_grad(), o, &b.data()));
  return spmm_as(a, b, p.choice);
}

Expected<Variable> spmv(const SparseVariable& a, const Variable& x, const PlanOptions& o) {
  TESSEL_ASSIGN_OR_RETURN(
      Plan p, plan_for(a.matrix, SparseOp::kSpmv, 1, a.values.requires_grad() || x.requires_grad(),
                       o, &x.data()));
  return spmv_as(a, x, p.choice);
}

Expected<Variable> to_dense(const SparseVariable& a) {
  TESSEL_TRY(check_autograd_format(a));
  TESSEL_ASSIGN_OR_RETURN(Tensor rows, a.matrix.expanded_rows());
  return record("sparse_to_dense", {index(rows), index(a.matrix.col_indices()), a.values},
                ops::Attrs().set("rows", a.matrix.rows()).set("cols", a.matrix.cols()));
}

Expected<Variable> add_dense(const SparseVariable& a, const Variable& d, const PlanOptions& o) {
  TESSEL_TRY(check_autograd_format(a));
  if (d.shape() != Shape{a.matrix.rows(), a.matrix.cols()})
    return invalid_argument("sparse add: {} plus {}", a.matrix.describe(), shape_string(d.shape()));
  TESSEL_ASSIGN_OR_RETURN(Plan p,
                          plan_for(a.matrix, SparseOp::kAddDense, 1,
                                   a.values.requires_grad() || d.requires_grad(), o, &d.data()));
  if (p.choice == Choice::kDense) {
    TESSEL_ASSIGN_OR_RETURN(Variable dense, to_dense(a));
    return autograd::add(dense, d);
  }
  return scatter_add(a, d);
}

Expected<SparseVariable> transpose(const SparseVariable& a) {
  TESSEL_TRY(check_autograd_format(a));
  TESSEL_ASSIGN_OR_RETURN(SparseMatrix::Transposed t, a.matrix.transposed());
  TESSEL_ASSIGN_OR_RETURN(
      Variable v, record("gather_values", {a.values, index(t.permutation), index(t.inverse)}));
  TESSEL_ASSIGN_OR_RETURN(SparseMatrix m, SparseMatrix::from_pattern(t.pattern, v.data()));
  TESSEL_ASSIGN_OR_RETURN(m, m.to(a.matrix.format()));
  return SparseVariable{std::move(m), std::move(v)};
}

Expected<Variable> dense_spmm(const Variable& b, const SparseVariable& a, const PlanOptions& o) {
  if (b.shape().size() != 2 || b.shape()[1] != a.matrix.rows())
    return invalid_argument("sparse dense_spmm: {} times {}", shape_string(b.shape()),
                            a.matrix.describe());
  TESSEL_ASSIGN_OR_RETURN(SparseVariable at, transpose(a));
  TESSEL_ASSIGN_OR_RETURN(Variable bt, autograd::permute(b, {1, 0}));
  TESSEL_ASSIGN_OR_RETURN(Variable ct, spmm(at, bt, o));
  return autograd::permute(ct, {1, 0});
}

Expected<PreparedSpmm> PreparedSpmm::fixed(const SparseMatrix& a, Choice choice) {
  PreparedSpmm p;
  p.plan_.choice = choice;
  p.plan_.reason = "fixed";
  if (choice == Choice::kDense) {
    p.matrix_ = a;
    TESSEL_ASSIGN_OR_RETURN(p.dense_, a.to_dense());
  } else {
    SparseFormat f = choice == Choice::kCsr   ? SparseFormat::kCsr
                     : choice == Choice::kCoo ? SparseFormat::kCoo
                                              : SparseFormat::kBsr;
    TESSEL_ASSIGN_OR_RETURN(p.matrix_, a.to(f));
    // Derived indices are made now, not in the first timed run.
    TESSEL_TRY(p.matrix_.expanded_rows().status());
  }
  return p;
}

Expected<PreparedSpmm> PreparedSpmm::make(const SparseMatrix& a, int64_t n,
                                          const PlanOptions& options, const Tensor* sample) {
  TESSEL_ASSIGN_OR_RETURN(Plan plan, plan_for(a, SparseOp::kSpmm, n, false, options, sample));
  TESSEL_ASSIGN_OR_RETURN(PreparedSpmm p, fixed(a, plan.choice));
  p.plan_ = std::move(plan);
  return p;
}

Expected<Tensor> PreparedSpmm::run(const Tensor& b) const {
  if (plan_.choice == Choice::kDense) return ops::matmul(dense_, b);
  autograd::NoGrad no_grad;
  SparseVariable a = SparseVariable::of(matrix_);
  TESSEL_ASSIGN_OR_RETURN(Variable c, product_as(a, Variable(b), plan_.choice, false));
  return c.data();
}

}  // namespace tessel::sparse
