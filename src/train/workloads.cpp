// The reference training workloads (see workloads.h).
#include "train/workloads.h"

#include <cmath>

#include "autograd/functional.h"
#include "nn/cnn.h"
#include "nn/gpt.h"
#include "nn/layers.h"
#include "nn/resnet.h"
#include "support/random.h"

namespace tessel::train {
namespace {

using autograd::Variable;

std::vector<WorkloadSpec> make_specs() {
  const nn::GptConfig tiny = nn::gpt_tiny();
  const nn::GptConfig mini = nn::gpt_mini();
  // name, model, batch input shape, items per step, unit
  // clang-format off
  return {
      {"mlp", "784-512-256-10 MLP, ReLU", {128, 1, 28, 28}, 128, "samples/s"},
      {"cnn", "2x(conv3x3+BN+ReLU+maxpool2), linear 3136-128-10", {128, 1, 28, 28}, 128,
       "samples/s"},
      {"gpt_tiny", "GPT-2 V65 T64 L4 H4 C128", {12, tiny.block_size}, 12 * tiny.block_size,
       "tokens/s"},
      {"gpt_mini", "GPT-2 V65 T256 L6 H6 C384", {8, mini.block_size}, 8 * mini.block_size,
       "tokens/s"},
      {"resnet18", "ResNet-18, CIFAR stem, 10 classes", {32, 3, 32, 32}, 32, "samples/s"},
      {"resnet50", "ResNet-50, ImageNet stem, 1000 classes", {8, 3, 224, 224}, 8, "samples/s"},
  };
  // clang-format on
}

// Standard normal values by Box-Muller from the seeded generator.
std::vector<float> normal_values(int64_t n, Pcg32& rng) {
  std::vector<float> v(static_cast<size_t>(n));
  for (size_t i = 0; i < v.size(); i += 2) {
    const double u1 = 1.0 - rng.next_float();  // (0, 1]: log stays finite
    const double u2 = rng.next_float();
    const double r = std::sqrt(-2.0 * std::log(u1));
    v[i] = static_cast<float>(r * std::cos(2.0 * M_PI * u2));
    if (i + 1 < v.size()) v[i + 1] = static_cast<float>(r * std::sin(2.0 * M_PI * u2));
  }
  return v;
}

std::vector<int64_t> uniform_ids(int64_t n, int64_t bound, Pcg32& rng) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  for (int64_t& x : v)
    x = rng.below(static_cast<uint32_t>(bound));
  return v;
}

}  // namespace

const std::vector<WorkloadSpec>& workload_specs() {
  static const std::vector<WorkloadSpec> specs = make_specs();
  return specs;
}

Expected<WorkloadSpec> find_workload(const std::string& name) {
  std::string known;
  for (const WorkloadSpec& s : workload_specs()) {
    if (s.name == name) return s;
    known += (known.empty() ? "" : ", ") + s.name;
  }
  return invalid_argument("unknown workload '{}'; known: {}", name, known);
}

