// The dense- vs sparse-gradient embedding step (see embedding_step.h).
#include "sparse/embedding_step.h"

#include <cstdlib>
#include <algorithm>
#include <chrono>
#include <cmath>

#include <nlohmann/json.hpp>

#include "autograd/functional.h"
#include "nn/layers.h"
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

// emb -> mean over tokens -> head: the dense-gradient model.
class BagClassifier : public nn::Module {
 public:
  BagClassifier(int64_t v, int64_t c, int64_t classes) {
    emb_ = &register_module("emb", std::make_unique<nn::Embedding>(v, c));
    head_ = &register_module("head", std::make_unique<nn::Linear>(c, classes));
  }
  Expected<Variable> forward(const Variable& ids) override {
    TESSEL_ASSIGN_OR_RETURN(Variable e, emb_->forward(ids));
    TESSEL_ASSIGN_OR_RETURN(Variable bag, autograd::mean(e, {1}));
    return head_->forward(bag);
  }
  std::string type_name() const override { return "BagClassifier"; }
  nn::Embedding& emb() { return *emb_; }
  nn::Linear& head() { return *head_; }

 private:
  nn::Embedding* emb_;
  nn::Linear* head_;
};

// Only the head: the sparse model's dense part.
class Head : public nn::Module {
 public:
  Head(int64_t c, int64_t classes) {
    head_ = &register_module("head", std::make_unique<nn::Linear>(c, classes));
  }
  std::string type_name() const override { return "Head"; }
  nn::Linear& head() { return *head_; }

 private:
  nn::Linear* head_;
};

struct Batch {
  Tensor ids, targets;
};

Expected<Batch> make_batch(const EmbeddingStepOptions& o, int step, Device* device) {
  Pcg32 rng(o.seed, 100 + static_cast<uint64_t>(step));
  std::vector<int64_t> ids, targets;
  const uint64_t per_class = static_cast<uint64_t>(o.vocabulary / o.classes);
  for (int64_t b = 0; b < o.batch; ++b) {
    int64_t c = rng.below(static_cast<uint32_t>(o.classes));
    targets.push_back(c);
    for (int64_t t = 0; t < o.tokens; ++t)
      ids.push_back(c + o.classes * static_cast<int64_t>(rng.below_u64(per_class)));
  }
  Batch batch;
  TESSEL_ASSIGN_OR_RETURN(batch.ids, Tensor::from_vector(ids, {o.batch, o.tokens}, device));
  TESSEL_ASSIGN_OR_RETURN(batch.targets, Tensor::from_vector(targets, {o.batch}, device));
  return batch;
}

double ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

}  // namespace

double EmbeddingStepReport::median_dense_ms() const { return median(dense_ms); }
double EmbeddingStepReport::median_sparse_ms() const { return median(sparse_ms); }

