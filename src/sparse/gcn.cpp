// The power-law graph and the GCN (see gcn.h).
#include "sparse/gcn.h"

#include <algorithm>
#include <cmath>

#include "autograd/functional.h"
#include "optim/optimizer.h"
#include "sparse/functional.h"

namespace tessel::sparse {
namespace {

// An index drawn with probability proportional to weights whose running sums are `cumulative`.
int64_t draw(const std::vector<double>& cumulative, Pcg32& rng) {
  double u = static_cast<double>(rng.next_float()) * cumulative.back();
  return std::upper_bound(cumulative.begin(), cumulative.end(), u) - cumulative.begin();
}

}  // namespace

std::string Graph::describe() const {
  return fmt::format("{} nodes, {} edges (mean degree {:.1f}, max {}), {} classes",
                     adjacency.rows(), edges, 2.0 * static_cast<double>(edges) /
                                                  static_cast<double>(adjacency.rows()),
                     max_degree, classes);
}

Expected<Graph> make_power_law_graph(const GraphOptions& o) {
  if (o.nodes < 2 || o.classes < 1 || o.features < o.classes || o.mean_degree <= 0 ||
      o.gamma <= 2)
    return invalid_argument("make_power_law_graph: needs nodes >= 2, features >= classes >= 1, "
                            "mean_degree > 0 and gamma > 2");
  Device* device = o.device ? o.device : cpu_device();
  Pcg32 rng(o.seed);
  Graph g;
  g.classes = o.classes;
  std::vector<double> weight(static_cast<size_t>(o.nodes));
  for (int64_t i = 0; i < o.nodes; ++i) {
    weight[i] = std::pow(static_cast<double>(i + 1), -1.0 / (o.gamma - 1));
    g.labels.push_back(rng.below(static_cast<uint32_t>(o.classes)));
    g.is_test.push_back(rng.below(2) == 1);
  }
  // Running sums of the weights, over all nodes and per class.
  std::vector<double> all;
  std::vector<std::vector<double>> by_class(static_cast<size_t>(o.classes));
  std::vector<std::vector<int64_t>> members(static_cast<size_t>(o.classes));
  double sum = 0;
  for (int64_t i = 0; i < o.nodes; ++i) {
    sum += weight[i];
    all.push_back(sum);
    auto& c = by_class[g.labels[i]];
    c.push_back((c.empty() ? 0 : c.back()) + weight[i]);
    members[g.labels[i]].push_back(i);
  }
  std::vector<int64_t> rows, cols;
  const int64_t target = static_cast<int64_t>(o.mean_degree * static_cast<double>(o.nodes) / 2);
  for (int64_t e = 0; e < target; ++e) {
    int64_t u = draw(all, rng), v;
    if (rng.next_float() < o.homophily) {
      const int64_t c = g.labels[u];
      v = members[c][draw(by_class[c], rng)];
    } else {
      v = draw(all, rng);
    }
    if (u == v) continue;
    rows.insert(rows.end(), {u, v});
    cols.insert(cols.end(), {v, u});
  }
  for (int64_t i = 0; i < o.nodes; ++i) {  // self-loops
    rows.push_back(i);
    cols.push_back(i);
  }
  std::vector<float> ones(rows.size(), 1.0f);
  TESSEL_ASSIGN_OR_RETURN(SparseMatrix a, SparseMatrix::coo(o.nodes, o.nodes, rows, cols, ones,
                                                            cpu_device(), Duplicates::kSum));
  // A_hat: the coalesced pattern with every entry 1 / sqrt(d_i d_j), d counting the self-loop.
  const HostPattern& p = *a.pattern();
  std::vector<double> degree(static_cast<size_t>(o.nodes));
  for (int64_t r = 0; r < o.nodes; ++r) {
    degree[r] = static_cast<double>(p.indptr[r + 1] - p.indptr[r]);
    g.max_degree = std::max<int64_t>(g.max_degree, p.indptr[r + 1] - p.indptr[r] - 1);
  }
  g.edges = (p.nnz() - o.nodes) / 2;
  std::vector<float> values;
  for (int64_t r = 0; r < o.nodes; ++r)
    for (int64_t k = p.indptr[r]; k < p.indptr[r + 1]; ++k)
      values.push_back(static_cast<float>(1.0 / std::sqrt(degree[r] * degree[p.col_indices[k]])));
  TESSEL_ASSIGN_OR_RETURN(Tensor v, Tensor::from_vector(values, {p.nnz()}, device));
  TESSEL_ASSIGN_OR_RETURN(g.adjacency, SparseMatrix::from_pattern(a.pattern(), v));
  // Features and labels.
  std::vector<float> x(static_cast<size_t>(o.nodes * o.features));
  for (int64_t i = 0; i < o.nodes; ++i)
    for (int64_t f = 0; f < o.features; ++f) {
      // Box-Muller from two uniform draws.
      double u1 = std::max(1e-7, static_cast<double>(rng.next_float()));
      double u2 = static_cast<double>(rng.next_float());
      double noise = std::sqrt(-2 * std::log(u1)) * std::cos(6.283185307179586 * u2);
      x[i * o.features + f] =
          static_cast<float>(noise + (f == g.labels[i] ? o.signal : 0.0));
    }
  TESSEL_ASSIGN_OR_RETURN(g.features, Tensor::from_vector(x, {o.nodes, o.features}, device));
  std::vector<int64_t> train(g.labels);
  for (int64_t i = 0; i < o.nodes; ++i)
    if (g.is_test[i]) train[i] = -100;
  TESSEL_ASSIGN_OR_RETURN(g.train_labels, Tensor::from_vector(train, {o.nodes}, device));
  return g;
}

Gcn::Gcn(int64_t features, int64_t hidden, int64_t classes) {
  layer1_ = &register_module("layer1", std::make_unique<nn::Linear>(features, hidden));
  layer2_ = &register_module("layer2", std::make_unique<nn::Linear>(hidden, classes));
}

Expected<Variable> Gcn::forward_graph(const SparseMatrix& adjacency, const Variable& x) {
  // The adjacency's values are constants (no gradient); the planner picks its format per
  // operand width, once per pattern.
  SparseVariable a = SparseVariable::of(adjacency);
  TESSEL_ASSIGN_OR_RETURN(Variable h, layer1_->forward(x));
  TESSEL_ASSIGN_OR_RETURN(h, spmm(a, h));
  TESSEL_ASSIGN_OR_RETURN(h, autograd::relu(h));
  TESSEL_ASSIGN_OR_RETURN(Variable y, layer2_->forward(h));
  return spmm(a, y);
}

Expected<GcnReport> train_gcn(Gcn& model, const Graph& graph, const GcnTrainOptions& o) {
  Pcg32 rng(7);
  TESSEL_ASSIGN_OR_RETURN(nn::FlatParameters flat,
                          nn::FlatParameters::create(model, graph.features.device(), rng));
  TESSEL_ASSIGN_OR_RETURN(auto opt, optim::AdamW::create(
                                        flat, {.lr = o.lr, .weight_decay = o.weight_decay}));
  GcnReport r;
  Variable x(graph.features);
  Variable logits;
  for (int step = 0; step < o.steps; ++step) {
    TESSEL_ASSIGN_OR_RETURN(logits, model.forward_graph(graph.adjacency, x));
    TESSEL_ASSIGN_OR_RETURN(Variable loss,
                            autograd::cross_entropy(logits, Variable(graph.train_labels)));
    TESSEL_TRY(loss.backward());
    TESSEL_TRY(opt->step());
    TESSEL_TRY(flat.zero_grad());
    TESSEL_ASSIGN_OR_RETURN(std::vector<float> l, loss.data().to_vector<float>());
    r.losses.push_back(l[0]);
  }
  autograd::NoGrad no_grad;
  TESSEL_ASSIGN_OR_RETURN(logits, model.forward_graph(graph.adjacency, x));
  TESSEL_ASSIGN_OR_RETURN(std::vector<float> z, logits.data().to_vector<float>());
  int64_t right[2] = {0, 0}, count[2] = {0, 0};
  for (size_t i = 0; i < graph.labels.size(); ++i) {
    const float* row = &z[i * graph.classes];
    int64_t best = std::max_element(row, row + graph.classes) - row;
    right[graph.is_test[i]] += best == graph.labels[i];
    count[graph.is_test[i]] += 1;
  }
  r.train_accuracy = count[0] ? static_cast<double>(right[0]) / count[0] : 0;
  r.test_accuracy = count[1] ? static_cast<double>(right[1]) / count[1] : 0;
  return r;
}

}  // namespace tessel::sparse
