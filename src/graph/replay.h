// Running training steps with fusion: the first step is captured (graph.h) while it runs
// eagerly, the fusion pass plans groups (fusion.h), and later steps are replayed with them.
//
//   graph::FusedSteps fused;
//   for (...) TESSEL_TRY(fused.run([&] { return run->step(); }));
//
// Replay runs the step's own code again; only the launches are watched. Each one is compared
// with the captured node at its position (kernel, parameters, shapes, strides, dtypes). A launch
// inside a fused group is held back (its output is an intermediate nobody else reads); at the
// group's last launch the generated kernel runs instead, on the tensors the held launches were
// given, after checking each intermediate is still the view its consumer reads. A step that
// leaves the captured sequence (a shape changed, a different path) runs what it held back
// eagerly at that point, finishes eagerly, and the next step is captured again; an epilogue
// producer that was held back at that point is not made a producer again (holding its output
// can change what autograd does: a leaf copies a gradient something else holds).
#pragma once

#include <functional>
#include <memory>

#include "graph/fusion.h"
#include "graph/graph.h"

namespace tessel::graph {

class FusedSteps {
 public:
  FusedSteps();
  ~FusedSteps();
  FusedSteps(FusedSteps&&) noexcept;
  FusedSteps& operator=(FusedSteps&&) noexcept;

  // One step: captured eagerly the first time (and after a step that left the graph), else
  // replayed with the fused kernels.
  Status run(const std::function<Status()>& step);

  // The last capture and its plan (nullptr before the first step).
  const Graph* graph() const;
  const FusionPlan* plan() const;

  struct Stats {
    int captures = 0;
    int replays = 0;             // steps that followed the graph to the end
    int diverged = 0;            // steps that left it (run eagerly from there)
    int64_t fused_launches = 0;  // generated kernels launched
    int64_t launches_saved = 0;  // element-wise launches they replaced, less themselves
  };
  const Stats& stats() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace tessel::graph
