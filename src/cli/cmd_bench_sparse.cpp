// `tessel bench sparse`: a suite of sparse matrices (uniform, power-law rows, banded,
// block-sparse, hypersparse rows; 0.1% to 30% density; 1024 to 16384 rows), each operation
// (spmm with N dense columns, spmv, sparse + dense) timed in every format tessel has (csr, coo,
// bsr), the planner's choice (tessel-auto, sparse/planner.h), dense (tessel's gemm / matvec / add
// on the densified matrix, and oneDNN's sgemm loaded as bench gemm loads it) and PyTorch's
// torch.sparse CSR and COO (tools/pytorch/bench_sparse.py with $TESSEL_PYTHON or --python), in
// one run: per matrix and op, tessel's implementations take turns inside every repetition, then
// oneDNN's (its OpenMP threads spin after each call, so it is timed apart: time_in_turns), then
// the PyTorch process times the same matrix, so all see the same minutes of the machine.
//
// Figures are medians of the timed calls (after untimed ones that compile kernels and warm the
// caches), of process CPU time in the table (--wall: of wall time); the JSON rows carry both.
// Where two of tessel's implementations run the same code (tessel-auto and the format it chose;
// csr and coo for add), the ratios pool their samples (see same_code). Every result is checked
// against tessel-csr's (relative 1e-3 of the largest value).
// `--json` prints one object per (matrix, op, impl): matrix, kind, rows, cols, density, nnz, op,
// n, impl, time_us, and for tessel-auto its choice; `--explain` prints each plan.
// `--embedding` adds the training step of sparse/embedding_step.h (sparse vs dense gradients),
// with uniform ids (the case) and with Zipf-distributed ids (token-like), labelled.
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "autograd/variable.h"
#include "cli/bench_gemm_peers.h"
#include "cli/commands.h"
#include "ops/ops.h"
#include "sparse/embedding_step.h"
#include "sparse/functional.h"
#include "support/thread_pool.h"

