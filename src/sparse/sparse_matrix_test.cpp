// SparseMatrix: validation messages, conversions between every format and dense on every device
// (against a dense matrix built on the host from the same triplets), the transpose; the
// planner's measured structure (closed forms), its candidates and the user's override; the
// autograd functions against dense matmul.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "autograd/functional.h"
#include "ops/ops.h"
#include "sparse/functional.h"
#include "sparse/planner.h"
#include "sparse/sparse_matrix.h"
#include "sparse/testing.h"

namespace tessel::sparse {
namespace {

std::string error_of(const Expected<SparseMatrix>& m) {
  EXPECT_FALSE(m.ok());
  return m.ok() ? "" : m.status().message();
}

void expect_contains(const std::string& text, const std::string& part) {
  EXPECT_NE(text.find(part), std::string::npos) << "'" << text << "' lacks '" << part << "'";
}

TEST(SparseMatrix, CooIndicesAreValidated) {
  expect_contains(error_of(SparseMatrix::coo(3, 4, {0, 3}, {1, 1}, {1, 2})),
                  "coo: row index 3 at position 1 is outside [0, 3)");
  expect_contains(error_of(SparseMatrix::coo(3, 4, {0, 1}, {-1, 1}, {1, 2})),
                  "coo: column index -1 at position 0 is outside [0, 4)");
  expect_contains(error_of(SparseMatrix::coo(3, 4, {2, 0, 2}, {1, 1, 1}, {1, 2, 3})),
                  "coo: (2, 1) appears at positions 0 and 2");
  expect_contains(error_of(SparseMatrix::coo(3, 4, {0}, {1, 2}, {1})), "coo: 1 row indices, 2");
  // Summed duplicates, and any input order, give the coalesced matrix.
  SparseMatrix m =
      SparseMatrix::coo(3, 4, {2, 0, 2}, {1, 3, 1}, {1, 2, 3}, cpu_device(), Duplicates::kSum)
          .value();
  EXPECT_EQ(m.format(), SparseFormat::kCoo);
  EXPECT_EQ(m.nnz(), 2);
  EXPECT_EQ(m.row_indices().to_vector<int64_t>().value(), (std::vector<int64_t>{0, 2}));
  EXPECT_EQ(m.col_indices().to_vector<int64_t>().value(), (std::vector<int64_t>{3, 1}));
  EXPECT_EQ(m.values().to_vector<float>().value(), (std::vector<float>{2, 4}));
}

TEST(SparseMatrix, CsrIndicesAreValidated) {
  expect_contains(error_of(SparseMatrix::csr(2, 3, {0, 1}, {0}, {1})),
                  "csr: indptr has 2 entries, a matrix of 2 rows needs 3");
  expect_contains(error_of(SparseMatrix::csr(2, 3, {1, 1, 1}, {0}, {1})),
                  "csr: indptr[0] is 1, must be 0");
  expect_contains(error_of(SparseMatrix::csr(2, 3, {0, 2, 1}, {0, 1}, {1, 2})),
                  "csr: indptr decreases at row 1 (2 then 1)");
  expect_contains(error_of(SparseMatrix::csr(2, 3, {0, 1, 1}, {0, 1}, {1, 2})),
                  "csr: indptr ends at 1 but there are 2 column indices");
  expect_contains(error_of(SparseMatrix::csr(2, 3, {0, 1, 2}, {0, 3}, {1, 2})),
                  "csr: column index 3 at position 1 (row 1) is outside [0, 3)");
  expect_contains(error_of(SparseMatrix::csr(1, 3, {0, 2}, {2, 0}, {1, 2})),
                  "csr: row 0 has column 0 after column 2 at position 1");
  expect_contains(error_of(SparseMatrix::csr(1, 3, {0, 2}, {1, 1}, {1, 2})), "(duplicate)");
  expect_contains(error_of(SparseMatrix::csr(1, 3, {0, 1}, {1}, {1, 2})),
                  "csr: 2 values for 1 column indices");
}

// The dense matrix of a random one, built on the host from its CSR pattern and values.
std::vector<float> host_dense(const SparseMatrix& m) {
  const HostPattern& p = *m.pattern();
  std::vector<float> values = m.to(SparseFormat::kCsr).value().values().to_vector<float>().value();
  std::vector<float> d(static_cast<size_t>(p.rows * p.cols), 0.0f);
  for (int64_t r = 0; r < p.rows; ++r)
    for (int64_t k = p.indptr[r]; k < p.indptr[r + 1]; ++k)
      d[r * p.cols + p.col_indices[k]] = values[k];
  return d;
}

TEST(SparseMatrix, ConversionsRoundTripOnEveryDevice) {
  for (Device* device : testing::devices()) {
    SCOPED_TRACE(device->id());
    SparseMatrix a = testing::random_matrix(23, 17, 0.2, 3, device);
    const std::vector<float> want = host_dense(a);
    for (SparseFormat f : {SparseFormat::kCoo, SparseFormat::kCsr, SparseFormat::kBsr}) {
      SparseMatrix b = a.to(f, 4, 3).value();
      EXPECT_EQ(b.format(), f);
      EXPECT_EQ(b.to_dense().value().to_vector<float>().value(), want) << format_name(f);
      // Back from each format to each other.
      for (SparseFormat g : {SparseFormat::kCoo, SparseFormat::kCsr, SparseFormat::kBsr})
        EXPECT_EQ(b.to(g, 8, 8).value().to_dense().value().to_vector<float>().value(), want)
            << format_name(f) << " -> " << format_name(g);
    }
    SparseMatrix bsr = a.to(SparseFormat::kBsr, 4, 3).value();
    EXPECT_EQ(bsr.values().shape(), (Shape{bsr.col_indices().numel(), 4, 3}));
    // Dense -> sparse keeps exactly the nonzeros.
    Tensor dense = a.to_dense().value();
    SparseMatrix back = SparseMatrix::from_dense(dense, SparseFormat::kCsr).value();
    EXPECT_EQ(back.nnz(), a.nnz());
    EXPECT_EQ(back.to_dense().value().to_vector<float>().value(), want);
    // The transpose.
    std::vector<float> t = a.transpose().value().to_dense().value().to_vector<float>().value();
    for (int64_t r = 0; r < 23; ++r)
      for (int64_t c = 0; c < 17; ++c)
        ASSERT_EQ(t[c * 23 + r], want[r * 17 + c]);
    // Another device.
    EXPECT_EQ(a.to_device(cpu_device()).value().to_dense().value().to_vector<float>().value(),
              want);
  }
}

TEST(Planner, StructureStatsAreMeasured) {
  // Rows of 4, 0, 2, 0 nonzeros in a 4 x 32 matrix; 16 x 16 blocks: row 0 spans blocks 0 and 1,
  // row 2 block 1 again (same block row), so 2 blocks.
  HostPattern p;
  p.rows = 4;
  p.cols = 32;
  p.indptr = {0, 4, 4, 6, 6};
  p.col_indices = {0, 1, 16, 17, 20, 21};
  StructureStats s = StructureStats::measure(p, 16);
  EXPECT_EQ(s.nnz, 6);
  EXPECT_DOUBLE_EQ(s.density, 6.0 / 128);
  EXPECT_DOUBLE_EQ(s.mean_row, 1.5);
  EXPECT_EQ(s.max_row, 4);
  EXPECT_DOUBLE_EQ(s.empty_rows, 0.5);
  // Row lengths 4, 0, 2, 0: variance ((2.5)^2 + 1.5^2 + 0.5^2 + 1.5^2) / 4 = 2.75.
  EXPECT_NEAR(s.row_cv, std::sqrt(2.75) / 1.5, 1e-12);
  EXPECT_EQ(s.blocks, 2);
  EXPECT_DOUBLE_EQ(s.block_fill, 6.0 / 512);
}

TEST(Planner, ChoosesFromStructureAndExplains) {
  DeviceFigures d;
  d.threads = 2;
  d.vector_lanes = 16;
  d.bandwidth_gbs = 20;
  d.peak_gflops = 200;
  // A full matrix: dense gemm; a 1% one: a sparse format; bsr only without gradients.
  StructureStats full;
  full.rows = full.cols = 1024;
  full.nnz = 1024 * 1024;
  full.density = 1;
  full.mean_row = full.max_row = 1024;
  full.blocks = 64 * 64;
  full.block_fill = 1;
  EXPECT_EQ(plan_operation(SparseOp::kSpmm, full, d, 256, true).choice, Choice::kDense);
  StructureStats sparse = full;
  sparse.nnz = 10486;
  sparse.density = 0.01;
  sparse.mean_row = 10.24;
  sparse.max_row = 20;
  sparse.blocks = 4096;
  sparse.block_fill = 10486.0 / (4096 * 256);
  Plan p = plan_operation(SparseOp::kSpmm, sparse, d, 256, true);
  EXPECT_NE(p.choice, Choice::kDense);
  for (const Candidate& c : p.candidates)
    EXPECT_NE(c.choice, Choice::kBsr) << "bsr has no backward";
  // The case, 4096 x 4096 at 5% with N = 256 (uniform rows): csr, whose calibrated
  // estimate is below a third of dense gemm's, as spmm_csr_tiled measured (planner.cpp).
  StructureStats five = full;
  five.rows = five.cols = 4096;
  five.nnz = 838861;
  five.density = 0.05;
  five.mean_row = 204.8;
  five.max_row = 230;
  five.blocks = 65536;
  five.block_fill = 0.05;
  Plan p5 = plan_operation(SparseOp::kSpmm, five, d, 256, false);
  EXPECT_EQ(p5.choice, Choice::kCsr) << p5.explain();
  double dense_us = 0;
  for (const Candidate& c : p5.candidates)
    if (c.choice == Choice::kDense) dense_us = c.estimate_us;
  EXPECT_LT(3 * p5.candidates.front().estimate_us, dense_us) << p5.explain();
  std::string text = p.explain();
  expect_contains(text, "sparse spmm plan: ");
  expect_contains(text, "dense estimate");
  expect_contains(text, "coo   estimate");
  // The caller's choice, then the environment's, win over the model.
  PlanOptions forced;
  forced.force = Choice::kCoo;
  Plan f = plan_operation(SparseOp::kSpmm, sparse, d, 256, false, forced);
  EXPECT_EQ(f.choice, Choice::kCoo);
  EXPECT_EQ(f.reason, "forced by the caller");
  ::setenv("TESSEL_SPARSE_FORMAT", "dense", 1);
  Plan e = plan_operation(SparseOp::kSpmm, sparse, d, 256, false);
  ::unsetenv("TESSEL_SPARSE_FORMAT");
  EXPECT_EQ(e.choice, Choice::kDense);
  EXPECT_EQ(e.reason, "forced by TESSEL_SPARSE_FORMAT");
  ::setenv("TESSEL_SPARSE_FORMAT", "diagonal", 1);
  Plan bad = plan_operation(SparseOp::kSpmm, sparse, d, 256, false);
  ::unsetenv("TESSEL_SPARSE_FORMAT");
  expect_contains(bad.reason, "TESSEL_SPARSE_FORMAT ignored: unknown sparse choice 'diagonal'");
}

// SpMV: csr wherever rows are long or mostly empty (spmv_csr runs rows in registers; spmv_coo
// adds into y once per nonzero, one thread), and the two within the measuring margin where rows
// hold a few nonzeros (both near 1 ns a nonzero in L2), so the plan times them. Figures of the
// bench's matrices: uniform 4096 x 4096 at 1% and 0.1%, hypersparse 16384 x 4096 (1 row in 50).
TEST(Planner, SpmvTakesCsrWhereRowsAreLongOrEmpty) {
  DeviceFigures d;
  d.threads = 2;
  d.l2_bytes = 1 << 20;
  auto stats = [](int64_t rows, int64_t nnz) {
    StructureStats s;
    s.rows = rows;
    s.cols = 4096;
    s.nnz = nnz;
    s.density = static_cast<double>(nnz) / (static_cast<double>(rows) * 4096);
    s.mean_row = static_cast<double>(nnz) / static_cast<double>(rows);
    return s;
  };
  auto estimate = [](const Plan& p, Choice c) {
    for (const Candidate& x : p.candidates)
      if (x.choice == c) return x.estimate_us;
    return -1.0;
  };
  for (const StructureStats& s : {stats(4096, 167936), stats(16384, 67109)}) {
    Plan p = plan_operation(SparseOp::kSpmv, s, d, 1, false);
    EXPECT_EQ(p.choice, Choice::kCsr) << p.explain();
    EXPECT_GT(estimate(p, Choice::kCoo), 2 * estimate(p, Choice::kCsr)) << p.explain();
  }
  Plan short_rows = plan_operation(SparseOp::kSpmv, stats(4096, 16827), d, 1, false);
  const double csr = estimate(short_rows, Choice::kCsr), coo = estimate(short_rows, Choice::kCoo);
  EXPECT_LT(std::max(csr, coo), 2 * std::min(csr, coo)) << short_rows.explain();
  EXPECT_NE(short_rows.choice, Choice::kDense);
}

// How a timed pair is decided: a side faster by more than 3% in the median ratio and in at least
// 3 of 4 rounds wins, whichever the model put first; anything else is a tie, which the more
// general format wins (for products csr, then coo, bsr, dense; for sparse + dense, dense first),
// in either order.
TEST(SparsePlanner, CloseCallGoesToTheFasterOrOnATieToTheMoreGeneralFormat) {
  struct Case {
    Choice first, second;
    double speedup;  // first's time / second's (median of the rounds)
    double share;    // of the rounds, those in which the second was faster
    Choice want;
    bool tie;
  };
  const Case cases[] = {
      {Choice::kBsr, Choice::kCsr, 1.0, 0.5, Choice::kCsr, true},
      {Choice::kBsr, Choice::kCsr, 1.0 / 1.02, 0.1, Choice::kCsr, true},  // bsr 2% faster: a tie
      {Choice::kBsr, Choice::kCsr, 1.02, 0.9, Choice::kCsr, true},
      {Choice::kBsr, Choice::kCsr, 1.0 / 1.04, 0.2, Choice::kBsr, false},  // bsr 4%, 80% of rounds
      {Choice::kBsr, Choice::kCsr, 1.0 / 1.04, 0.3, Choice::kCsr, true},   // ... but 70%: a tie
      {Choice::kCsr, Choice::kBsr, 1.0 / 1.02, 0.0, Choice::kCsr, true},
      {Choice::kCsr, Choice::kBsr, 1.04, 0.75, Choice::kBsr, false},
      {Choice::kCsr, Choice::kBsr, 1.5, 0.6, Choice::kCsr, true},  // faster, not in most rounds
      {Choice::kCsr, Choice::kCoo, 1.02, 1.0, Choice::kCsr, true},
      {Choice::kCoo, Choice::kCsr, 1.0 / 1.02, 0.0, Choice::kCsr, true},
      {Choice::kCoo, Choice::kCsr, 0.5, 0.0, Choice::kCoo, false},
      {Choice::kDense, Choice::kCoo, 1.0, 0.5, Choice::kCoo, true},
      {Choice::kDense, Choice::kBsr, 0.99, 0.4, Choice::kBsr, true},
      {Choice::kBsr, Choice::kDense, 1.5, 1.0, Choice::kDense, false},
  };
  for (const Case& k : cases) {
    CloseCall call = decide_close_call(SparseOp::kSpmm, k.first, k.second, k.speedup, k.share);
    const std::string what =
        fmt::format("{} vs {} at {:.3f}, second faster in {:.0f}%", choice_name(k.first),
                    choice_name(k.second), k.speedup, 100 * k.share);
    EXPECT_EQ(call.choice, k.want) << what;
    EXPECT_EQ(call.tie, k.tie) << what;
  }
  // The bands are the caller's: at 10%, a 6% lead is a tie; at a majority of 0.6, 70% is enough.
  const SparseOp mm = SparseOp::kSpmm;
  EXPECT_EQ(decide_close_call(mm, Choice::kBsr, Choice::kCsr, 1.0 / 1.06, 0.0, 1.10).choice,
            Choice::kCsr);
  EXPECT_EQ(decide_close_call(mm, Choice::kBsr, Choice::kCsr, 1.0 / 1.06, 0.3, 1.03, 0.6).choice,
            Choice::kBsr);
  for (SparseOp op : {SparseOp::kSpmm, SparseOp::kSpmv}) {
    EXPECT_LT(tie_rank(op, Choice::kCsr), tie_rank(op, Choice::kCoo));
    EXPECT_LT(tie_rank(op, Choice::kCoo), tie_rank(op, Choice::kBsr));
    EXPECT_LT(tie_rank(op, Choice::kBsr), tie_rank(op, Choice::kDense));
  }
  // Sparse + dense: a tie goes to the dense add, either way round; a clear win does not.
  const SparseOp add = SparseOp::kAddDense;
  EXPECT_EQ(decide_close_call(add, Choice::kCsr, Choice::kDense, 1.02, 0.8).choice, Choice::kDense);
  EXPECT_EQ(decide_close_call(add, Choice::kDense, Choice::kCsr, 1.02, 0.8).choice, Choice::kDense);
  EXPECT_EQ(decide_close_call(add, Choice::kDense, Choice::kCsr, 1.2, 0.9).choice, Choice::kCsr);
  EXPECT_LT(tie_rank(add, Choice::kDense), tie_rank(add, Choice::kCsr));
}

// The majority a lead needs is 3 of 4 rounds up to 20 rounds, then falls as a sign test's would
// at the same confidence (1/2 + z / (2 sqrt(n))): a lean that holds over more rounds is decided.
TEST(SparsePlanner, CloseCallMajorityFallsWithMoreRoundsAsASignTest) {
  EXPECT_DOUBLE_EQ(close_call_majority(5), kCloseCallMajority);
  EXPECT_DOUBLE_EQ(close_call_majority(20), kCloseCallMajority);
  EXPECT_NEAR(close_call_majority(40), 0.5 + 0.25 * std::sqrt(20.0 / 40), 1e-12);  // 0.677
  EXPECT_NEAR(close_call_majority(60), 0.5 + 0.25 * std::sqrt(20.0 / 60), 1e-12);  // 0.644
  EXPECT_GT(close_call_majority(40), close_call_majority(60));
  // bsr 8% ahead of csr in 70% of the rounds: a tie at 20 rounds, bsr's at 40.
  const SparseOp mm = SparseOp::kSpmm;
  const CloseCall at20 = decide_close_call(mm, Choice::kCsr, Choice::kBsr, 1.08, 0.70,
                                           kCloseCallTie, close_call_majority(20));
  EXPECT_TRUE(at20.tie);
  EXPECT_EQ(at20.choice, Choice::kCsr);
  const CloseCall at40 = decide_close_call(mm, Choice::kCsr, Choice::kBsr, 1.08, 0.70,
                                           kCloseCallTie, close_call_majority(40));
  EXPECT_FALSE(at40.tie);
  EXPECT_EQ(at40.choice, Choice::kBsr);
  // The same for the first side, and an even split stays a tie however long it is timed.
  EXPECT_EQ(decide_close_call(mm, Choice::kBsr, Choice::kCsr, 1.0 / 1.08, 0.30, kCloseCallTie,
                              close_call_majority(40))
                .choice,
            Choice::kBsr);
  EXPECT_TRUE(decide_close_call(mm, Choice::kCsr, Choice::kBsr, 1.05, 0.55, kCloseCallTie,
                                close_call_majority(60))
                  .tie);
}

// The measurement step: the two best candidates are both timed (taking turns, again when close)
// and decided by decide_close_call on the median of the per-round ratios; the plan is kept per
// pattern, so asking again returns it unchanged. Candidates that run the same code are not timed
// against each other.
TEST(SparsePlanner, MeasuresTheTwoBestAndDecidesByTheCloseCallRule) {
  SparseMatrix a = testing::random_matrix(96, 80, 0.1, 11, cpu_device());
  Tensor b = testing::random_dense({80, 32}, 12, cpu_device());
  PlanOptions always;
  always.measure_margin = 1e9;  // every pair counts as close
  Plan p = plan_for(a, SparseOp::kSpmm, 32, false, always, &b).value();
  ASSERT_GE(p.candidates.size(), 2u);
  const Candidate &first = p.candidates[0], &second = p.candidates[1];
  ASSERT_TRUE(first.measured_us.has_value()) << p.explain();
  ASSERT_TRUE(second.measured_us.has_value()) << p.explain();
  EXPECT_GT(*first.measured_us, 0);
  EXPECT_GT(*second.measured_us, 0);
  ASSERT_TRUE(p.measured_speedup.has_value()) << p.explain();
  EXPECT_GT(*p.measured_speedup, 0);
  EXPECT_GE(p.second_faster_share, 0);
  EXPECT_LE(p.second_faster_share, 1);
  // At least the first pass's rounds (5, more for short calls), and a second pass when within 2x
  // (a pooled ratio within 2x had a first pass within 2x).
  EXPECT_GE(p.timed_rounds, 5);
  if (*p.measured_speedup < 2 && *p.measured_speedup > 0.5) {
    EXPECT_GE(p.timed_rounds, 5 + 15) << p.explain();
  }
  EXPECT_EQ(p.choice, decide_close_call(SparseOp::kSpmm, first.choice, second.choice,
                                        *p.measured_speedup, p.second_faster_share, kCloseCallTie,
                                        close_call_majority(p.timed_rounds))
                          .choice)
      << p.explain();
  expect_contains(p.reason, "measured: the two best estimates were within");
  // Calls this small are shown by their fastest wall time.
  EXPECT_TRUE(first.measured_wall) << p.explain();
  expect_contains(p.explain(), "(fastest wall time)");
  Plan again = plan_for(a, SparseOp::kSpmm, 32, false, always, &b).value();
  EXPECT_EQ(again.choice, p.choice);
  EXPECT_EQ(again.reason, p.reason);
  // Sparse + dense is one scatter for csr and coo: the pair timed is a sparse one and dense.
  Tensor d = testing::random_dense({96, 80}, 13, cpu_device());
  Plan add = plan_for(a, SparseOp::kAddDense, 1, false, always, &d).value();
  int measured = 0, dense_measured = 0;
  for (const Candidate& c : add.candidates)
    if (c.measured_us) {
      ++measured;
      dense_measured += c.choice == Choice::kDense;
    }
  EXPECT_EQ(measured, 2) << add.explain();
  EXPECT_EQ(dense_measured, 1) << add.explain();
}

// Every choice of spmm, spmv and the dense-operand-first product gives dense matmul's result and
// gradients (values and the dense operand), on every device.
TEST(SparseFunctional, EveryChoiceMatchesDenseMatmulWithGradients) {
  for (Device* device : testing::devices()) {
    SCOPED_TRACE(device->id());
    SparseMatrix a = testing::random_matrix(19, 13, 0.3, 5, device);
    Tensor b = testing::random_dense({13, 7}, 6, device);
    Tensor g = testing::random_dense({19, 7}, 7, device);
    // The reference: dense A (a function of the values through sparse_to_dense) times B.
    SparseVariable ref_a = SparseVariable::of(a, true);
    Variable ref_b(b, true);
    Variable ref_y = autograd::matmul(to_dense(ref_a).value(), ref_b).value();
    ASSERT_TRUE(ref_y.backward(g).ok());
    const std::vector<float> want_y = ref_y.data().to_vector<float>().value();
    const std::vector<float> want_da = ref_a.values.grad().to_vector<float>().value();
    const std::vector<float> want_db = ref_b.grad().to_vector<float>().value();
    for (Choice c : {Choice::kCsr, Choice::kCoo, Choice::kDense}) {
      SCOPED_TRACE(choice_name(c));
      SparseVariable sa = SparseVariable::of(a, true);
      Variable sb(b, true);
      Variable y = spmm_as(sa, sb, c).value();
      ASSERT_TRUE(y.backward(g).ok());
      auto close = [](const std::vector<float>& x, const std::vector<float>& w) {
        ASSERT_EQ(x.size(), w.size());
        for (size_t i = 0; i < x.size(); ++i)
          EXPECT_NEAR(x[i], w[i], 1e-5 + 1e-5 * std::fabs(w[i])) << i;
      };
      close(y.data().to_vector<float>().value(), want_y);
      close(sa.values.grad().to_vector<float>().value(), want_da);
      close(sb.grad().to_vector<float>().value(), want_db);
    }
    // x [7, 19] times a: (a^T x^T)^T, and its gradients against the dense product's.
    Tensor x = testing::random_dense({7, 19}, 8, device);
    Tensor gx = testing::random_dense({7, 13}, 9, device);
    SparseVariable sa = SparseVariable::of(a, true);
    Variable vx(x, true);
    Variable y = dense_spmm(vx, sa).value();
    ASSERT_TRUE(y.backward(gx).ok());
    SparseVariable da = SparseVariable::of(a, true);
    Variable dx(x, true);
    Variable want = autograd::matmul(dx, to_dense(da).value()).value();
    ASSERT_TRUE(want.backward(gx).ok());
    std::vector<float> got_y = y.data().contiguous().value().to_vector<float>().value();
    std::vector<float> wy = want.data().to_vector<float>().value();
    for (size_t i = 0; i < wy.size(); ++i)
      EXPECT_NEAR(got_y[i], wy[i], 1e-5);
    std::vector<float> ga = sa.values.grad().to_vector<float>().value();
    std::vector<float> wa = da.values.grad().to_vector<float>().value();
    for (size_t i = 0; i < wa.size(); ++i)
      EXPECT_NEAR(ga[i], wa[i], 1e-5);
    std::vector<float> gxv = vx.grad().to_vector<float>().value();
    std::vector<float> wx = dx.grad().to_vector<float>().value();
    for (size_t i = 0; i < wx.size(); ++i)
      EXPECT_NEAR(gxv[i], wx[i], 1e-5);
    // The planner's own choice and the prepared (inference) path agree too.
    Variable auto_y = spmm(SparseVariable::of(a), Variable(b)).value();
    Tensor prepared = PreparedSpmm::make(a, 7).value().run(b).value();
    std::vector<float> ay = auto_y.data().to_vector<float>().value();
    std::vector<float> py = prepared.to_vector<float>().value();
    for (size_t i = 0; i < want_y.size(); ++i) {
      EXPECT_NEAR(ay[i], want_y[i], 1e-5);
      EXPECT_NEAR(py[i], want_y[i], 1e-5);
    }
  }
}

TEST(SparseFunctional, BsrRefusesGradients) {
  SparseMatrix a = testing::random_matrix(8, 8, 0.5, 1, cpu_device());
  Expected<Variable> y =
      spmm_as(SparseVariable::of(a, true), Variable(testing::random_dense({8, 2}, 2, cpu_device())),
              Choice::kBsr);
  ASSERT_FALSE(y.ok());
  expect_contains(y.status().message(), "the bsr kernel is a forward spmm only");
}

}  // namespace
}  // namespace tessel::sparse
