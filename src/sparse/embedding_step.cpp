// The dense- vs sparse-gradient embedding step (see embedding_step.h).
#include "sparse/embedding_step.h"

#include <time.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <functional>

#include <nlohmann/json.hpp>

#include "autograd/functional.h"
#include "nn/layers.h"
#include "ops/ops.h"
#include "optim/optimizer.h"
#include "sparse/embedding.h"

namespace tessel::sparse {
namespace {

using autograd::Variable;

std::string load_now() {
  double load[3] = {0, 0, 0};
  if (::getloadavg(load, 3) < 0) return "?";
  return fmt::format("{:.2f} {:.2f} {:.2f}", load[0], load[1], load[2]);
}

double median(std::vector<double> v) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The dense-gradient model: the table as a module parameter (flat parameters, dense AdamW).
class Table : public nn::Module {
 public:
  Table(int64_t v, int64_t c) {
    emb_ = &register_module("emb", std::make_unique<nn::Embedding>(v, c));
  }
  Expected<Variable> forward(const Variable& ids) override { return emb_->forward(ids); }
  std::string type_name() const override { return "Table"; }
  nn::Embedding& emb() { return *emb_; }

 private:
  nn::Embedding* emb_;
};

// The loss, mean((e - target)^2), and its gradient 2 (e - target) / n: the rest of a network,
// computed between the table's forward and backward and kept out of the table's time.
struct Loss {
  double value = 0;
  Tensor grad;
};
Expected<Loss> mse(const Tensor& e, const Tensor& target) {
  TESSEL_ASSIGN_OR_RETURN(Tensor d, ops::sub(e, target));
  TESSEL_ASSIGN_OR_RETURN(Tensor sq, ops::mul(d, d));
  TESSEL_ASSIGN_OR_RETURN(Tensor mean, ops::mean(sq));
  TESSEL_ASSIGN_OR_RETURN(std::vector<float> v, mean.to_vector<float>());
  Loss l{v[0], {}};
  TESSEL_ASSIGN_OR_RETURN(l.grad, ops::scale(d, 2.0 / static_cast<double>(d.numel())));
  return l;
}

struct Batch {
  Tensor ids, targets;
};

// Draws ids uniformly, or by Zipf's law over a fixed random order of the ids.
class IdSampler {
 public:
  explicit IdSampler(const EmbeddingStepOptions& o) : v_(o.vocabulary) {
    if (o.zipf <= 0) return;
    Pcg32 rng(o.seed, 99);
    id_of_rank_ = shuffled_indices(v_, rng);
    cdf_.resize(static_cast<size_t>(v_));
    double total = 0;
    for (int64_t k = 0; k < v_; ++k)
      cdf_[k] = total += std::pow(static_cast<double>(k + 1), -o.zipf);
    for (double& c : cdf_)
      c /= total;
  }
  int64_t draw(Pcg32& rng) const {
    if (cdf_.empty()) return static_cast<int64_t>(rng.below_u64(static_cast<uint64_t>(v_)));
    // 53 random bits: the rarest ranks have probabilities far below float's 2^-24.
    const double x = static_cast<double>(rng.below_u64(uint64_t{1} << 53)) * 0x1p-53;
    const size_t rank = std::min<size_t>(
        std::upper_bound(cdf_.begin(), cdf_.end(), x) - cdf_.begin(), cdf_.size() - 1);
    return id_of_rank_[rank];
  }

 private:
  int64_t v_;
  std::vector<int64_t> id_of_rank_;
  std::vector<double> cdf_;  // by rank, ending at 1
};

Expected<Batch> make_batch(const EmbeddingStepOptions& o, const IdSampler& sampler, int step,
                           const Tensor& targets) {
  Pcg32 rng(o.seed, 100 + static_cast<uint64_t>(step));
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < o.batch * o.tokens; ++i)
    ids.push_back(sampler.draw(rng));
  Batch batch;
  TESSEL_ASSIGN_OR_RETURN(batch.ids,
                          Tensor::from_vector(ids, {o.batch, o.tokens}, targets.device()));
  TESSEL_ASSIGN_OR_RETURN(batch.targets, ops::embedding(targets, batch.ids));
  return batch;
}

double ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

// The process's CPU time (all threads) in ms: on a shared machine it moves less than wall time.
double cpu_ms() {
  timespec t{};
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) * 1e3 + static_cast<double>(t.tv_nsec) * 1e-6;
}