namespace tessel::cli {
namespace {

using sparse::Choice;
using sparse::SparseMatrix;

struct Options {
  bool json = false;
  bool explain = false;
  bool embedding = false;
  bool no_torch = false;
  bool quick = false;
  bool wall = false;  // the table shows wall time (else process CPU time)
  int64_t n = 256;
  int reps = 7;
  int embedding_steps = 12;       // timed steps of each kind (after 2 warm-up steps)
  std::vector<std::string> only;  // matrix names
  std::string python;
};

struct MatrixSpec {
  std::string name, kind;
  int64_t rows, cols;
  double density;
};

// The suite. Densities from 0.1% to 30%; square 4096 (the SpMM size) and 1024, and a
// tall hypersparse one where most rows are empty.
std::vector<MatrixSpec> suite(bool quick) {
  std::vector<MatrixSpec> s = {
      {"uniform-4096-0.1%", "uniform", 4096, 4096, 0.001},
      {"uniform-4096-1%", "uniform", 4096, 4096, 0.01},
      {"uniform-4096-5%", "uniform", 4096, 4096, 0.05},
      {"uniform-4096-30%", "uniform", 4096, 4096, 0.30},
      {"uniform-1024-10%", "uniform", 1024, 1024, 0.10},
      {"powerlaw-4096-1%", "powerlaw", 4096, 4096, 0.01},
      {"powerlaw-4096-5%", "powerlaw", 4096, 4096, 0.05},
      {"banded-4096-1%", "banded", 4096, 4096, 0.01},
      {"block16-4096-5%", "block", 4096, 4096, 0.05},
      {"block16-1024-20%", "block", 1024, 1024, 0.20},
      {"hyper-16384x4096-0.1%", "hypersparse", 16384, 4096, 0.001},
  };
  if (quick) s = {s[1], s[5], s[8], s[10]};
  return s;
}

// Distinct columns, `count` of them out of `cols`, sorted.
std::vector<int64_t> pick_columns(int64_t count, int64_t cols, std::mt19937_64& rng) {
  count = std::min(count, cols);
  std::vector<int64_t> out;
  if (count * 3 > cols) {
    for (int64_t c = 0; c < cols; ++c)
      if (static_cast<int64_t>(rng() % static_cast<uint64_t>(cols - c)) <
          count - static_cast<int64_t>(out.size()))
        out.push_back(c);
    return out;
  }
  std::set<int64_t> chosen;
  while (static_cast<int64_t>(chosen.size()) < count)
    chosen.insert(static_cast<int64_t>(rng() % static_cast<uint64_t>(cols)));
  return {chosen.begin(), chosen.end()};
}

// The matrix of `spec` in CSR, values uniform in [-1, 1).
Expected<SparseMatrix> make_matrix(const MatrixSpec& spec) {
  std::mt19937_64 rng(std::hash<std::string>()(spec.name));
  std::uniform_real_distribution<float> value(-1, 1);
  const int64_t m = spec.rows, k = spec.cols;
  std::vector<int64_t> lengths(static_cast<size_t>(m), 0);
  const double target = spec.density * static_cast<double>(m) * static_cast<double>(k);
  std::vector<int64_t> indptr{0}, cols;
  if (spec.kind == "block") {
    const int64_t b = 16;
    std::bernoulli_distribution keep(spec.density);
    for (int64_t br = 0; br < m / b; ++br) {
      std::vector<int64_t> blocks;
      for (int64_t bc = 0; bc < k / b; ++bc)
        if (keep(rng)) blocks.push_back(bc);
      for (int64_t r = 0; r < b; ++r) {
        for (int64_t bc : blocks)
          for (int64_t c = 0; c < b; ++c)
            cols.push_back(bc * b + c);
        indptr.push_back(static_cast<int64_t>(cols.size()));
      }
    }
  } else {
    for (int64_t r = 0; r < m; ++r) {
      std::vector<int64_t> row;
      if (spec.kind == "banded") {
        const int64_t half = std::max<int64_t>(0, static_cast<int64_t>(spec.density * k / 2));
        for (int64_t c = std::max<int64_t>(0, r - half); c <= std::min(k - 1, r + half); ++c)
          row.push_back(c);
      } else {
        double mean = target / static_cast<double>(m);
        if (spec.kind == "powerlaw") {
          // Zipf row lengths (exponent 1) over a random order of rows, scaled to the density.
          double h = 0;
          for (int64_t i = 1; i <= m; ++i)
            h += 1.0 / static_cast<double>(i);
          int64_t rank = 1 + static_cast<int64_t>((r * 2654435761LL) % m);
          mean = target / h / static_cast<double>(rank);
        } else if (spec.kind == "hypersparse") {
          mean = r % 50 == 0 ? target / static_cast<double>(m / 50) : 0.0;
        }
        int64_t len = static_cast<int64_t>(mean);
        if (std::uniform_real_distribution<double>(0, 1)(rng) < mean - static_cast<double>(len))
          ++len;
        row = pick_columns(len, k, rng);
      }
      cols.insert(cols.end(), row.begin(), row.end());
      indptr.push_back(static_cast<int64_t>(cols.size()));
    }
  }
  std::vector<float> values(cols.size());
  for (float& v : values)
    v = value(rng);
  return SparseMatrix::csr(m, k, std::move(indptr), std::move(cols), std::move(values));
}

std::string load_text() {
  double load[3] = {0, 0, 0};
  if (::getloadavg(load, 3) < 0) return "?";
  return fmt::format("{:.2f} {:.2f} {:.2f}", load[0], load[1], load[2]);
}

// One implementation of one op on one matrix.
struct Contender {
  std::string impl;
  std::function<Expected<Tensor>()> run;
  std::vector<double> us, cpu_us;  // wall, and the process's CPU time (all threads)
  Tensor out;
  std::string note;  // tessel-auto: its choice
  // Runs on threads of its own (oneDNN's OpenMP threads), which keep spinning after it returns.
  bool foreign_threads = false;
};

double median(std::vector<double> v) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// One tessel implementation's timed calls.
struct Samples {
  std::vector<double> wall_us, cpu_us;
};

// The tessel implementations of `op` that run the same code as `impl` (itself included):
// tessel-auto runs the fixed format it chose (`choice`) through the same PreparedSpmm /
// functions, and sparse + dense is one scatter of (row, column) pairs for csr and coo alike.
std::vector<std::string> same_code(const std::string& op, const std::string& impl,
                                   const std::string& choice) {
  std::set<std::string> group{impl};
  const std::string chosen = "tessel-" + choice;
  auto join = [&group](const std::string& a, const std::string& b) {
    if (group.count(a) || group.count(b)) group.insert({a, b});
  };
  for (int pass = 0; pass < 2; ++pass) {  // twice: auto -> csr -> coo chains
    if (!choice.empty()) join("tessel-auto", chosen);
    if (op == "add") join("tessel-csr", "tessel-coo");
  }
  return {group.begin(), group.end()};
}

// The process's CPU time in us: on a machine shared with other work it moves far less than
// wall time (a thread waiting for a core is not counted), so the JSON rows carry both.
double cpu_now_us() {
  timespec t{};
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) * 1e6 + static_cast<double>(t.tv_nsec) * 1e-3;
}

// Returns once the process's other threads have gone quiet (at most ~50 ms): libgomp's threads,
// under oneDNN, spin for milliseconds after each call (its default wait policy).
void settle() {
  for (int i = 0; i < 50; ++i) {
    const double start = cpu_now_us();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    if (cpu_now_us() - start < 50) return;
  }
}

// A call shorter than this (CPU time) is timed warm: right after an untimed call of its own.
// Short calls are decided by what is in cache. Contenders share operands (csr, coo and auto
// read the same index and value arrays) and the dense ones stream a 64 MB matrix through L3, so
// whichever sparse contender came first after tessel-dense paid the misses for the others: the
// same coo code measured 36 and 104 us in one run. PyTorch's calls, in a loop, are warm too.
constexpr double kWarmCallUs = 10000;

// Untimed calls (compiles, caches), then at least `reps` rounds in which every contender of
// `group` runs once.
Status time_group(const std::vector<Contender*>& group, int reps) {
  double slowest_us = 0;
  std::vector<bool> short_call(group.size());
  for (size_t i = 0; i < group.size(); ++i) {
    Contender* c = group[i];
    TESSEL_ASSIGN_OR_RETURN(c->out, c->run());
    const double start = cpu_now_us();
    TESSEL_TRY(c->run().status());
    const double us = cpu_now_us() - start;
    slowest_us = std::max(slowest_us, us);
    short_call[i] = us < kWarmCallUs;
  }
  // Short ops get more rounds (up to 41, about 250 ms of CPU time for the slowest contender): a
  // median of 7 sub-millisecond calls moves by a fifth under load, and so did the 7 rounds that
  // 50 ms gave the 1024-row spmm products (their dense contenders take 8-10 ms): on a Zen 3 at
  // load 0.9-1.4, tessel-auto and tessel-csr, the same code, measured 1646 and 3203 us in one
  // run of uniform-1024-10%.
  if (slowest_us > 0)
    reps = std::clamp(static_cast<int>(250000 / slowest_us), reps, std::max(reps, 41));
  // Each round runs the contenders in a new random order (seeded), so none always runs first
  // (after PyTorch or another op) or right after the same neighbour. Rotating one order did
  // neither: tessel-csr always followed tessel-dense, whose 64 MB matrix had just pushed the
  // sparse operands out of L3, and showed 2-4x tessel-auto's time for the same csr code.
  std::vector<size_t> order(group.size());
  std::iota(order.begin(), order.end(), 0);
  std::mt19937 rng(17);
  for (int r = 0; r < reps; ++r) {
    std::shuffle(order.begin(), order.end(), rng);
    for (size_t i : order) {
      Contender& c = *group[i];
      if (short_call[i]) TESSEL_TRY(c.run().status());
      auto start = std::chrono::steady_clock::now();
      const double cpu = cpu_now_us();
      TESSEL_ASSIGN_OR_RETURN(Tensor out, c.run());
      (void)out;
      c.cpu_us.push_back(cpu_now_us() - cpu);
      c.us.push_back(
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
              .count());
    }
  }
  return ok_status();
}

// tessel's contenders take turns; then those on threads of their own (oneDNN) take theirs, and
// the bench waits for those threads to go quiet. Among tessel's turns, libgomp's spinning after
// each oneDNN call was charged to whichever contender came next, in CPU time and in the core its
// pool wanted: on a quiet machine tessel-csr, which always followed onednn-dense, showed 1-2.7 ms
// for spmv products that take 20-130 us.
Status time_in_turns(std::vector<Contender>& cs, int reps) {
  std::vector<Contender*> own, foreign;
  for (Contender& c : cs)
    (c.foreign_threads ? foreign : own).push_back(&c);
  TESSEL_TRY(time_group(own, reps));
  if (foreign.empty()) return ok_status();
  TESSEL_TRY(time_group(foreign, reps));
  settle();
  return ok_status();
}

// The largest difference from the reference output, relative to its largest value.
double difference(const Tensor& got, const Tensor& want) {
  std::vector<float> g = got.contiguous().value().to_vector<float>().value();
  std::vector<float> w = want.contiguous().value().to_vector<float>().value();
  double scale = 1e-30, diff = 0;
  for (size_t i = 0; i < w.size(); ++i) {
    scale = std::max(scale, static_cast<double>(std::fabs(w[i])));
    diff = std::max(diff, static_cast<double>(std::fabs(g[i] - w[i])));
  }
  return g.size() == w.size() ? diff / scale : INFINITY;
}

Status write_file(const std::filesystem::path& path, const void* data, size_t bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(static_cast<const char*>(data), static_cast<std::streamsize>(bytes));
  if (!f) return io_error("writing {}", path.string());
  return ok_status();
}

// PyTorch's rows for one matrix, or one row saying why there are none.
std::vector<nlohmann::json> torch_rows(const Options& o, const std::string& python,
                                       const std::filesystem::path& dir, const MatrixSpec& spec,
                                       const SparseMatrix& a, const Tensor& b, int threads) {
  const std::string base = (dir / spec.name).string();
  const auto& p = *a.pattern();
  std::vector<float> values = a.values().to_vector<float>().value();
  std::vector<float> bh = b.to_vector<float>().value();
  nlohmann::json meta = {{"rows", a.rows()}, {"cols", a.cols()}, {"nnz", a.nnz()}, {"n", o.n}};
  std::ofstream(base + ".json") << meta.dump();
  Status s = write_file(base + ".indptr", p.indptr.data(), p.indptr.size() * 8);
  if (s.ok()) s = write_file(base + ".cols", p.col_indices.data(), p.col_indices.size() * 8);
  if (s.ok()) s = write_file(base + ".vals", values.data(), values.size() * 4);
  if (s.ok()) s = write_file(base + ".b", bh.data(), bh.size() * 4);
  if (!s.ok()) return {{{"error", s.message()}}};
  std::string cmd = fmt::format(
      "'{}' '{}/tools/pytorch/bench_sparse.py' --dir '{}' --matrix '{}' --threads {} --reps {} "
      "2>&1",
      python, TESSEL_SOURCE_DIR, dir.string(), spec.name, threads, o.reps);
  std::vector<nlohmann::json> rows;
  std::string text;
  if (FILE* f = ::popen(cmd.c_str(), "r")) {
    char buf[4096];
    while (std::fgets(buf, sizeof buf, f)) {
      text += buf;
      nlohmann::json row = nlohmann::json::parse(buf, nullptr, false);
      if (!row.is_discarded() && row.is_object()) rows.push_back(row);
    }
    ::pclose(f);
  }
  for (const char* ext : {".json", ".indptr", ".cols", ".vals", ".b"})
    std::filesystem::remove(base + ext);
  if (rows.empty()) return {{{"error", "bench_sparse.py printed no rows: " + text.substr(0, 300)}}};
  return rows;
}

// The fields of every result row (time_us, choice and error are added by the caller).
nlohmann::json result_row(const MatrixSpec& spec, const SparseMatrix& a, const std::string& op,
                          int64_t n, const std::string& impl) {
  return {{"matrix", spec.name},
          {"kind", spec.kind},
          {"rows", a.rows()},
          {"cols", a.cols()},
          {"nnz", a.nnz()},
          {"density", a.density()},
          {"op", op},
          {"n", op == "spmm" ? n : 1},
          {"impl", impl},
          {"load", load_text()}};
}

// The dense operands of one matrix's runs: B [K, n], x [K], D [M, K] and the densified matrix.
struct Operands {
  Tensor b, x, d_add, dense;
};

// One of tessel's implementations of `op`, made once as the planner's measurement makes it:
// spmm through PreparedSpmm (dense keeping its densified matrix), spmv and add through the
// autograd functions without gradients, dense on the densified matrix.
Expected<std::function<Expected<Tensor>()>> tessel_run(const SparseMatrix& a, Choice c,
                                                       sparse::SparseOp op, const Operands& v) {
  if (op == sparse::SparseOp::kSpmm) {
    TESSEL_ASSIGN_OR_RETURN(sparse::PreparedSpmm p, sparse::PreparedSpmm::fixed(a, c));
    auto prepared = std::make_shared<sparse::PreparedSpmm>(std::move(p));
    return std::function<Expected<Tensor>()>([prepared, b = v.b] { return prepared->run(b); });
  }
  if (c == Choice::kDense) {
    return std::function<Expected<Tensor>()>([v, op]() -> Expected<Tensor> {
      if (op == sparse::SparseOp::kAddDense) return ops::add(v.dense, v.d_add);
      TESSEL_ASSIGN_OR_RETURN(Tensor x2, v.x.reshape({v.x.numel(), 1}));
      TESSEL_ASSIGN_OR_RETURN(Tensor y, ops::matmul(v.dense, x2));
      return y.reshape({y.numel()});
    });
  }
  TESSEL_ASSIGN_OR_RETURN(SparseMatrix m, a.to(c == Choice::kCsr ? sparse::SparseFormat::kCsr
                                                                 : sparse::SparseFormat::kCoo));
  sparse::SparseVariable sv = sparse::SparseVariable::of(std::move(m));
  return std::function<Expected<Tensor>()>([sv, v, op, c]() -> Expected<Tensor> {
    autograd::NoGrad no_grad;
    Expected<autograd::Variable> y =
        op == sparse::SparseOp::kSpmv
            ? sparse::spmv_as(sv, autograd::Variable(v.x), c)
            : sparse::add_dense(sv, autograd::Variable(v.d_add), sparse::PlanOptions{.force = c});
    if (!y.ok()) return y.status();
    return y->data();
  });
}

std::string fmt_us(double us) {
  if (std::isnan(us)) return "-";
  return us >= 1e4 ? fmt::format("{:.0f}", us) : fmt::format("{:.1f}", us);
}

int run(const Options& o) {
  const int threads = ThreadPool::global().num_threads();
  std::string python;
  std::string torch_note;
  if (!o.no_torch) {
    const char* env = std::getenv("TESSEL_PYTHON");
    python = !o.python.empty() ? o.python : (env && *env ? env : "python3");
    std::string probe =
        fmt::format("'{}' -c 'import torch, numpy; print(torch.__version__)' 2>&1", python);
    std::string out;
    int rc = -1;
    if (FILE* f = ::popen(probe.c_str(), "r")) {
      char buf[512];
      while (std::fgets(buf, sizeof buf, f))
        out += buf;
      rc = ::pclose(f);
    }
    if (rc != 0) {
      torch_note = fmt::format(
          "PyTorch not measured: '{}' cannot import torch and numpy (--python or TESSEL_PYTHON)",
          python);
      python.clear();
    } else {
      torch_note = fmt::format("PyTorch {} from {}, {} threads", out.substr(0, out.find('\n')),
                               python, threads);
    }
  } else {
    torch_note = "PyTorch not measured (--no-torch)";
  }
  std::vector<std::string> notes;
  std::vector<std::unique_ptr<GemmPeer>> peers = load_gemm_peers(threads, &notes);
  GemmPeer* onednn = nullptr;
  for (auto& p : peers)
    if (std::string(p->name()) == "onednn") onednn = p.get();
  std::filesystem::path dir =
      std::filesystem::temp_directory_path() / fmt::format("tessel-bench-sparse-{}", ::getpid());
  std::filesystem::create_directories(dir);

  if (!o.json) {
    std::printf(
        "# tessel bench sparse: f32 on cpu, %d threads, spmm with N = %lld, median %s of at least "
        "%d calls per impl (more for short ops) taking turns; load %s\n# %s; oneDNN %s\n",
        threads, static_cast<long long>(o.n), o.wall ? "wall time" : "CPU time", o.reps,
        load_text().c_str(), torch_note.c_str(), onednn ? onednn->describe().c_str() : "not found");
    std::printf("%-22s %-5s %9s %9s %9s %9s %9s %9s %9s %9s | %-6s %6s %6s %6s\n", "matrix", "op",
                "csr", "coo", "bsr", "auto", "dense", "onednn", "torch-csr", "torch-coo", "choice",
                "a/best", "d/auto", "t/best");
  }
  std::vector<nlohmann::json> all;
  int failures = 0;
  for (const MatrixSpec& spec : suite(o.quick)) {
    if (!o.only.empty() && std::find(o.only.begin(), o.only.end(), spec.name) == o.only.end())
      continue;
    Expected<SparseMatrix> made = make_matrix(spec);
    if (!made.ok()) {
      std::fprintf(stderr, "%s: %s\n", spec.name.c_str(), made.status().message().c_str());
      return 1;
    }
    const SparseMatrix& a = *made;
    Tensor b = Tensor::full({a.cols(), o.n}, 0, DType::kF32).value();
    {
      std::mt19937 rng(5);
      float* p = b.data<float>();
      for (int64_t i = 0; i < b.numel(); ++i)
        p[i] = std::uniform_real_distribution<float>(-1, 1)(rng);
    }
    Tensor x = b.select(1, 0).value().contiguous().value();
    Tensor dense = a.to_dense().value();
    Tensor d_add = Tensor::full({a.rows(), a.cols()}, 1.0, DType::kF32).value();
    const Operands operands{b, x, d_add, dense};
    std::map<std::pair<std::string, std::string>, nlohmann::json> rows;  // (op, impl)
    std::map<std::pair<std::string, std::string>, Samples> samples;      // tessel's
    for (const char* op : {"spmm", "spmv", "add"}) {
      std::vector<Contender> cs;
      const std::string ops_name = op;
      const sparse::SparseOp sop = ops_name == "spmm"   ? sparse::SparseOp::kSpmm
                                   : ops_name == "spmv" ? sparse::SparseOp::kSpmv
                                                        : sparse::SparseOp::kAddDense;
      const Tensor& operand = sop == sparse::SparseOp::kSpmv       ? x
                              : sop == sparse::SparseOp::kAddDense ? d_add
                                                                   : b;
      Expected<sparse::Plan> plan =
          sparse::plan_for(a, sop, sop == sparse::SparseOp::kSpmm ? o.n : 1, false, {}, &operand);
      if (!plan.ok()) {
        std::fprintf(stderr, "%s %s: %s\n", spec.name.c_str(), op, plan.status().message().c_str());
        return 1;
      }
      if (o.explain && !o.json) std::printf("%s", plan->explain().c_str());
      std::vector<Choice> fixed = {Choice::kCsr, Choice::kCoo};
      if (sop == sparse::SparseOp::kSpmm) fixed.push_back(Choice::kBsr);
      Status made = ok_status();
      auto add_tessel = [&](const std::string& impl, Choice c, const std::string& note) {
        Expected<std::function<Expected<Tensor>()>> fn = tessel_run(a, c, sop, operands);
        if (!fn.ok())
          made = fn.status();
        else
          cs.push_back({impl, *std::move(fn), {}, {}, {}, note});
      };
      for (Choice c : fixed)
        add_tessel(std::string("tessel-") + sparse::choice_name(c), c, "");
      // The planner's choice, run as the fixed one it picked (made once, like the others).
      add_tessel("tessel-auto", plan->choice, sparse::choice_name(plan->choice));
      // Dense: tessel's kernels on the densified matrix, and oneDNN's sgemm.
      add_tessel("tessel-dense", Choice::kDense, "");
      if (!made.ok()) {
        std::fprintf(stderr, "%s %s: %s\n", spec.name.c_str(), op, made.message().c_str());
        return 1;
      }
      if (sop != sparse::SparseOp::kAddDense) {
        Tensor rhs = sop == sparse::SparseOp::kSpmm ? b : x.reshape({x.numel(), 1}).value();
        if (onednn) {
          cs.push_back({"onednn-dense",
                        [onednn, dense, rhs, sop]() -> Expected<Tensor> {
                          TESSEL_ASSIGN_OR_RETURN(
                              Tensor c, Tensor::empty({dense.size(0), rhs.size(1)}, DType::kF32));
                          TESSEL_TRY(onednn->run({dense.size(0), rhs.size(1), dense.size(1),
                                                  tile::GemmInput::kF32, dense.data<float>(),
                                                  rhs.data<float>(), c.data<float>()}));
                          if (sop == sparse::SparseOp::kSpmv) return c.reshape({c.numel()});
                          return c;
                        },
                        {},
                        {},
                        {},
                        "",
                        /*foreign_threads=*/true});
        }
      }
      Status timed = time_in_turns(cs, o.reps);
      if (!timed.ok()) {
        std::fprintf(stderr, "%s %s: %s\n", spec.name.c_str(), op, timed.message().c_str());
        return 1;
      }
      for (Contender& c : cs) {
        double diff = difference(c.out, cs[0].out);
        nlohmann::json row = result_row(spec, a, op, o.n, c.impl);
        row["time_us"] = median(c.us);
        row["cpu_us"] = median(c.cpu_us);
        if (!c.note.empty()) row["choice"] = c.note;
        if (!(diff <= 1e-3)) {
          row["error"] = fmt::format("differs from tessel-csr by {:.3g} (relative)", diff);
          ++failures;
        }
        rows[{op, c.impl}] = row;
        samples[{op, c.impl}] = {c.us, c.cpu_us};
      }
    }
    if (!python.empty()) {
      for (nlohmann::json t : torch_rows(o, python, dir, spec, a, b, threads)) {
        if (!t.contains("op")) {
          std::fprintf(stderr, "%s: torch: %s\n", spec.name.c_str(),
                       t.value("error", std::string()).c_str());
          continue;
        }
        nlohmann::json row = result_row(spec, a, t["op"], o.n, t["impl"]);
        for (const char* field : {"time_us", "cpu_us"})
          if (t.contains(field)) row[field] = t[field];
        if (t.contains("error")) row["error"] = t["error"];
        rows[{t["op"].get<std::string>(), t["impl"].get<std::string>()}] = row;
      }
    }
    for (const char* op : {"spmm", "spmv", "add"}) {
      const char* field = o.wall ? "time_us" : "cpu_us";
      auto time_of = [&](const std::string& impl) -> double {
        auto it = rows.find({op, impl});
        if (it == rows.end() || !it->second.contains(field)) return NAN;
        return it->second[field].get<double>();
      };
      // tessel's implementations that run the same code pool their samples (see same_code).
      auto chosen = rows.find({op, "tessel-auto"});
      const std::string choice =
          chosen != rows.end() ? chosen->second.value("choice", std::string()) : "";
      auto pooled = [&](const std::string& impl, bool wall) -> double {
        std::vector<double> all_samples;
        for (const std::string& same : same_code(op, impl, choice))
          if (auto it = samples.find({op, same}); it != samples.end()) {
            const std::vector<double>& v = wall ? it->second.wall_us : it->second.cpu_us;
            all_samples.insert(all_samples.end(), v.begin(), v.end());
          }
        return median(all_samples);
      };
      auto ratio_time = [&](const std::string& impl) -> double {
        return samples.count({op, impl}) ? pooled(impl, o.wall) : time_of(impl);
      };
      double best_fixed = INFINITY;
      for (const char* f : {"tessel-csr", "tessel-coo", "tessel-bsr", "tessel-dense"})
        if (!std::isnan(ratio_time(f))) best_fixed = std::min(best_fixed, ratio_time(f));
      double torch_best =
          std::min(std::isnan(time_of("torch-csr")) ? INFINITY : time_of("torch-csr"),
                   std::isnan(time_of("torch-coo")) ? INFINITY : time_of("torch-coo"));
      double tessel_auto = ratio_time("tessel-auto");
      for (auto& [key, row] : rows)
        if (key.first == op) {
          if (samples.count(key)) {
            const std::vector<std::string> same = same_code(op, key.second, choice);
            if (same.size() > 1) {
              row["same_code"] = same;
              row["pooled_time_us"] = pooled(key.second, true);
              row["pooled_cpu_us"] = pooled(key.second, false);
            }
          }
          if (o.json) std::printf("%s\n", row.dump().c_str());
          all.push_back(row);
        }
      if (!o.json) {
        std::printf(
            "%-22s %-5s %9s %9s %9s %9s %9s %9s %9s %9s | %-6s %6.2f %6.2f %6s\n",
            spec.name.c_str(), op, fmt_us(time_of("tessel-csr")).c_str(),
            fmt_us(time_of("tessel-coo")).c_str(), fmt_us(time_of("tessel-bsr")).c_str(),
            fmt_us(tessel_auto).c_str(), fmt_us(time_of("tessel-dense")).c_str(),
            fmt_us(time_of("onednn-dense")).c_str(), fmt_us(time_of("torch-csr")).c_str(),
            fmt_us(time_of("torch-coo")).c_str(), choice.empty() ? "-" : choice.c_str(),
            best_fixed / tessel_auto, ratio_time("tessel-dense") / tessel_auto,
            std::isinf(torch_best) ? "-" : fmt::format("{:.2f}", torch_best / tessel_auto).c_str());
        std::fflush(stdout);
      }
    }
  }
  std::filesystem::remove_all(dir);
  if (!o.json) {
    std::printf(
        "# times in us, medians of %s. a/best: best fixed tessel format (csr, coo, bsr, dense) "
        "/ auto; d/auto: tessel-dense / auto; t/best: best torch.sparse / auto (> 1: tessel "
        "faster). a/best and d/auto pool the samples of implementations that run the same code "
        "(tessel-auto and the format it chose; csr and coo for add, one scatter), so where auto "
        "chose the best format a/best is 1.00: the planner is judged by its choice, not by the "
        "noise between two runs of one kernel. load at the end: %s\n",
        o.wall ? "wall time" : "process CPU time (all threads; --wall for wall time)",
        load_text().c_str());
  }
  if (o.embedding) {
    // The case (uniform ids), then token-like ids (Zipf, s = 1) as a second, labelled row.
    for (double zipf : {0.0, 1.0}) {
      sparse::EmbeddingStepOptions eo;
      if (o.quick) eo.vocabulary = 5000;
      eo.zipf = zipf;
      eo.steps = o.embedding_steps;
      Expected<sparse::EmbeddingStepReport> r = sparse::compare_embedding_steps(eo);
      if (!r.ok()) {
        std::fprintf(stderr, "embedding step: %s\n", r.status().message().c_str());
        return 1;
      }
      if (o.json)
        std::printf("%s\n", r->to_json().c_str());
      else
        std::printf("%s", r->to_text().c_str());
    }
  }
  return failures == 0 ? 0 : 1;
}

}  // namespace

