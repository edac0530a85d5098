// A small graph convolutional network (Kipf and Welling) on a synthetic graph whose degrees
// follow a power law: the sparse x dense product in training, with the adjacency planned like any
// sparse operand (sparse/planner.h). examples/gcn runs it; sparse/gcn_test.cpp checks it learns.
//
//   Graph g = make_power_law_graph({.nodes = 2000}).value();
//   Gcn model(g.features.size(1), 32, g.classes);
//   GcnReport r = train_gcn(model, g, {.steps = 100}).value();
//
// Graph: Chung-Lu with weights w_i ~ (i + 1)^(-1 / (gamma - 1)), so degrees follow a power law
// with exponent gamma; each node has a class, and an edge stays inside its class with probability
// `homophily`. Features: a noisy one-hot of the class (signal + N(0, 1) noise per dimension), so
// a node alone is hard to classify and its neighbourhood helps. The adjacency used is
// A_hat = D^-1/2 (A + I) D^-1/2 (symmetric, with self-loops). Nodes are split into training and
// test halves at random; the loss ignores the test half.
#pragma once

#include <string>
#include <vector>

#include "nn/layers.h"
#include "sparse/sparse_matrix.h"

namespace tessel::sparse {

using autograd::Variable;

struct GraphOptions {
  int64_t nodes = 2000;
  int64_t classes = 4;
  int64_t features = 16;
  double mean_degree = 8;
  double gamma = 2.5;      // degree exponent
  double homophily = 0.8;  // fraction of edges inside a class
  double signal = 0.6;     // feature signal against unit noise
  uint64_t seed = 1;
  Device* device = nullptr;  // default: the CPU
};

struct Graph {
  SparseMatrix adjacency;  // A_hat, CSR [nodes, nodes]
  Tensor features;         // [nodes, features] f32
  Tensor train_labels;     // [nodes] i64, -100 on test nodes (cross_entropy's ignore_index)
  std::vector<int64_t> labels;
  std::vector<bool> is_test;
  int64_t classes = 0;
  int64_t edges = 0;       // undirected, without self-loops
  int64_t max_degree = 0;
  std::string describe() const;
};

Expected<Graph> make_power_law_graph(const GraphOptions& options);

// Two graph convolutions: A_hat relu(A_hat X W1) W2 (+ biases).
class Gcn : public nn::Module {
 public:
  Gcn(int64_t features, int64_t hidden, int64_t classes);
  Expected<Variable> forward_graph(const SparseMatrix& adjacency, const Variable& x);
  std::string type_name() const override { return "Gcn"; }

 private:
  nn::Linear* layer1_;
  nn::Linear* layer2_;
};

struct GcnTrainOptions {
  int steps = 100;
  double lr = 0.01;
  double weight_decay = 5e-4;
};

struct GcnReport {
  std::vector<double> losses;     // every step
  double train_accuracy = 0, test_accuracy = 0;
};

// Full-batch AdamW on the training nodes; accuracy at the end.
Expected<GcnReport> train_gcn(Gcn& model, const Graph& graph, const GcnTrainOptions& options);

}  // namespace tessel::sparse