Expected<EmbeddingStepReport> compare_embedding_steps(const EmbeddingStepOptions& options) {
  EmbeddingStepReport r;
  r.options = options;
  const EmbeddingStepOptions& o = options;
  Device* device = o.device ? o.device : cpu_device();
  r.load_before = load_now();

  BagClassifier dense_model(o.vocabulary, o.dim, o.classes);
  Pcg32 rng(o.seed);
  TESSEL_ASSIGN_OR_RETURN(nn::FlatParameters dense_flat,
                          nn::FlatParameters::create(dense_model, device, rng));
  TESSEL_ASSIGN_OR_RETURN(auto dense_opt, optim::AdamW::create(dense_flat, {.lr = o.lr}));

  // The sparse model starts from the dense one's weights.
  Head sparse_head(o.dim, o.classes);
  Pcg32 rng2(o.seed);
  TESSEL_ASSIGN_OR_RETURN(nn::FlatParameters head_flat,
                          nn::FlatParameters::create(sparse_head, device, rng2));
  Tensor head_weight = sparse_head.head().weight().variable.data();
  Tensor head_bias = sparse_head.head().bias()->variable.data();
  TESSEL_TRY(head_weight.copy_from(dense_model.head().weight().variable.data()));
  TESSEL_TRY(head_bias.copy_from(dense_model.head().bias()->variable.data()));
  TESSEL_ASSIGN_OR_RETURN(auto head_opt, optim::AdamW::create(head_flat, {.lr = o.lr}));
  TESSEL_ASSIGN_OR_RETURN(Tensor table, dense_model.emb().weight().variable.data().contiguous());
  TESSEL_ASSIGN_OR_RETURN(Tensor own_table, Tensor::empty(table.shape(), DType::kF32, device));
  TESSEL_TRY(own_table.copy_from(table));
  TESSEL_ASSIGN_OR_RETURN(SparseEmbedding emb, SparseEmbedding::over(own_table));
  TESSEL_ASSIGN_OR_RETURN(LazyAdamW lazy, LazyAdamW::create(emb, {.lr = o.lr}));

  auto dense_step = [&](const Batch& b) -> Expected<double> {
    TESSEL_ASSIGN_OR_RETURN(Variable logits, dense_model.forward(Variable(b.ids)));
    TESSEL_ASSIGN_OR_RETURN(Variable loss, autograd::cross_entropy(logits, Variable(b.targets)));
    TESSEL_TRY(loss.backward());
    TESSEL_TRY(dense_opt->step());
    TESSEL_TRY(dense_flat.zero_grad());
    TESSEL_ASSIGN_OR_RETURN(std::vector<float> l, loss.data().to_vector<float>());
    return l[0];
  };
  auto sparse_step = [&](const Batch& b) -> Expected<double> {
    TESSEL_ASSIGN_OR_RETURN(Variable e, emb.forward(b.ids));
    TESSEL_ASSIGN_OR_RETURN(Variable bag, autograd::mean(e, {1}));
    TESSEL_ASSIGN_OR_RETURN(Variable logits, sparse_head.head().forward(bag));
    TESSEL_ASSIGN_OR_RETURN(Variable loss, autograd::cross_entropy(logits, Variable(b.targets)));
    TESSEL_TRY(loss.backward());
    TESSEL_TRY(lazy.step(emb));
    TESSEL_TRY(head_opt->step());
    r.mean_touched_rows += static_cast<double>(emb.grad_indices().numel());
    emb.zero_grad();
    TESSEL_TRY(head_flat.zero_grad());
    TESSEL_ASSIGN_OR_RETURN(std::vector<float> l, loss.data().to_vector<float>());
    return l[0];
  };
  const int total = o.warmup + o.steps;
  for (int step = 0; step < total; ++step) {
    TESSEL_ASSIGN_OR_RETURN(Batch batch, make_batch(o, step, device));
    auto start = std::chrono::steady_clock::now();
    TESSEL_ASSIGN_OR_RETURN(double dl, dense_step(batch));
    double dense_ms = ms_since(start);
    start = std::chrono::steady_clock::now();
    TESSEL_ASSIGN_OR_RETURN(double sl, sparse_step(batch));
    double sparse_ms = ms_since(start);
    r.dense_loss.push_back(dl);
    r.sparse_loss.push_back(sl);
    if (step >= o.warmup) {
      r.dense_ms.push_back(dense_ms);
      r.sparse_ms.push_back(sparse_ms);
    }
  }
  r.mean_touched_rows /= total;
  r.load_after = load_now();
  return r;
}

std::string EmbeddingStepReport::to_text() const {
  const EmbeddingStepOptions& o = options;
  std::string out = fmt::format(
      "# embedding step: V = {}, C = {}, batch {} x {} tokens, {} classes, AdamW lr {}; {} "
      "warm-up then {} timed steps of each, taking turns; load {} -> {}\n",
      o.vocabulary, o.dim, o.batch, o.tokens, o.classes, o.lr, o.warmup, o.steps, load_before,
      load_after);
  out += fmt::format("{:<28} {:>10} {:>12} {:>12}\n", "gradient", "step ms", "first loss",
                     "last loss");
  out += fmt::format("{:<28} {:>10.1f} {:>12.4f} {:>12.4f}\n", "dense (AdamW)", median_dense_ms(),
                     dense_loss.front(), dense_loss.back());
  out += fmt::format("{:<28} {:>10.1f} {:>12.4f} {:>12.4f}\n", "sparse rows (lazy AdamW)",
                     median_sparse_ms(), sparse_loss.front(), sparse_loss.back());
  out += fmt::format("# sparse / dense speed-up {:.2f}x; {:.0f} distinct rows per step of {}; "
                     "losses per step (dense / sparse):",
                     median_dense_ms() / median_sparse_ms(), mean_touched_rows, o.vocabulary);
  for (size_t i = 0; i < dense_loss.size(); ++i)
    out += fmt::format(" {:.4f}/{:.4f}", dense_loss[i], sparse_loss[i]);
  return out + "\n";
}

std::string EmbeddingStepReport::to_json() const {
  nlohmann::json j = {{"op", "embedding_step"},
                      {"vocabulary", options.vocabulary},
                      {"dim", options.dim},
                      {"batch", options.batch},
                      {"tokens", options.tokens},
                      {"dense_ms", median_dense_ms()},
                      {"sparse_ms", median_sparse_ms()},
                      {"speedup", median_dense_ms() / median_sparse_ms()},
                      {"dense_loss", dense_loss},
                      {"sparse_loss", sparse_loss},
                      {"touched_rows", mean_touched_rows},
                      {"load_before", load_before},
                      {"load_after", load_after}};
  return j.dump();
}

}  // namespace tessel::sparse
