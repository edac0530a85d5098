// The fusion pass: chains (trees) of element-wise launches of a captured step whose
// intermediates nothing else reads become one generated tile kernel each.
//
//   graph::FusionPlan plan = graph::plan_fusion(g);
//   fmt::print("{}", graph::to_string(g, &plan.group_of));   // the graph after fusion
//
// Node a joins its consumer b when a's output is a temporary of the step (graph.h), made by a,
// (or a gemm's output C, read whole and in order: the chain becomes the gemm's epilogue),
// read by b alone (every other node leaves its storage alone, autograd kept no reference past
// the step), through the same view a wrote; both are in fusible.h's table and all their operands
// are f32. A group's nodes need not be adjacent, but no node between its first and last may
// touch a storage the group reads unless it is an element-wise launch that only reads it: the
// fused kernel reads its inputs when the group's last node would have run.
#pragma once

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
  // A gemm (kernels/gemm.tile) whose output only the group reads: the group becomes its
  // epilogue, and the node is here; -1 for a group of element-wise launches alone.
  int producer = -1;
  // One tile kernel. Element-wise: inputs, the output, the scalars. With a gemm: the gemm's
  // A, B, C (not written), bias, then the inputs and the output as [M, N] views, alpha, beta,
  // the scalars.
  std::string source;
};

struct FusionPlan {
  std::vector<FusedGroup> groups;
  std::vector<int> group_of;  // per node: its group, or -1
};

FusionPlan plan_fusion(const Graph& graph);

// The group's kernel (FusedGroup::source, filled in by plan_fusion): each node's expression
// (fusible.h) as a local, in step order, over [D0, D1, D2] f32 views.
std::string generate_kernel(const Graph& graph, const FusedGroup& group);

// A group with a gemm producer: kernels/gemm.tile's gemm with the group's expressions after
// its own epilogue (alpha, bias, activation), storing into O instead of C; "" when gemm.tile
// no longer has the shape this expects.
std::string generate_gemm_epilogue(const Graph& graph, const FusedGroup& group);

// Whether `node` is a gemm launch an element-wise chain can become the epilogue of.
bool is_gemm_producer(const Graph& graph, const Node& node);

}  // namespace tessel::graph