Expected<std::unique_ptr<WorkloadRun>> WorkloadRun::create(const std::string& name, Device* device,
                                                           uint64_t seed, int64_t batch_rows) {
  TESSEL_ASSIGN_OR_RETURN(WorkloadSpec spec, find_workload(name));
  if (batch_rows < 0) return invalid_argument("workload {}: batch of {} rows", name, batch_rows);
  if (batch_rows > 0) {
    spec.items_per_step = spec.items_per_step / spec.input_shape[0] * batch_rows;
    spec.input_shape[0] = batch_rows;
  }
  std::unique_ptr<WorkloadRun> run(new WorkloadRun);
  run->spec_ = spec;
  const Shape& in = spec.input_shape;
  Pcg32 data_rng(seed, 2);
  int64_t classes = 10;
  if (name == "mlp") {
    run->model_ = std::make_unique<nn::MLP>(std::vector<int64_t>{784, 512, 256, 10});
  } else if (name == "cnn") {
    run->model_ = std::make_unique<nn::SmallCnn>(10);
  } else if (name == "resnet18" || name == "resnet50") {
    const bool r18 = name == "resnet18";
    classes = r18 ? 10 : 1000;
    TESSEL_ASSIGN_OR_RETURN(
        nn::ResNetConfig config,
        nn::resnet_config(r18 ? 18 : 50, r18 ? nn::ResNetStem::kCifar : nn::ResNetStem::kImageNet,
                          classes));
    run->model_ = std::make_unique<nn::ResNet>(config);
  } else {  // gpt_tiny, gpt_mini
    const nn::GptConfig config = name == "gpt_tiny" ? nn::gpt_tiny() : nn::gpt_mini();
    run->model_ = std::make_unique<nn::GPT>(config);
    classes = config.vocab_size;
  }
  const bool tokens = spec.unit == "tokens/s";
  if (tokens) {
    TESSEL_ASSIGN_OR_RETURN(
        Tensor ids, Tensor::from_vector(uniform_ids(shape_numel(in), classes, data_rng), in));
    TESSEL_ASSIGN_OR_RETURN(run->inputs_, ids.to(device));
    TESSEL_ASSIGN_OR_RETURN(
        Tensor targets, Tensor::from_vector(uniform_ids(shape_numel(in), classes, data_rng), in));
    TESSEL_ASSIGN_OR_RETURN(run->targets_, targets.to(device));
  } else {
    TESSEL_ASSIGN_OR_RETURN(Tensor x,
                            Tensor::from_vector(normal_values(shape_numel(in), data_rng), in));
    TESSEL_ASSIGN_OR_RETURN(run->inputs_, x.to(device));
    TESSEL_ASSIGN_OR_RETURN(Tensor targets,
                            Tensor::from_vector(uniform_ids(in[0], classes, data_rng), {in[0]}));
    TESSEL_ASSIGN_OR_RETURN(run->targets_, targets.to(device));
  }
  Pcg32 init_rng(seed, 1);
  TESSEL_ASSIGN_OR_RETURN(nn::FlatParameters params,
                          nn::FlatParameters::create(*run->model_, device, init_rng));
  run->params_ = std::make_unique<nn::FlatParameters>(std::move(params));
  TESSEL_ASSIGN_OR_RETURN(run->optimizer_, optim::AdamW::create(*run->params_, {.lr = 1e-3}));
  run->model_->train();
  return run;
}

Expected<Variable> WorkloadRun::loss_of_rows(int64_t begin, int64_t end) {
  Tensor inputs = inputs_, targets = targets_;
  if (begin != 0 || end != batch_rows()) {
    if (begin < 0 || end > batch_rows() || begin >= end)
      return invalid_argument("rows [{}, {}) are not a part of a batch of {}", begin, end,
                              batch_rows());
    TESSEL_ASSIGN_OR_RETURN(inputs, inputs_.slice(0, begin, end));
    TESSEL_ASSIGN_OR_RETURN(targets, targets_.slice(0, begin, end));
  }
  TESSEL_ASSIGN_OR_RETURN(Variable logits, model_->forward(Variable(inputs)));
  if (auto* gpt = dynamic_cast<nn::GPT*>(model_.get())) return gpt->loss(logits, Variable(targets));
  return autograd::cross_entropy(logits, Variable(targets));
}

Status WorkloadRun::step() {
  {
    TESSEL_ASSIGN_OR_RETURN(Variable loss, loss_of_rows(0, batch_rows()));
    TESSEL_TRY(loss.backward());
    last_loss_ = loss.data();
  }
  TESSEL_TRY(optimizer_->step());
  return params_->zero_grad();
}

Expected<double> WorkloadRun::last_loss() const {
  if (!last_loss_.defined()) return failed_precondition("last_loss() before the first step()");
  TESSEL_ASSIGN_OR_RETURN(std::vector<float> v, last_loss_.to_vector<float>());
  return double(v.at(0));
}

int64_t WorkloadRun::parameter_count() const {
  int64_t n = 0;
  for (const auto& e : params_->entries())
    n += e.numel;
  return n;
}

}  // namespace tessel::train