// Each distinct id replaced by the order of its first position: the same positions per row, the
// rows 0..U-1, and rows met first are updated first, so a step reads the gradient's rows of ids
// seen once (most of them) in increasing order as well.
std::vector<int64_t> first_seen_ranks(const std::vector<int64_t>& ids, int64_t v) {
  std::vector<int64_t> rank_of(static_cast<size_t>(v), -1), out(ids.size());
  int64_t next = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    int64_t& rank = rank_of[static_cast<size_t>(ids[i])];
    if (rank < 0) rank = next++;
    out[i] = rank;
  }
  return out;
}

// The lazy AdamW step on a scratch table of the run's size, for the batches of the run, once on
// the ids and once on their ranks, taking turns (EmbeddingStepReport::scattered_rows_cpu_ms).
Status time_row_layouts(const EmbeddingStepOptions& o, const IdSampler& sampler, Device* device,
                        EmbeddingStepReport& r) {
  TESSEL_ASSIGN_OR_RETURN(Tensor table, Tensor::zeros({o.vocabulary, o.dim}, DType::kF32, device));
  TESSEL_ASSIGN_OR_RETURN(SparseEmbedding emb, SparseEmbedding::over(table));
  TESSEL_ASSIGN_OR_RETURN(LazyAdamW lazy, LazyAdamW::create(emb, {.lr = o.lr}));
  for (int step = 0; step < o.warmup + o.steps; ++step) {
    Pcg32 rng(o.seed, 100 + static_cast<uint64_t>(step));
    std::vector<int64_t> ids;
    for (int64_t i = 0; i < o.batch * o.tokens; ++i)
      ids.push_back(sampler.draw(rng));
    const std::vector<int64_t> contiguous = first_seen_ranks(ids, o.vocabulary);
    for (int turn = 0; turn < 2; ++turn) {
      const bool scattered = (turn + step) % 2 == 0;
      TESSEL_ASSIGN_OR_RETURN(
          Tensor t, Tensor::from_vector(scattered ? ids : contiguous, {o.batch, o.tokens}, device));
      TESSEL_ASSIGN_OR_RETURN(Variable e, emb.forward(t));
      TESSEL_ASSIGN_OR_RETURN(Tensor g, Tensor::full(e.shape(), 1e-3, DType::kF32, device));
      TESSEL_TRY(e.backward(std::move(g)));
      const double start = cpu_ms();
      TESSEL_TRY(lazy.step(emb));
      const double ms = cpu_ms() - start;
      emb.zero_grad();
      if (step >= o.warmup)
        (scattered ? r.scattered_rows_cpu_ms : r.contiguous_rows_cpu_ms).push_back(ms);
    }
  }
  return ok_status();
}

}  // namespace

double EmbeddingStepReport::median_dense_ms() const {
  return median(dense_ms);
}
double EmbeddingStepReport::median_sparse_ms() const {
  return median(sparse_ms);
}

