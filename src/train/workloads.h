// The reference training workloads of shared/WORKLOADS.md, built in tessel, so a benchmark (`tessel
// bench train`) and its tests run exactly the model, batch and step the table names.
//
//   TESSEL_ASSIGN_OR_RETURN(auto run, WorkloadRun::create("mlp", cpu_device(), /*seed=*/1));
//   for (int i = 0; i < 10; ++i) TESSEL_TRY(run->step());    // forward, loss, backward, AdamW
//   double samples_per_s = run->spec().items_per_step / seconds_per_step;
//
// A step is forward, cross-entropy loss, backward, AdamW (lr 1e-3, PyTorch's defaults otherwise)
// and zeroing the gradients; the batch is made once from the seed (normal inputs, uniform class
// or token targets) and stays on the device, so no data loading is timed. f32 throughout.
// tools/pytorch/bench_train.py builds the same workloads in PyTorch: keep the two in step.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "autograd/variable.h"
#include "nn/module.h"
#include "optim/optimizer.h"
#include "runtime/device.h"

namespace tessel::train {

struct WorkloadSpec {
  std::string name;        // "mlp", "cnn", "gpt_tiny", ...
  std::string model;       // what WORKLOADS.md says, in a few words
  Shape input_shape;       // of one batch, e.g. {128, 1, 28, 28} or {12, 64} (token ids)
  int64_t items_per_step;  // samples or tokens a step consumes
  std::string unit;        // "samples/s" or "tokens/s"
};

// Every workload of WORKLOADS.md, in its order.
const std::vector<WorkloadSpec>& workload_specs();
// The spec of `name`; an unknown name lists the known ones.
Expected<WorkloadSpec> find_workload(const std::string& name);

class WorkloadRun {
 public:
  // Builds the model, its flat parameters (initialised from `seed`), AdamW and the batch on
  // `device`. `batch_rows` > 0 replaces the table's batch (the memory plan records small batches
  // of the same workload); the spec then says that batch.
  static Expected<std::unique_ptr<WorkloadRun>> create(const std::string& name, Device* device,
                                                       uint64_t seed, int64_t batch_rows = 0);
  // One training step. The loss is kept as a device tensor (reading it back is the caller's
  // choice: last_loss()).
  Status step();
  Expected<double> last_loss() const;
  // Forward and the mean loss over rows [begin, end) of the batch, for a data-parallel rank that
  // computes a part of it (`tessel bench hetero`); no backward, no optimizer.
  Expected<autograd::Variable> loss_of_rows(int64_t begin, int64_t end);
  // Rows of the batch (samples; sequences for the GPT workloads).
  int64_t batch_rows() const { return spec_.input_shape.at(0); }
  nn::FlatParameters& parameters() { return *params_; }
  optim::AdamW& optimizer() { return *optimizer_; }
  const Tensor& inputs() const { return inputs_; }
  const Tensor& targets() const { return targets_; }

  const WorkloadSpec& spec() const { return spec_; }
  nn::Module& model() { return *model_; }
  // Trainable elements (not counting the flat buffers' alignment padding or module buffers).
  int64_t parameter_count() const;

 private:
  WorkloadRun() = default;

  WorkloadSpec spec_;
  std::unique_ptr<nn::Module> model_;
  std::unique_ptr<nn::FlatParameters> params_;
  std::unique_ptr<optim::AdamW> optimizer_;
  Tensor inputs_;
  Tensor targets_;
  Tensor last_loss_;
};

}  // namespace tessel::train
