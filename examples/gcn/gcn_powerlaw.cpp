// Example: a two-layer graph convolutional network on a synthetic graph with power-law degrees
// (src/sparse/gcn.h), the sparse adjacency multiplied by dense features in training. Prints the
// graph, the planner's choice for A_hat x H (TESSEL_LOG=debug prints every plan), the loss as it
// trains and the test accuracy, next to the same network without the graph (an MLP: what the
// features alone give).
//
//   build/examples/gcn/gcn_powerlaw [nodes] [steps]
#include <cstdio>
#include <cstdlib>

#include "sparse/functional.h"
#include "sparse/gcn.h"

using namespace tessel;
using namespace tessel::sparse;

int main(int argc, char** argv) {
  GraphOptions o;
  o.nodes = argc > 1 ? std::atoll(argv[1]) : 5000;
  const int steps = argc > 2 ? std::atoi(argv[2]) : 100;
  Expected<Graph> g = make_power_law_graph(o);
  if (!g.ok()) {
    std::fprintf(stderr, "%s\n", g.status().message().c_str());
    return 1;
  }
  std::printf("graph: %s\n", g->describe().c_str());
  Expected<Plan> plan = plan_for(g->adjacency, SparseOp::kSpmm, 32, true);
  if (plan.ok()) std::printf("%s", plan->explain().c_str());
  Gcn gcn(o.features, 32, o.classes);
  Expected<GcnReport> r = train_gcn(gcn, *g, {.steps = steps});
  if (!r.ok()) {
    std::fprintf(stderr, "%s\n", r.status().message().c_str());
    return 1;
  }
  for (size_t i = 0; i < r->losses.size(); i += 10)
    std::printf("step %3zu  loss %.4f\n", i, r->losses[i]);
  std::printf("gcn: train accuracy %.3f, test accuracy %.3f\n", r->train_accuracy,
              r->test_accuracy);
  // The same layers without the graph: A_hat replaced by the identity.
  Graph alone = *g;
  std::vector<int64_t> indptr, cols;
  std::vector<float> ones;
  for (int64_t i = 0; i <= o.nodes; ++i)
    indptr.push_back(i);
  for (int64_t i = 0; i < o.nodes; ++i) {
    cols.push_back(i);
    ones.push_back(1.0f);
  }
  alone.adjacency = SparseMatrix::csr(o.nodes, o.nodes, indptr, cols, ones).value();
  Gcn mlp(o.features, 32, o.classes);
  Expected<GcnReport> m = train_gcn(mlp, alone, {.steps = steps});
  if (m.ok())
    std::printf("features only (mlp): train accuracy %.3f, test accuracy %.3f\n", m->train_accuracy,
                m->test_accuracy);
  return 0;
}