Expected<EmbeddingStepReport> compare_embedding_steps(const EmbeddingStepOptions& options) {
  EmbeddingStepReport r;
  r.options = options;
  const EmbeddingStepOptions& o = options;
  Device* device = o.device ? o.device : cpu_device();
  r.load_before = load_now();

  Table dense_model(o.vocabulary, o.dim);
  Pcg32 rng(o.seed);
  TESSEL_ASSIGN_OR_RETURN(nn::FlatParameters dense_flat,
                          nn::FlatParameters::create(dense_model, device, rng));
  TESSEL_ASSIGN_OR_RETURN(auto dense_opt, optim::AdamW::create(dense_flat, {.lr = o.lr}));
  // The sparse table starts from the dense one's weights; the targets are another N(0, 1) table.
  TESSEL_ASSIGN_OR_RETURN(Tensor table, dense_model.emb().weight().variable.data().contiguous());
  TESSEL_ASSIGN_OR_RETURN(Tensor own_table, Tensor::empty(table.shape(), DType::kF32, device));
  TESSEL_TRY(own_table.copy_from(table));
  TESSEL_ASSIGN_OR_RETURN(SparseEmbedding emb, SparseEmbedding::over(own_table));
  TESSEL_ASSIGN_OR_RETURN(LazyAdamW lazy, LazyAdamW::create(emb, {.lr = o.lr}));
  TESSEL_ASSIGN_OR_RETURN(SparseEmbedding target_table,
                          SparseEmbedding::create(o.vocabulary, o.dim, device, rng));

  // One step of each: (timed) lookup, (untimed) loss and its gradient, (timed) backward of the
  // table, optimizer, zero. Returns the loss; adds the timed wall and CPU ms.
  struct Times {
    double wall = 0, cpu = 0;
  };
  auto timed = [](Times& t, const std::function<Status()>& fn) -> Status {
    auto start = std::chrono::steady_clock::now();
    double cpu = cpu_ms();
    Status s = fn();
    t.wall += ms_since(start);
    t.cpu += cpu_ms() - cpu;
    return s;
  };
  auto dense_step = [&](const Batch& b, Times& t) -> Expected<double> {
    Variable e;
    TESSEL_TRY(timed(t, [&]() -> Status {
      TESSEL_ASSIGN_OR_RETURN(e, dense_model.forward(Variable(b.ids)));
      return ok_status();
    }));
    TESSEL_ASSIGN_OR_RETURN(Loss loss, mse(e.data(), b.targets));
    TESSEL_TRY(timed(t, [&]() -> Status {
      TESSEL_TRY(e.backward(std::move(loss.grad)));
      TESSEL_TRY(dense_opt->step());
      return dense_flat.zero_grad();
    }));
    return loss.value;
  };
  auto sparse_step = [&](const Batch& b, Times& t) -> Expected<double> {
    Variable e;
    TESSEL_TRY(timed(t, [&]() -> Status {
      TESSEL_ASSIGN_OR_RETURN(e, emb.forward(b.ids));
      return ok_status();
    }));
    TESSEL_ASSIGN_OR_RETURN(Loss loss, mse(e.data(), b.targets));
    TESSEL_TRY(timed(t, [&]() -> Status {
      TESSEL_TRY(e.backward(std::move(loss.grad)));
      TESSEL_TRY(lazy.step(emb));
      emb.zero_grad();
      return ok_status();
    }));
    r.mean_touched_rows += static_cast<double>(emb.grad_indices().numel());
    return loss.value;
  };
  const int total = o.warmup + o.steps;
  const IdSampler sampler(o);
  for (int step = 0; step < total; ++step) {
    TESSEL_ASSIGN_OR_RETURN(Batch batch, make_batch(o, sampler, step, target_table.weight()));
    Times dense, sparse;
    TESSEL_ASSIGN_OR_RETURN(double dl, dense_step(batch, dense));
    TESSEL_ASSIGN_OR_RETURN(double sl, sparse_step(batch, sparse));
    const double dense_ms = dense.wall, dense_cpu = dense.cpu;
    const double sparse_ms = sparse.wall, sparse_cpu = sparse.cpu;
    r.dense_loss.push_back(dl);
    r.sparse_loss.push_back(sl);
    if (step >= o.warmup) {
      r.dense_ms.push_back(dense_ms);
      r.sparse_ms.push_back(sparse_ms);
      r.dense_cpu_ms.push_back(dense_cpu);
      r.sparse_cpu_ms.push_back(sparse_cpu);
    }
  }
  r.mean_touched_rows /= total;
  TESSEL_TRY(time_row_layouts(o, sampler, device, r));
  r.load_after = load_now();
  return r;
}

