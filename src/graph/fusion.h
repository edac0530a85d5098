// The fusion pass: chains (trees) of element-wise launches of a captured step whose
// intermediates nothing else reads become one generated tile kernel each.
//
//   graph::FusionPlan plan = graph::plan_fusion(g);
//   fmt::print("{}", graph::to_string(g, &plan.group_of));   // the graph after fusion
//
// Node a joins its consumer b when a's output is a temporary of the step (graph.h), made by a,
// (or a producer's output, read whole and in order: the chain becomes the producer's epilogue),
// read by b alone (every other node leaves its storage alone, autograd kept no reference past
// the step), through the same view a wrote; both are in fusible.h's table and all their operands
// are f32. A group's nodes need not be adjacent, but no node between its first and last may
// touch a storage the group reads unless it is an element-wise launch that only reads it: the
// fused kernel reads its inputs when the group's last node would have run.
#pragma once

#include <functional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "graph/graph.h"

namespace tessel::graph {

struct FusedGroup {
  std::vector<int> nodes;  // in step order; the last one's output is the group's
  // The kernel's tensor inputs, in its order: (node, operand) where the group first reads each
  // distinct outside operand.
  std::vector<std::pair<int, int>> inputs;
  std::vector<std::pair<int, int>> scalars;  // (node, scalar index), in the kernel's order
  // (consumer node, operand, producer node): the views that must still match at replay.
  std::vector<std::tuple<int, int, int>> edges;
  // A producer (epilogue_producers()) whose output only the group reads: the group becomes its
  // epilogue, and the node is here; -1 for a group of element-wise launches alone.
  int producer = -1;
  // One tile kernel. Element-wise: inputs, the output, the scalars. With a producer: its own
  // arguments (its output not written), then the inputs and the output as views in the
  // layout of its output, then the scalars.
  std::string source;
};

struct FusionPlan {
  std::vector<FusedGroup> groups;
  std::vector<int> group_of;  // per node: its group, or -1
};

// `no_producers`: nodes not to make epilogue producers (replay.h: ones a step left the graph
// while they were held back).
FusionPlan plan_fusion(const Graph& graph, const std::set<int>& no_producers = {});

// The group's kernel (FusedGroup::source, filled in by plan_fusion): each node's expression
// (fusible.h) as a local, in step order, over [D0, D1, D2] f32 views.
std::string generate_kernel(const Graph& graph, const FusedGroup& group);

// A kernel an element-wise chain can become the epilogue of: its source's last statement stores
// one output element, `store` + value, at `index`. The table (fusion.cpp) has gemm and
// batched_gemm (beta = 0) and batchnorm_apply.
struct EpilogueProducer {
  std::string kernel, file;
  int output;               // the operand it writes
  std::string store;        // "      C[r, c] = "
  std::string index;        // "[r, c]"
  std::string tensor_type;  // of the chain's tensors, seen in the output's layout: "U[M, N]"
  std::vector<std::string> params;  // compile-time parameters a launch may set (BIAS, ACT, BM)
  std::function<bool(const Node&)> accepts;
};
const std::vector<EpilogueProducer>& epilogue_producers();
// The entry `node` launches, when its operands are f32 and its output contiguous; else null.
const EpilogueProducer* epilogue_producer(const Graph& graph, const Node& node);

// A group with a producer: the producer's kernel text with the group's expressions after its
// own store's value, storing into a new output O; the chain's tensors follow the producer's
// parameters as views in its output's layout, then O, then the chain's scalars. "" when the
// .tile file no longer has the shape this expects.
std::string generate_epilogue(const Graph& graph, const FusedGroup& group);

}  // namespace tessel::graph
