// Optimizers against plain-C++ transcriptions of PyTorch's update equations (torch.optim.SGD and
// AdamW, single-tensor path), over several steps, on every device the op library launches on;
// schedules against their closed forms; clipping against a norm computed here in double.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>

#include "nn/module.h"
#include "optim/clip.h"
#include "optim/optimizer.h"
#include "optim/schedule.h"

namespace tessel::optim {
namespace {

using nn::FlatParameters;
using nn::Module;

// Two parameters whose sizes are not multiples of the alignment, so the gaps take part too.
class Toy : public Module {
 public:
  Toy() {
    register_parameter("w", {30, 50}, {});
    register_parameter("b", {7}, {});
  }
  std::string type_name() const override { return "Toy"; }
};

std::vector<Device*> test_devices() {
  return available_devices();
}

// Deterministic values without the code under test: p0[i] and the gradient of step t.
double initial_value(size_t i) {
  return std::sin(0.37 * static_cast<double>(i) + 0.1);
}
double gradient(size_t i, int t) {
  return std::cos(0.11 * static_cast<double>(i) * (t + 1) + t) * (1.0 + 0.5 * t);
}

// The flat buffer of `flat` as one host vector per parameter, in entry order.
std::vector<std::vector<float>> per_parameter(const FlatParameters& flat, const Tensor& buffer) {
  std::vector<float> all = buffer.to_vector<float>().value();
  std::vector<std::vector<float>> out;
  for (const auto& e : flat.entries())
    out.emplace_back(all.begin() + e.offset, all.begin() + e.offset + e.numel);
  return out;
}

// Writes element i of the concatenated parameters (entry order) into the flat buffer.
void write_flat(const FlatParameters& flat, const Tensor& buffer, double (*value)(size_t, int),
                int t) {
  std::vector<float> host(static_cast<size_t>(buffer.numel()), 0.0f);
  size_t i = 0;
  for (const auto& e : flat.entries())
    for (int64_t k = 0; k < e.numel; ++k)
      host[static_cast<size_t>(e.offset + k)] = static_cast<float>(value(i++, t));
  Tensor h = Tensor::from_vector<float>(host, buffer.shape()).value();
  ASSERT_TRUE(const_cast<Tensor&>(buffer).copy_from(h).ok());
}

double initial_value_t(size_t i, int) {
  return initial_value(i);
}

void expect_close(const std::vector<double>& expected, const std::vector<float>& got,
                  const std::string& what) {
  ASSERT_EQ(expected.size(), got.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], expected[i], 2e-6 + 2e-5 * std::abs(expected[i]))
        << what << "[" << i << "]";
}

// ---- SGD ----

struct SgdCase {
  SgdOptions options;
  const char* name;
};

TEST(Sgd, MatchesTorchEquationsOverSteps) {
  const SgdCase cases[] = {
      {{.lr = 0.1}, "plain"},
      {{.lr = 0.05, .momentum = 0.9, .dampening = 0.1, .weight_decay = 0.01}, "momentum"},
      {{.lr = 0.05, .momentum = 0.9, .weight_decay = 0.02, .nesterov = true}, "nesterov"},
  };
  for (Device* device : test_devices())
    for (const SgdCase& c : cases) {
      SCOPED_TRACE(fmt::format("{} on {}", c.name, device->id()));
      Toy toy;
      Pcg32 rng(1);
      FlatParameters flat = FlatParameters::create(toy, device, rng).value();
      write_flat(flat, flat.groups()[0].values, initial_value_t, 0);
      auto sgd = Sgd::create(flat, c.options).value();
      const size_t n = 30 * 50 + 7;
      std::vector<double> p(n), buf(n);
      for (size_t i = 0; i < n; ++i)
        p[i] = initial_value(i);
      const SgdOptions& o = c.options;
      for (int t = 0; t < 4; ++t) {
        write_flat(flat, flat.groups()[0].grads, gradient, t);
        ASSERT_TRUE(sgd->step().ok());
        for (size_t i = 0; i < n; ++i) {  // torch.optim.sgd._single_tensor_sgd
          double d = gradient(i, t) + o.weight_decay * p[i];
          if (o.momentum != 0) {
            buf[i] = t == 0 ? d : o.momentum * buf[i] + (1 - o.dampening) * d;
            d = o.nesterov ? d + o.momentum * buf[i] : buf[i];
          }
          p[i] -= o.lr * d;
        }
      }
      auto got = per_parameter(flat, flat.groups()[0].values);
      std::vector<float> all;
      for (auto& v : got)
        all.insert(all.end(), v.begin(), v.end());
      expect_close(p, all, "param");
      auto state = sgd->named_state();
      if (o.momentum != 0) {
        ASSERT_EQ(state.size(), 2u);
        EXPECT_EQ(state[0].first, "w.momentum_buffer");
        EXPECT_EQ(state[1].first, "b.momentum_buffer");
        std::vector<float> w = state[0].second.to_vector<float>().value();
        std::vector<float> b = state[1].second.to_vector<float>().value();
        w.insert(w.end(), b.begin(), b.end());
        expect_close(buf, w, "momentum_buffer");
      } else {
        EXPECT_TRUE(state.empty());
      }
      // The gaps between parameters stay zero.
      std::vector<float> values = flat.groups()[0].values.to_vector<float>().value();
      for (int64_t i = 1500; i < FlatParameters::kAlignElements * 2; ++i)
        ASSERT_EQ(values[static_cast<size_t>(i)], 0.0f) << i;
    }
}

TEST(Sgd, RejectsWhatTorchRejects) {
  Toy toy;
  Pcg32 rng(1);
  FlatParameters flat = FlatParameters::create(toy, cpu_device(), rng).value();
  EXPECT_FALSE(Sgd::create(flat, {.lr = -1}).ok());
  EXPECT_FALSE(Sgd::create(flat, {.lr = 0.1, .nesterov = true}).ok());
  EXPECT_FALSE(
      Sgd::create(flat, {.lr = 0.1, .momentum = 0.9, .dampening = 0.1, .nesterov = true}).ok());
}

// ---- AdamW ----

TEST(AdamW, MatchesTorchEquationsOverSteps) {
  const AdamWOptions o{.lr = 0.01, .beta1 = 0.8, .beta2 = 0.95, .eps = 1e-6, .weight_decay = 0.1};
  for (Device* device : test_devices()) {
    SCOPED_TRACE(device->id());
    Toy toy;
    Pcg32 rng(1);
    FlatParameters flat = FlatParameters::create(toy, device, rng).value();
    write_flat(flat, flat.groups()[0].values, initial_value_t, 0);
    auto adamw = AdamW::create(flat, o).value();
    const size_t n = 30 * 50 + 7;
    std::vector<double> p(n), m(n, 0.0), v(n, 0.0);
    for (size_t i = 0; i < n; ++i)
      p[i] = initial_value(i);
    for (int t = 0; t < 5; ++t) {
      write_flat(flat, flat.groups()[0].grads, gradient, t);
      ASSERT_TRUE(adamw->step().ok());
      const int step = t + 1;  // torch.optim.adamw._single_tensor_adamw
      for (size_t i = 0; i < n; ++i) {
        double g = gradient(i, t);
        p[i] *= 1 - o.lr * o.weight_decay;
        m[i] += (g - m[i]) * (1 - o.beta1);  // exp_avg.lerp_(grad, 1 - beta1)
        v[i] = v[i] * o.beta2 + (1 - o.beta2) * g * g;
        double bias_correction1 = 1 - std::pow(o.beta1, step);
        double bias_correction2 = 1 - std::pow(o.beta2, step);
        double denom = std::sqrt(v[i]) / std::sqrt(bias_correction2) + o.eps;
        p[i] -= (o.lr / bias_correction1) * m[i] / denom;
      }
    }
    EXPECT_EQ(adamw->step_count(), 5);
    std::vector<float> all;
    for (auto& part : per_parameter(flat, flat.groups()[0].values))
      all.insert(all.end(), part.begin(), part.end());
    expect_close(p, all, "param");
    auto state = adamw->named_state();
    ASSERT_EQ(state.size(), 4u);
    EXPECT_EQ(state[0].first, "w.exp_avg");
    EXPECT_EQ(state[1].first, "w.exp_avg_sq");
    EXPECT_EQ(state[2].first, "b.exp_avg");
    EXPECT_EQ(state[3].first, "b.exp_avg_sq");
    std::vector<float> exp_avg = state[0].second.to_vector<float>().value();
    std::vector<float> b_avg = state[2].second.to_vector<float>().value();
    exp_avg.insert(exp_avg.end(), b_avg.begin(), b_avg.end());
    expect_close(m, exp_avg, "exp_avg");
    std::vector<float> exp_avg_sq = state[1].second.to_vector<float>().value();
    std::vector<float> b_sq = state[3].second.to_vector<float>().value();
    exp_avg_sq.insert(exp_avg_sq.end(), b_sq.begin(), b_sq.end());
    expect_close(v, exp_avg_sq, "exp_avg_sq");
  }
}

// ---- Schedules ----

TEST(Schedule, ClosedFormsAtChosenSteps) {
  Schedule constant{.kind = ScheduleKind::kConstant, .base_lr = 0.3};
  EXPECT_DOUBLE_EQ(constant.lr_at(0), 0.3);
  EXPECT_DOUBLE_EQ(constant.lr_at(12345), 0.3);

  Schedule cosine{.kind = ScheduleKind::kCosine, .base_lr = 1.0, .min_lr = 0.1, .total_steps = 100};
  ASSERT_TRUE(cosine.validate().ok());
  EXPECT_DOUBLE_EQ(cosine.lr_at(0), 1.0);
  EXPECT_NEAR(cosine.lr_at(25), 0.1 + 0.9 * (1 + std::sqrt(0.5)) / 2, 1e-12);  // 0.86819805
  EXPECT_NEAR(cosine.lr_at(50), 0.55, 1e-12);
  EXPECT_NEAR(cosine.lr_at(100), 0.1, 1e-12);
  EXPECT_NEAR(cosine.lr_at(150), 0.1, 1e-12) << "stays at min_lr after the end";

  Schedule warm{.kind = ScheduleKind::kWarmupCosine,
                .base_lr = 1e-3,
                .min_lr = 1e-4,
                .warmup_steps = 10,
                .total_steps = 110};
  ASSERT_TRUE(warm.validate().ok());
  EXPECT_NEAR(warm.lr_at(0), 1e-4, 1e-15);
  EXPECT_NEAR(warm.lr_at(4), 5e-4, 1e-15);
  EXPECT_NEAR(warm.lr_at(9), 1e-3, 1e-15);
  EXPECT_NEAR(warm.lr_at(10), 1e-3, 1e-15);
  EXPECT_NEAR(warm.lr_at(60), 5.5e-4, 1e-15);
  EXPECT_NEAR(warm.lr_at(110), 1e-4, 1e-15);

  Schedule warm_constant{.kind = ScheduleKind::kWarmupConstant, .base_lr = 2.0, .warmup_steps = 4};
  EXPECT_DOUBLE_EQ(warm_constant.lr_at(1), 1.0);
  EXPECT_DOUBLE_EQ(warm_constant.lr_at(500), 2.0);

  EXPECT_FALSE((Schedule{.kind = ScheduleKind::kCosine, .total_steps = 0}).validate().ok());
  EXPECT_FALSE(
      (Schedule{.kind = ScheduleKind::kWarmupCosine, .warmup_steps = 10, .total_steps = 10})
          .validate()
          .ok());
  EXPECT_EQ(parse_schedule_kind("warmup_cosine").value(), ScheduleKind::kWarmupCosine);
  EXPECT_FALSE(parse_schedule_kind("cosin").ok());
}

// ---- Clipping ----

TEST(Clip, GlobalNormAndScaling) {
  for (Device* device : test_devices()) {
    SCOPED_TRACE(device->id());
    Toy toy;
    Pcg32 rng(1);
    FlatParameters flat = FlatParameters::create(toy, device, rng).value();
    write_flat(flat, flat.groups()[0].grads, gradient, 2);
    const size_t n = 30 * 50 + 7;
    double sum = 0;
    for (size_t i = 0; i < n; ++i)
      sum += gradient(i, 2) * gradient(i, 2);
    const double norm = std::sqrt(sum);
    EXPECT_NEAR(global_grad_norm(flat).value(), norm, 1e-5 * norm);

    // Above the norm: nothing changes.
    EXPECT_NEAR(clip_grad_norm(flat, 2 * norm).value(), norm, 1e-5 * norm);
    std::vector<double> expected(n);
    for (size_t i = 0; i < n; ++i)
      expected[i] = gradient(i, 2);
    std::vector<float> all;
    for (auto& part : per_parameter(flat, flat.groups()[0].grads))
      all.insert(all.end(), part.begin(), part.end());
    expect_close(expected, all, "unclipped");

    // Below: scaled by max_norm / (norm + 1e-6), as torch.nn.utils.clip_grad_norm_.
    EXPECT_NEAR(clip_grad_norm(flat, 0.25 * norm).value(), norm, 1e-5 * norm);
    const double coefficient = 0.25 * norm / (norm + 1e-6);
    for (double& e : expected)
      e *= coefficient;
    all.clear();
    for (auto& part : per_parameter(flat, flat.groups()[0].grads))
      all.insert(all.end(), part.begin(), part.end());
    expect_close(expected, all, "clipped");
    EXPECT_NEAR(global_grad_norm(flat).value(), 0.25 * norm, 1e-5 * norm);
    EXPECT_FALSE(clip_grad_norm(flat, 0.0).ok());
  }
}

// ---- Ownership and saved state ----

TEST(Optimizer, KeepsUpdatingAfterTheCallersFlatParametersMoveAndDie) {
  // The optimizer holds its own handle on the flat buffers (as a torch optimizer holds its
  // parameters): the caller's FlatParameters moving away and then being destroyed changes
  // nothing. SGD without momentum: p - lr g, read through the module's own parameters.
  Toy toy;
  Pcg32 rng(1);
  auto flat =
      std::make_unique<FlatParameters>(FlatParameters::create(toy, cpu_device(), rng).value());
  write_flat(*flat, flat->groups()[0].values, initial_value_t, 0);
  write_flat(*flat, flat->groups()[0].grads, gradient, 0);
  auto sgd = Sgd::create(*flat, {.lr = 0.5}).value();
  FlatParameters moved = std::move(*flat);
  flat.reset();
  ASSERT_TRUE(sgd->step().ok());
  size_t i = 0;
  for (auto& [name, p] : toy.named_parameters()) {
    const std::vector<float> values = p->variable.data().to_vector<float>().value();
    for (float got : values) {
      EXPECT_NEAR(got, initial_value(i) - 0.5 * gradient(i, 0), 1e-6) << name << " " << i;
      ++i;
    }
  }
  EXPECT_EQ(moved.groups()[0].values.storage(),
            toy.named_parameters()[0].second->variable.data().storage());
}

TEST(Optimizer, StateDictCarriesStateAndStepCountToAnotherOptimizer) {
  // a takes three steps; b gets a's weights and optimizer state; the fourth step of both is then
  // the same to the bit (bias correction depends on the step count, so it must come along).
  const AdamWOptions o{.lr = 0.01, .beta1 = 0.8, .beta2 = 0.95, .eps = 1e-6, .weight_decay = 0.1};
  Toy toy_a, toy_b;
  Pcg32 rng_a(1), rng_b(2);
  FlatParameters a = FlatParameters::create(toy_a, cpu_device(), rng_a).value();
  FlatParameters b = FlatParameters::create(toy_b, cpu_device(), rng_b).value();
  write_flat(a, a.groups()[0].values, initial_value_t, 0);
  auto opt_a = AdamW::create(a, o).value();
  auto opt_b = AdamW::create(b, o).value();
  for (int t = 0; t < 3; ++t) {
    write_flat(a, a.groups()[0].grads, gradient, t);
    ASSERT_TRUE(opt_a->step().ok());
  }
  ASSERT_TRUE(toy_b.load_state_dict(toy_a.state_dict()).ok());
  OptimizerState state = opt_a->state_dict();
  EXPECT_EQ(state.step_count, 3);
  EXPECT_EQ(state.tensors.size(), 4u);
  ASSERT_TRUE(opt_b->load_state_dict(state).ok());
  EXPECT_EQ(opt_b->step_count(), 3);
  write_flat(a, a.groups()[0].grads, gradient, 3);
  write_flat(b, b.groups()[0].grads, gradient, 3);
  ASSERT_TRUE(opt_a->step().ok());
  ASSERT_TRUE(opt_b->step().ok());
  EXPECT_EQ(a.groups()[0].values.to_vector<float>().value(),
            b.groups()[0].values.to_vector<float>().value());
}

TEST(Optimizer, LoadStateDictNamesWhatIsMissingExtraOrMisshapenAndChangesNothing) {
  Toy toy;
  Pcg32 rng(1);
  FlatParameters flat = FlatParameters::create(toy, cpu_device(), rng).value();
  auto adamw = AdamW::create(flat, {}).value();
  OptimizerState state = adamw->state_dict();
  for (auto& [name, t] : state.tensors)
    state.tensors[name] = t.clone().value();
  ASSERT_TRUE(state.tensors["w.exp_avg"].fill(1.0).ok());
  state.tensors.erase("b.exp_avg");
  state.tensors["b.exp_avg_sq"] = Tensor::zeros({8}, DType::kF32).value();
  state.tensors["c.exp_avg"] = Tensor::zeros({1}, DType::kF32).value();
  state.step_count = 9;
  Status s = adamw->load_state_dict(state);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("missing 'b.exp_avg'"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("'b.exp_avg_sq' has shape [8], the optimizer's is [7]"),
            std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("unexpected 'c.exp_avg'"), std::string::npos) << s.message();
  EXPECT_EQ(adamw->step_count(), 0);
  EXPECT_EQ(adamw->named_state()[0].second.to_vector<float>().value(),
            std::vector<float>(30 * 50, 0.0f));
}

}  // namespace
}  // namespace tessel::optim