void add_bench_sparse_command(CLI::App& bench) {
  auto options = std::make_shared<Options>();
  CLI::App* cmd = bench.add_subcommand(
      "sparse",
      "Sparse matrices (uniform, power-law, banded, block, hypersparse): spmm, spmv and sparse + "
      "dense in every format, the planner's choice, dense gemm (tessel, oneDNN) and torch.sparse");
  cmd->add_flag("--json", options->json, "one JSON object per (matrix, op, impl)");
  cmd->add_flag("--explain", options->explain, "print the planner's reasoning for each op");
  cmd->add_flag("--embedding", options->embedding,
                "also time a V = 50,000 embedding training step with sparse and dense gradients");
  cmd->add_flag("--no-torch", options->no_torch, "do not run PyTorch");
  cmd->add_flag("--quick", options->quick, "four matrices (and V = 5,000 for --embedding)");
  cmd->add_flag("--wall", options->wall,
                "the table shows medians of wall time (default: of process CPU time)");
  cmd->add_option("--n", options->n, "dense columns of spmm (default 256)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--reps", options->reps,
                  "timed calls per implementation, at least (default 7; short ops get more)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--embedding-steps", options->embedding_steps,
                  "timed steps of each embedding step kind (default 12; more to see the losses "
                  "of lazy and dense AdamW converge)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--matrix", options->only, "only these matrices (by name)");
  cmd->add_option("--python", options->python,
                  "Python with torch and numpy (default: $TESSEL_PYTHON, else python3)");
  cmd->callback([options] { exit_code = run(*options); });
}

}  // namespace tessel::cli