std::string EmbeddingStepReport::ids_label() const {
  return options.zipf > 0 ? fmt::format("Zipf ids, s = {}", options.zipf) : "uniform ids";
}

std::string EmbeddingStepReport::to_text() const {
  const EmbeddingStepOptions& o = options;
  std::string out = fmt::format(
      "# embedding step: V = {}, C = {}, batch {} x {} tokens ({}), MSE to per-id targets, "
      "AdamW lr {}; {} warm-up then {} timed steps of each, taking turns; load {} -> {}\n",
      o.vocabulary, o.dim, o.batch, o.tokens, ids_label(), o.lr, o.warmup, o.steps, load_before,
      load_after);
  out += fmt::format("{:<28} {:>10} {:>10} {:>12} {:>12}\n", "gradient", "step ms", "CPU ms",
                     "first loss", "last loss");
  out +=
      fmt::format("{:<28} {:>10.1f} {:>10.1f} {:>12.4f} {:>12.4f}\n", "dense (AdamW)",
                  median_dense_ms(), median(dense_cpu_ms), dense_loss.front(), dense_loss.back());
  out += fmt::format("{:<28} {:>10.1f} {:>10.1f} {:>12.4f} {:>12.4f}\n", "sparse rows (lazy AdamW)",
                     median_sparse_ms(), median(sparse_cpu_ms), sparse_loss.front(),
                     sparse_loss.back());
  out += fmt::format(
      "# sparse / dense speed-up {:.2f}x wall, {:.2f}x CPU; {:.0f} distinct rows "
      "per step of {}\n",
      median_dense_ms() / median_sparse_ms(), median(dense_cpu_ms) / median(sparse_cpu_ms),
      mean_touched_rows, o.vocabulary);
  out += fmt::format(
      "# the lazy AdamW step alone on the same rows and gradients: scattered {:.2f} ms CPU, "
      "laid out contiguously {:.2f} ms: scattered rows cost {:.2f}x\n# losses by step "
      "(dense / sparse):",
      median(scattered_rows_cpu_ms), median(contiguous_rows_cpu_ms),
      median(scattered_rows_cpu_ms) / median(contiguous_rows_cpu_ms));
  // Every step of a short run; 16 evenly spaced ones (and the last) of a long one.
  const size_t n = dense_loss.size(), every = std::max<size_t>(1, (n + 15) / 16);
  for (size_t i = 0; i < n; ++i)
    if (i % every == 0 || i + 1 == n)
      out += fmt::format(" {}: {:.4f}/{:.4f}", i, dense_loss[i], sparse_loss[i]);
  return out + "\n";
}

std::string EmbeddingStepReport::to_json() const {
  nlohmann::json j = {{"op", "embedding_step"},
                      {"vocabulary", options.vocabulary},
                      {"dim", options.dim},
                      {"batch", options.batch},
                      {"tokens", options.tokens},
                      {"ids", options.zipf > 0 ? "zipf" : "uniform"},
                      {"zipf", options.zipf},
                      {"dense_ms", median_dense_ms()},
                      {"sparse_ms", median_sparse_ms()},
                      {"speedup", median_dense_ms() / median_sparse_ms()},
                      {"dense_cpu_ms", median(dense_cpu_ms)},
                      {"sparse_cpu_ms", median(sparse_cpu_ms)},
                      {"dense_loss", dense_loss},
                      {"sparse_loss", sparse_loss},
                      {"touched_rows", mean_touched_rows},
                      {"lazy_scattered_cpu_ms", median(scattered_rows_cpu_ms)},
                      {"lazy_contiguous_cpu_ms", median(contiguous_rows_cpu_ms)},
                      {"load_before", load_before},
                      {"load_after", load_after}};
  return j.dump();
}

}  // namespace tessel::sparse
