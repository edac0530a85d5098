// The memory plan of a small MLP against closed forms of what it holds, against a plan recorded
// at the full batch, and against the caching allocator's own peak in a real run.
#include "plan/memory_plan.h"

#include <gtest/gtest.h>

#include "autograd/autocast.h"
#include "autograd/functional.h"
#include "nn/layers.h"
#include "optim/optimizer.h"
#include "runtime/caching_allocator.h"
#include "support/random.h"

namespace tessel::plan {
namespace {

using autograd::Variable;

// in -> h1 -> h2 -> out, ReLU between, AdamW, cross-entropy: the workloads' step on a small MLP.
constexpr int64_t kIn = 20, kH1 = 64, kH2 = 32, kOut = 10;

int64_t block(int64_t bytes) {
  return int64_t(CachingAllocator::round_size(size_t(bytes)));
}

struct MlpStep : PlannedStep {
  nn::MLP model{std::vector<int64_t>{kIn, kH1, kH2, kOut}};
  std::unique_ptr<nn::FlatParameters> params;
  std::unique_ptr<optim::AdamW> optimizer;
  Tensor x, y;
  DType compute = DType::kF32;  // autocast's: bf16 keeps the saved activations in 16 bits

  Expected<Variable> loss() override {
    autograd::Autocast autocast(compute);
    TESSEL_ASSIGN_OR_RETURN(Variable logits, model(Variable(x)));
    return autograd::cross_entropy(logits, Variable(y));
  }
  Status update() override {
    TESSEL_TRY(optimizer->step());
    return params->zero_grad();
  }
  std::vector<Tensor> parameter_tensors() override { return {params->groups()[0].values}; }
  std::vector<Tensor> gradient_tensors() override { return {params->groups()[0].grads}; }
  std::vector<Tensor> batch_tensors() override { return {x, y}; }
};

struct MlpTarget : MemoryPlanTarget {
  int64_t rows;
  DType compute;
  explicit MlpTarget(int64_t rows, DType compute = DType::kF32) : rows(rows), compute(compute) {}
  std::string name() const override { return "mlp"; }
  int64_t batch() const override { return rows; }
  Device* device() const override { return cpu_device(); }
  Expected<std::unique_ptr<PlannedStep>> build(
      int64_t batch, const std::function<void(MemoryPhase)>& phase) override {
    auto s = std::make_unique<MlpStep>();
    s->compute = compute;
    phase(MemoryPhase::kData);
    std::vector<float> xs(static_cast<size_t>(batch * kIn));
    std::vector<int64_t> ys(static_cast<size_t>(batch));
    for (size_t i = 0; i < xs.size(); ++i)
      xs[i] = float(i % 7) * 0.1f - 0.3f;
    for (size_t i = 0; i < ys.size(); ++i)
      ys[i] = int64_t(i % kOut);
    TESSEL_ASSIGN_OR_RETURN(s->x, Tensor::from_vector(xs, {batch, kIn}));
    TESSEL_ASSIGN_OR_RETURN(s->y, Tensor::from_vector(ys, {batch}));
    phase(MemoryPhase::kModel);
    Pcg32 rng(1, 1);
    TESSEL_ASSIGN_OR_RETURN(nn::FlatParameters p,
                            nn::FlatParameters::create(s->model, cpu_device(), rng));
    s->params = std::make_unique<nn::FlatParameters>(std::move(p));
    phase(MemoryPhase::kOptimizer);
    TESSEL_ASSIGN_OR_RETURN(s->optimizer, optim::AdamW::create(*s->params, {.lr = 1e-3}));
    return std::unique_ptr<PlannedStep>(std::move(s));
  }
};

// Each parameter starts at a multiple of 1024 elements, and the flat buffer's length is one too.
int64_t flat_bytes() {
  auto aligned = [](int64_t n) { return (n + 1023) / 1024 * 1024; };
  const int64_t elements = aligned(kH1 * kIn) + aligned(kH1) + aligned(kH2 * kH1) + aligned(kH2) +
                           aligned(kOut * kH2) + aligned(kOut);
  return block(4 * elements);
}

// The CPU allocator's peak while `target` builds its step at batch B and runs two steps, above
// what was live before: what the plan's peak predicts. The cache is emptied first, as in the
// fresh process the plan predicts: a request may take a larger cached block
// (runtime/caching_allocator.h), so blocks cached by earlier recordings would change the peak.
// -1 when a step fails (the test says so).
int64_t allocator_peak_of_two_steps(MlpTarget& target, int64_t B) {
  CachingAllocator& allocator = cpu_device()->allocator();
  allocator.empty_cache();
  allocator.reset_peak();
  const int64_t before = int64_t(allocator.stats().current_bytes);
  Expected<std::unique_ptr<PlannedStep>> step = target.build(B, [](MemoryPhase) {});
  EXPECT_TRUE(step.ok());
  if (!step.ok()) return -1;
  for (int s = 0; s < 2; ++s) {
    {
      Expected<Variable> loss = (*step)->loss();
      EXPECT_TRUE(loss.ok());
      if (!loss.ok() || !loss->backward().ok()) return -1;
    }
    if (!(*step)->update().ok()) return -1;
  }
  return int64_t(allocator.stats().peak_bytes) - before;
}

TEST(MemoryPlan, SmallMlpMatchesClosedFormsOfWhatItHolds) {
  const int64_t B = 48;
  MlpTarget target(B);
  Expected<MemoryPlan> p = plan_memory(target);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  std::printf("%s", describe(*p).c_str());
  EXPECT_TRUE(p->scaled);
  EXPECT_EQ(p->nonlinear_allocations, 0);

  const int64_t flat = flat_bytes();
  EXPECT_EQ(p->at_peak[int(MemoryKind::kParameters)], flat);
  EXPECT_EQ(p->at_peak[int(MemoryKind::kGradients)], flat);
  EXPECT_EQ(p->at_peak[int(MemoryKind::kOptimizerState)], 2 * flat);  // exp_avg, exp_avg_sq
  EXPECT_EQ(p->at_peak[int(MemoryKind::kData)], block(4 * B * kIn) + block(8 * B));
  // Forward keeps: each relu's output (saved by relu for its gradient, and the next linear's
  // input), the logits (cross-entropy's input) and the loss. Each linear's output, relu's
  // input, is freed after the forward.
  const int64_t saved = block(4 * B * kH1) + block(4 * B * kH2) + block(4 * B * kOut) + block(4);
  EXPECT_EQ(p->saved_activation_bytes, saved);
  EXPECT_EQ(p->saved_16bit_bytes, 0);
  int64_t by_layer = 0;
  for (const auto& [layer, bytes] : p->activations_by_layer)
    by_layer += bytes;
  EXPECT_EQ(by_layer, saved);
  int64_t sum = 0;
  for (int64_t bytes : p->at_peak)
    sum += bytes;
  EXPECT_EQ(sum, p->peak_bytes);
  EXPECT_GE(p->reserved_peak_bytes, p->peak_bytes);
  EXPECT_GT(p->overhead_bytes, 0);
  EXPECT_LE(p->resident_tensor_bytes, p->reserved_peak_bytes);
  EXPECT_GT(p->resident_tensor_bytes, 0);
  EXPECT_EQ(p->predicted_rss_bytes, p->resident_tensor_bytes + p->overhead_bytes);
}

TEST(MemoryPlan, ScaledPlanEqualsOneRecordedAtTheFullBatchAndTheAllocatorsPeak) {
  const int64_t B = 40;
  MlpTarget target(B);
  Expected<MemoryPlan> scaled = plan_memory(target);
  ASSERT_TRUE(scaled.ok()) << scaled.status().to_string();
  Expected<MemoryPlan> recorded = plan_memory(target, {.batch_low = 2, .batch_high = B});
  ASSERT_TRUE(recorded.ok()) << recorded.status().to_string();
  EXPECT_TRUE(scaled->scaled);
  EXPECT_FALSE(recorded->scaled);
  EXPECT_EQ(scaled->peak_bytes, recorded->peak_bytes);
  EXPECT_EQ(scaled->reserved_peak_bytes, recorded->reserved_peak_bytes);
  for (int k = 0; k < 6; ++k)
    EXPECT_EQ(scaled->at_peak[k], recorded->at_peak[k]) << memory_kind_name(MemoryKind(k));

  // The real thing: the allocator's peak over the same build and two steps, above what was live
  // before, is the plan's peak.
  EXPECT_EQ(allocator_peak_of_two_steps(target, B), scaled->peak_bytes);
}

// Under bf16 autocast the nodes keep each relu's output as a bf16 copy (autograd/
// saved_precision.h): the saved activations are those of the f32 plan with the two relu outputs
// at half the bytes (the logits stay f32 for the loss), and the plan's peak is the allocator's.
TEST(MemoryPlan, Bf16SavedActivationsArePlannedAtTheirDtype) {
  const int64_t B = 40;
  MlpTarget target(B, DType::kBF16);
  Expected<MemoryPlan> p = plan_memory(target);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  std::printf("%s", describe(*p).c_str());
  EXPECT_EQ(p->nonlinear_allocations, 0);
  const int64_t saved = block(2 * B * kH1) + block(2 * B * kH2) + block(4 * B * kOut) + block(4);
  EXPECT_EQ(p->saved_activation_bytes, saved);
  EXPECT_EQ(p->saved_16bit_bytes, block(2 * B * kH1) + block(2 * B * kH2));
  EXPECT_EQ(p->at_peak[int(MemoryKind::kParameters)], flat_bytes());

  EXPECT_EQ(allocator_peak_of_two_steps(target, B), p->peak_bytes);
}

TEST(MemoryPlan, RecordingBatchesMustBeOrdered) {
  MlpTarget target(8);
  EXPECT_FALSE(plan_memory(target, {.batch_low = 4, .batch_high = 4}).ok());
  EXPECT_FALSE(plan_memory(target, {.batch_low = 0, .batch_high = 4}).ok());
}

}  // namespace
}  // namespace tessel::plan
