// A model defined outside tessel, trained, saved and loaded back: a residual MLP that tells
// which of three rings a 2-D point lies on. What a C++ program on an installed tessel looks like
// (examples/cpp/CMakeLists.txt builds it); tessel's tests build and run it against an install.
//
//   residual_mlp [CHECKPOINT]     default: residual_mlp.safetensors in the current folder
#include <tessel/tessel.h>

#include <cmath>
#include <cstdio>
#include <random>

using namespace tessel;
using autograd::Variable;

// x + fc2(relu(fc1(x))), as PyTorch's `x + self.fc2(F.relu(self.fc1(x)))`.
class ResidualBlock : public nn::Module {
 public:
  explicit ResidualBlock(int64_t width)
      : fc1_(register_module("fc1", std::make_unique<nn::Linear>(width, width))),
        fc2_(register_module("fc2", std::make_unique<nn::Linear>(width, width))),
        relu_(register_module("relu", std::make_unique<nn::ReLU>())) {}
  Expected<Variable> forward(const Variable& x) override { return x + fc2_(relu_(fc1_(x))); }
  std::string type_name() const override { return "ResidualBlock"; }

 private:
  nn::Linear& fc1_;
  nn::Linear& fc2_;
  nn::ReLU& relu_;
};

// Linear(2, width), ReLU, `depth` residual blocks, Linear(width, 3).
class RingClassifier : public nn::Module {
 public:
  RingClassifier(int64_t width, int depth)
      : input_(register_module("input", std::make_unique<nn::Linear>(2, width))),
        relu_(register_module("relu", std::make_unique<nn::ReLU>())),
        blocks_(register_module("blocks", std::make_unique<nn::Sequential>())),
        head_(register_module("head", std::make_unique<nn::Linear>(width, 3))) {
    for (int i = 0; i < depth; ++i)
      blocks_.append(std::make_unique<ResidualBlock>(width));
  }
  Expected<Variable> forward(const Variable& x) override {
    return head_(blocks_(relu_(input_(x))));
  }
  std::string type_name() const override { return "RingClassifier"; }

 private:
  nn::Linear& input_;
  nn::ReLU& relu_;
  nn::Sequential& blocks_;
  nn::Linear& head_;
};

// n points [n, 2] on three noisy rings of radius 1, 2 and 3, and their ring [n] (i64).
Status make_batch(std::mt19937& gen, int64_t n, Tensor& points, Tensor& labels) {
  std::uniform_real_distribution<float> angle(0.0f, 6.2831853f);
  std::normal_distribution<float> noise(0.0f, 0.15f);
  std::vector<float> xy;
  std::vector<int64_t> ring;
  for (int64_t i = 0; i < n; ++i) {
    int64_t k = int64_t(gen() % 3);
    float r = float(k + 1) + noise(gen), a = angle(gen);
    xy.insert(xy.end(), {r * std::cos(a), r * std::sin(a)});
    ring.push_back(k);
  }
  TESSEL_ASSIGN_OR_RETURN(points, Tensor::from_vector(xy, {n, 2}));
  TESSEL_ASSIGN_OR_RETURN(labels, Tensor::from_vector(ring, {n}));
  return ok_status();
}

// The fraction of points whose largest logit is their ring.
Expected<double> accuracy(nn::Module& model, const Tensor& points, const Tensor& labels) {
  autograd::NoGrad no_grad;
  TESSEL_ASSIGN_OR_RETURN(Variable logits, model(Variable(points)));
  TESSEL_ASSIGN_OR_RETURN(std::vector<float> scores, logits.data().to_vector<float>());
  TESSEL_ASSIGN_OR_RETURN(std::vector<int64_t> truth, labels.to_vector<int64_t>());
  int64_t correct = 0;
  for (size_t i = 0; i < truth.size(); ++i) {
    const float* row = &scores[3 * i];
    correct += int64_t(std::max_element(row, row + 3) - row) == truth[i];
  }
  return double(correct) / double(truth.size());
}

Status run(const std::string& checkpoint) {
  const int64_t kSteps = 300, kBatch = 128;
  RingClassifier model(/*width=*/32, /*depth=*/2);
  Pcg32 init(/*seed=*/0);
  TESSEL_ASSIGN_OR_RETURN(nn::FlatParameters params,
                          nn::FlatParameters::create(model, cpu_device(), init));
  TESSEL_ASSIGN_OR_RETURN(auto optimizer, optim::AdamW::create(params, {.lr = 1e-2}));

  std::mt19937 gen(42);
  Tensor x, y;
  for (int64_t step = 1; step <= kSteps; ++step) {
    TESSEL_TRY(make_batch(gen, kBatch, x, y));
    TESSEL_ASSIGN_OR_RETURN(Variable logits, model(Variable(x)));
    TESSEL_ASSIGN_OR_RETURN(Variable loss, autograd::cross_entropy(logits, Variable(y)));
    TESSEL_TRY(optimizer->zero_grad());
    TESSEL_TRY(loss.backward());
    TESSEL_TRY(optimizer->step());
    if (step % 100 == 0 || step == 1)
      std::printf("step %lld: loss %.4f\n", (long long)step, loss.item().value());
  }
  TESSEL_TRY(save_training_checkpoint(checkpoint, model, *optimizer, kSteps));

  // A new model and optimizer, initialised differently, take the checkpoint's state.
  RingClassifier restored(32, 2);
  Pcg32 other_init(/*seed=*/1);
  TESSEL_ASSIGN_OR_RETURN(nn::FlatParameters restored_params,
                          nn::FlatParameters::create(restored, cpu_device(), other_init));
  TESSEL_ASSIGN_OR_RETURN(auto restored_optimizer,
                          optim::AdamW::create(restored_params, {.lr = 1e-2}));
  TESSEL_ASSIGN_OR_RETURN(TrainingState state,
                          load_training_checkpoint(checkpoint, restored, *restored_optimizer));

  Tensor test_x, test_y;
  TESSEL_TRY(make_batch(gen, 1000, test_x, test_y));
  TESSEL_ASSIGN_OR_RETURN(double trained, accuracy(model, test_x, test_y));
  TESSEL_ASSIGN_OR_RETURN(double reloaded, accuracy(restored, test_x, test_y));
  std::printf("test accuracy %.3f; reloaded from %s (step %lld, optimizer step %lld): %.3f\n",
              trained, checkpoint.c_str(), (long long)state.step,
              (long long)restored_optimizer->step_count(), reloaded);
  if (trained < 0.9) return failed_precondition("accuracy {} after {} steps", trained, kSteps);
  if (reloaded != trained || restored_optimizer->step_count() != kSteps)
    return internal_error("the reloaded model or optimizer differs from the saved one");
  return ok_status();
}

int main(int argc, char** argv) {
  Status s = run(argc > 1 ? argv[1] : "residual_mlp.safetensors");
  if (!s.ok()) std::fprintf(stderr, "residual_mlp: %s\n", s.to_string().c_str());
  return s.ok() ? 0 : 1;
}
