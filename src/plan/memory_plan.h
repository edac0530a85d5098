// The static memory plan of a training step: the peak of tensor memory at the configured batch,
// and what it is made of, known before the first real step.
//
//   auto target = plan::config_memory_target(config);            // or workload_memory_target
//   TESSEL_ASSIGN_OR_RETURN(plan::MemoryPlan p, plan::plan_memory(*target));
//   p.peak_bytes          // the caching allocator's peak of live blocks at the configured batch
//   p.predicted_rss_bytes // the process's peak resident memory: reserved blocks + overhead
//   fmt::print("{}", plan::describe(p));
//
// How: the target is built and stepped twice (forward + loss, backward, optimizer step, zeroing
// the gradients) at small batches while an allocation observer (runtime/allocation_observer.h)
// records every allocate and release of the device's caching allocator, in order, with the phase
// (data, model, optimizer, forward, backward, update), the innermost module (nn/module_scope.h)
// and op (ops/op_scope.h) that made it. The program makes the same allocations at every batch,
// only their sizes change, so the traces of two batches b1 < b2 line up event by event and each
// size is a line in the batch: s(B) = s(b1) + (s(b2) - s(b1)) (B - b1) / (b2 - b1). A third,
// checking batch says where that is not so (a size that is not linear in the batch). The sizes
// at B are then replayed through the caching allocator's rules (size classes; a released block is
// cached and reused only by its class): liveness over the recorded step gives the peak of live
// blocks and of blocks held (live + cached), and the breakdown of what is live at the peak.
// Configured batches of at most the largest recording batch are recorded directly (no scaling).
//
// What an allocation is: the flat parameter values and module buffers (parameters), the flat
// gradients (gradients), what the optimizer made and keeps (optimizer state), the data set and
// the batch (data), what forward made that is still alive when forward ends (activations: saved
// for backward, by layer), and everything else (workspace: temporaries, activation gradients).
//
// Resident memory: the replay also follows which pages of each held block were ever written
// (whole pages of the largest tensor a block held; a size class's tail never is). Not covered by
// the trace, and measured rather than guessed: the process's resident memory outside the
// allocator's blocks (code, libraries, kernels loaded, each thread's kernel scratch, the host
// heap): the overhead, current RSS after the recordings less what the recordings (replayed with
// their own sizes, each followed by its teardown) left resident in the allocator's blocks. The
// predicted peak RSS is the resident tensor bytes at the configured batch plus that overhead.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "autograd/variable.h"
#include "runtime/device.h"
#include "support/status.h"

namespace tessel::train {
struct TrainConfig;
}

