// What the memory plan records (memory_plan.h): a training config's step, as `tessel train` runs
// it in one process, and a reference workload's step (train/workloads.h).
#include <memory>

#include "autograd/autocast.h"
#include "optim/clip.h"
#include "plan/memory_plan.h"
#include "support/random.h"
#include "train/data_source.h"
#include "train/model_registry.h"
#include "train/train_config.h"
#include "train/trainer.h"
#include "train/workloads.h"

namespace tessel::plan {
namespace {

using autograd::Variable;

std::vector<Tensor> flat_values(nn::Module& model, const nn::FlatParameters& params) {
  std::vector<Tensor> out;
  for (const nn::FlatParameters::Group& g : params.groups())
    out.push_back(g.values);
  for (auto& [name, buffer] : model.named_buffers())
    out.push_back(buffer->tensor);
  return out;
}

std::vector<Tensor> flat_grads(const nn::FlatParameters& params) {
  std::vector<Tensor> out;
  for (const nn::FlatParameters::Group& g : params.groups())
    out.push_back(g.grads);
  return out;
}

// The trainer's step (train/trainer.cpp) without what one process does not need for memory:
// the config's model, optimizer, precision and clipping on the first batch of its data.
class ConfigStep : public PlannedStep {
 public:
  const train::TrainConfig* config = nullptr;
  std::unique_ptr<train::DataSource> data;
  std::unique_ptr<nn::Module> model;
  std::unique_ptr<nn::FlatParameters> params;
  std::unique_ptr<optim::Optimizer> optimizer;
  Tensor inputs, targets;

  // The trainer's evaluation of one batch (Trainer::evaluate): made, run in eval mode without
  // gradients, and dropped.
  Expected<Variable> eval_loss() override {
    TESSEL_ASSIGN_OR_RETURN(std::unique_ptr<BatchSource> batches, data->eval_batches());
    TESSEL_ASSIGN_OR_RETURN(Batch batch, batches->next());
    TESSEL_ASSIGN_OR_RETURN(Tensor x, batch.inputs.to(model_device()));
    TESSEL_ASSIGN_OR_RETURN(Tensor y, batch.targets.to(model_device()));
    autograd::NoGrad no_grad;
    autograd::Autocast autocast(config->compute_dtype());
    model->eval();
    Expected<Variable> logits = (*model)(Variable(x));
    model->train();
    if (!logits.ok()) return logits.status();
    return train::training_loss(*logits, Variable(y));
  }
  Device* model_device() const { return params->device(); }
  Expected<Variable> loss() override {
    autograd::Autocast autocast(config->compute_dtype());
    TESSEL_ASSIGN_OR_RETURN(Variable logits, (*model)(Variable(inputs)));
    return train::training_loss(logits, Variable(targets));
  }
  Status update() override {
    if (config->clip_grad_norm > 0)
      TESSEL_TRY(optim::clip_grad_norm(*params, config->clip_grad_norm).status());
    TESSEL_TRY(optimizer->step());
    return params->zero_grad();
  }
  std::vector<Tensor> parameter_tensors() override { return flat_values(*model, *params); }
  std::vector<Tensor> gradient_tensors() override { return flat_grads(*params); }
  std::vector<Tensor> batch_tensors() override { return {inputs, targets}; }
  // The trainer's Prefetcher holds up to 4 ready batches, and its thread makes the next one.
  int queued_batches() const override { return 4 + 1; }
};

class ConfigTarget : public MemoryPlanTarget {
 public:
  ConfigTarget(const train::TrainConfig& config, Device* device)
      : config_(config), device_(device) {}
  std::string name() const override { return config_.source; }
  int64_t batch() const override { return config_.data.batch_size; }
  int64_t eval_batch() const override { return config_.data.eval_batch_size; }
  Device* device() const override { return device_; }

