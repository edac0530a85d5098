// A training step as a graph: every kernel launch the op library made during one eager step
// (forward ops, backward rules, optimizer), in order, with the tensors each launch touched as
// values. Captured at the launch, not at ops::run, because backward rules and optimizers launch
// kernels directly; each node still names the op it ran inside.
//
//   TESSEL_ASSIGN_OR_RETURN(graph::Graph g, graph::capture_step([&] { return run->step(); }));
//   fmt::print("{}", graph::to_string(g));
//
// A value is one storage (a device buffer): a node's operand is a view of it (offset, shape,
// strides in elements). Element-wise launches (ops::launch_elementwise) read their first
// operands and write their last; what another kernel writes is read from its source (the
// tensors it stores or copies into).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "ops/kernel_cache.h"
#include "runtime/tensor.h"
#include "support/status.h"

namespace tessel::graph {

struct Value {
  DType dtype = DType::kF32;
  int64_t elements = 0;  // of the storage
  // The element-wise node that wrote it first, when the step made it; -1 when it existed
  // before the step (parameters, gradients, optimizer state, the batch) or a non-element-wise
  // kernel touched it first.
  int producer = -1;
  // Nothing outside the step held it when the step ended: a temporary of the step.
  bool temporary = false;
};

struct Operand {
  int value = -1;
  int64_t offset = 0;  // elements from the storage's start
  Shape shape;
  Strides strides;
  bool operator==(const Operand& o) const {
    return value == o.value && offset == o.offset && shape == o.shape && strides == o.strides;
  }
};

struct Node {
  std::string kernel;
  ops::KernelParams params;
  std::string op;  // the innermost ops::run it came from; "" from a backward rule or optimizer
  bool elementwise = false;
  std::vector<Operand> operands;  // element-wise: inputs, then the output
  // Per operand, whether the kernel may write it: the output of an element-wise launch; for
  // other kernels, the tensors its source stores or copies into (all, when it is not known).
  std::vector<bool> writes;
  std::vector<double> scalars;
  int num_inputs() const { return elementwise ? int(operands.size()) - 1 : int(operands.size()); }
  const Operand& output() const { return operands.back(); }
  // Kernel, parameters, operands' shapes and strides, scalar count: what replay compares.
  std::string signature;
  // How long the launch took in the capture: the kernel's run time where launches are
  // synchronous (the CPU), the time to queue it elsewhere.
  double seconds = 0;
};

struct Graph {
  std::vector<Node> nodes;
  std::vector<Value> values;
  Device* device = nullptr;  // of the first launch
};

// Runs `step` once, eagerly, on this thread and records its launches. Every storage the step
// touched is watched (not held): a buffer reused after its storage died is a new value.
Expected<Graph> capture_step(const std::function<Status()>& step);

// Node signature as Graph::Node::signature (also what replay computes for a live launch).
std::string launch_signature(const std::string& kernel, const ops::KernelParams& params,
                             const std::vector<Tensor>& tensors, size_t scalars);

// One line per node: `n12 %7 = binary{OP=0} <add> (%5[0: 128x512], %6[...])`; values with no
// producer are listed first as external. `group_of` (optional, one entry per node, -1 for none)
// marks the fused group a node belongs to.
std::string to_string(const Graph& graph, const std::vector<int>* group_of = nullptr);

// Where the captured step's launch time went, by kernel, and the element-wise launches' share:
// what fusing element-wise chains could save at most.
std::string profile_string(const Graph& graph);

}  // namespace tessel::graph