namespace tessel::plan {

enum class MemoryPhase { kData, kModel, kOptimizer, kForward, kBackward, kUpdate, kEval };
enum class MemoryKind { kParameters, kGradients, kOptimizerState, kData, kActivations, kWorkspace };
const char* memory_kind_name(MemoryKind kind);

// One training step built at some batch, for the plan to record.
class PlannedStep {
 public:
  virtual ~PlannedStep() = default;
  // Forward and the loss.
  virtual Expected<autograd::Variable> loss() = 0;
  // What follows backward: clipping, the optimizer step, zeroing the gradients.
  virtual Status update() = 0;
  // The buffers that are parameters and gradients (flat values and module buffers; flat
  // gradients), told apart by identity since both are made in the model phase.
  virtual std::vector<Tensor> parameter_tensors() = 0;
  virtual std::vector<Tensor> gradient_tensors() = 0;
  // The batch (inputs, targets), and how many more batches a run holds beside the one in use (a
  // trainer's prefetch queue and the batch its thread is making): they count as data.
  virtual std::vector<Tensor> batch_tensors() = 0;
  virtual int queued_batches() const { return 0; }
  // An evaluation batch's forward and loss without gradients (the trainer's evaluation), made
  // after the steps, with the training state still held; none where the target has no
  // evaluation (eval_batch() == 0).
  virtual Expected<autograd::Variable> eval_loss() {
    return unimplemented("this target has no evaluation");
  }
};

// A training setup the plan can build at any batch.
class MemoryPlanTarget {
 public:
  virtual ~MemoryPlanTarget() = default;
  virtual std::string name() const = 0;
  virtual int64_t batch() const = 0;  // the configured batch (rows: samples or sequences)
  virtual int64_t eval_batch() const { return 0; }  // the evaluation's batch; 0: none
  virtual Device* device() const = 0;
  // Builds everything at `batch` rows (the evaluation batch too), calling `phase` as it reaches
  // the data, the model (and its flat parameters) and the optimizer.
  virtual Expected<std::unique_ptr<PlannedStep>> build(
      int64_t batch, const std::function<void(MemoryPhase)>& phase) = 0;
};

// The config's model, data, optimizer, precision and clipping, as `tessel train` would run them
// in one process (no [distributed], no [privacy]).
Expected<std::unique_ptr<MemoryPlanTarget>> config_memory_target(const train::TrainConfig& config);
// A workload of shared/WORKLOADS.md (train/workloads.h) on `device`, its step under autocast to
// `compute` (bf16/f16: 16-bit gemms and saved activations, as `tessel bench train --precision`).
Expected<std::unique_ptr<MemoryPlanTarget>> workload_memory_target(const std::string& name,
                                                                   Device* device,
                                                                   DType compute = DType::kF32);

struct MemoryPlanOptions {
  // Batches to record and scale from (two), and one to check the scaling with; the largest
  // recording batch at or above the target's batch means the target's batch is recorded as is.
  int64_t batch_low = 2, batch_high = 4, batch_check = 3;
  int steps = 2;  // steps recorded per batch
};

struct MemoryPlan {
  std::string target;
  std::string device;
  int64_t batch = 0;
  int64_t eval_batch = 0;  // the evaluation's, scaled by its own line; 0: no evaluation
  std::vector<int64_t> recorded_batches;  // in the order recorded
  bool scaled = false;                    // sizes scaled from recorded batches (else recorded)
  int64_t events = 0;                     // allocations recorded per batch

  // At the configured batch, caching allocator block bytes.
  int64_t peak_bytes = 0;           // live blocks (AllocatorStats::peak_bytes)
  int64_t reserved_peak_bytes = 0;  // live + cached blocks
  std::string peak_at;              // "step 2, backward (layer1.0.conv1, conv2d_grad_input)"
  int64_t at_peak[6] = {};          // live bytes by MemoryKind at the peak
  // What the last recorded step's forward kept for backward (alive when forward ended), in all
  // and by layer (the module path up to its first index: "layer1.0"), in the order allocated.
  int64_t saved_activation_bytes = 0;
  // Of those, the 16-bit copies a bf16/f16 autocast keeps in place of f32 activations
  // (autograd/saved_precision.h): what the `cast` op made; the rest are f32 (or the model's own).
  int64_t saved_16bit_bytes = 0;
  std::vector<std::pair<std::string, int64_t>> activations_by_layer;

  // The scaling check: at batch_check, recorded sizes against the line through the others.
  int64_t check_batch = 0;
  int64_t nonlinear_allocations = 0;  // sizes off the line
  int64_t nonlinear_bytes = 0;        // largest absolute difference of one of them
  std::string nonlinear_first;        // where the first is made

  // Of the blocks held, the bytes ever written, page by page: resident memory. A block's tail
  // past the largest tensor it held is never touched (up to 25% of a size class).
  int64_t resident_tensor_bytes = 0;
  // Resident memory outside the allocator's blocks, measured in this process after recording:
  // its RSS less what the recordings left resident in the allocator's blocks.
  int64_t overhead_bytes = 0;
  int64_t predicted_rss_bytes = 0;  // resident_tensor_bytes + overhead_bytes
};

Expected<MemoryPlan> plan_memory(MemoryPlanTarget& target, const MemoryPlanOptions& options = {});

nlohmann::json memory_plan_json(const MemoryPlan& plan);
// The breakdown for people: several lines, each ending in a newline (of a plan, or of its JSON).
std::string describe(const MemoryPlan& plan);
std::string describe(const nlohmann::json& plan);

// "512.0 KiB" below a mebibyte, "1.5 MiB" above: how the plan writes sizes.
std::string describe_bytes(int64_t bytes);

// This process's resident memory now (/proc/self/statm), in bytes; 0 where it cannot be read.
int64_t current_rss_bytes();

// The memory limit of this process's cgroup (v2 memory.max, v1 memory.limit_in_bytes); 0: none.
int64_t cgroup_memory_limit();

}  // namespace tessel::plan