  Expected<std::unique_ptr<PlannedStep>> build(
      int64_t batch, const std::function<void(MemoryPhase)>& phase) override {
    const train::TrainConfig& c = config_;
    auto s = std::make_unique<ConfigStep>();
    s->config = &config_;
    phase(MemoryPhase::kData);
    train::DataConfig data = c.data;
    data.batch_size = batch;
    data.eval_batch_size = batch;
    TESSEL_ASSIGN_OR_RETURN(s->data, train::DataSource::open(data, c.seed, c.source));
    {
      TESSEL_ASSIGN_OR_RETURN(std::unique_ptr<BatchSource> batches, s->data->train_batches());
      TESSEL_ASSIGN_OR_RETURN(Batch first, batches->next());
      TESSEL_ASSIGN_OR_RETURN(s->inputs, first.inputs.to(device_));
      TESSEL_ASSIGN_OR_RETURN(s->targets, first.targets.to(device_));
    }

    phase(MemoryPhase::kModel);
    train::ModelContext context{
        .input_shape = s->data->example_shape(), .classes = s->data->classes(), .seed = c.seed};
    TESSEL_ASSIGN_OR_RETURN(s->model, train::make_model(*c.model, context));
    Pcg32 init_rng(c.seed, 1);
    TESSEL_ASSIGN_OR_RETURN(nn::FlatParameters params,
                            nn::FlatParameters::create(*s->model, device_, init_rng));
    s->params = std::make_unique<nn::FlatParameters>(std::move(params));
    phase(MemoryPhase::kOptimizer);
    if (c.optimizer.name == "sgd") {
      TESSEL_ASSIGN_OR_RETURN(s->optimizer, optim::Sgd::create(*s->params, c.optimizer.sgd));
    } else {
      TESSEL_ASSIGN_OR_RETURN(s->optimizer, optim::AdamW::create(*s->params, c.optimizer.adamw));
    }
    s->model->train();
    return std::unique_ptr<PlannedStep>(std::move(s));
  }

 private:
  const train::TrainConfig& config_;
  Device* device_;
};

class WorkloadStep : public PlannedStep {
 public:
  std::unique_ptr<train::WorkloadRun> run;
  DType compute = DType::kF32;
  Expected<Variable> loss() override {
    autograd::Autocast autocast(compute);
    return run->loss_of_rows(0, run->batch_rows());
  }
  Status update() override {
    TESSEL_TRY(run->optimizer().step());
    return run->parameters().zero_grad();
  }
  std::vector<Tensor> parameter_tensors() override {
    return flat_values(run->model(), run->parameters());
  }
  std::vector<Tensor> gradient_tensors() override { return flat_grads(run->parameters()); }
  std::vector<Tensor> batch_tensors() override { return {run->inputs(), run->targets()}; }
};

class WorkloadTarget : public MemoryPlanTarget {
 public:
  WorkloadTarget(train::WorkloadSpec spec, Device* device, DType compute)
      : spec_(std::move(spec)), device_(device), compute_(compute) {}
  std::string name() const override { return spec_.name; }
  int64_t batch() const override { return spec_.input_shape.at(0); }
  Device* device() const override { return device_; }
  // WorkloadRun::create makes the batch, the model with its flat parameters and AdamW in one
  // call: the optimizer phase covers it, and identity tells the parameters, gradients and batch
  // apart, so what is left and kept is AdamW's state.
  Expected<std::unique_ptr<PlannedStep>> build(
      int64_t batch, const std::function<void(MemoryPhase)>& phase) override {
    phase(MemoryPhase::kOptimizer);
    auto s = std::make_unique<WorkloadStep>();
    TESSEL_ASSIGN_OR_RETURN(s->run, train::WorkloadRun::create(spec_.name, device_, 1, batch));
    s->compute = compute_;
    return std::unique_ptr<PlannedStep>(std::move(s));
  }

 private:
  train::WorkloadSpec spec_;
  Device* device_;
  DType compute_;
};

}  // namespace

Expected<std::unique_ptr<MemoryPlanTarget>> config_memory_target(const train::TrainConfig& config) {
  if (!config.model) return invalid_argument("{}: the config has no [model] table", config.source);
  TESSEL_ASSIGN_OR_RETURN(ops::TargetChoice choice, train::resolve_train_target(config));
  ops::apply_target(choice);
  return std::unique_ptr<MemoryPlanTarget>(new ConfigTarget(config, choice.device));
}

Expected<std::unique_ptr<MemoryPlanTarget>> workload_memory_target(const std::string& name,
                                                                   Device* device, DType compute) {
  TESSEL_ASSIGN_OR_RETURN(train::WorkloadSpec spec, train::find_workload(name));
  return std::unique_ptr<MemoryPlanTarget>(new WorkloadTarget(std::move(spec), device, compute));
}

}  // namespace tessel::plan
