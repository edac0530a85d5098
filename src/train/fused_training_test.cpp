// [train] fuse = true: the trainer captures its first step as a graph and replays the rest with
// fused kernels (graph/replay.h). A fused run gives the eager run's losses and weights, for an
// MLP and for the CNN with batch norm and ReLU, and --dump-graph's printout shows the graph.
// Fused: in the MLP each hidden relu runs in its linear's gemm and each relu gradient in the
// product that makes its output gradient (4 groups); in the CNN each relu after batch norm runs
// in batchnorm_apply, the hidden linear's relu in its gemm and its gradient in the product
// before it (4); in gpt_tiny the residual adds run in the projections' gemms (8).
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "train/trainer.h"
#include "train/workloads.h"

namespace tessel::train {
namespace {

TrainConfig config(const std::string& model, bool fuse, int64_t steps) {
  std::string text = fmt::format(R"(
seed = 5
[model]
{}
[data]
name = "fashion_mnist"
batch_size = 8
eval_batch_size = 16
[optimizer]
name = "adamw"
lr = 0.01
[train]
steps = {}
clip_grad_norm = 0.5
fuse = {}
)",
                                 model, steps, fuse ? "true" : "false");
  return parse_train_config(Config::parse(text, "fused.toml").value()).value();
}

void expect_same_runs(const std::string& model, int64_t steps, size_t epilogues) {
  // No evaluation: the test split would take longer than the steps.
  const TrainerOptions quiet{.progress = nullptr, .evaluate_at_end = false};
  auto eager = Trainer::create(config(model, false, steps), quiet).value();
  auto fused = Trainer::create(config(model, true, steps), quiet).value();
  EXPECT_EQ(eager->fused_steps(), nullptr);
  Expected<RunSummary> a = eager->run(), b = fused->run();
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  ASSERT_EQ(a->losses.size(), size_t(steps));
  ASSERT_EQ(b->losses.size(), size_t(steps));
  for (size_t i = 0; i < a->losses.size(); ++i)
    EXPECT_NEAR(b->losses[i], a->losses[i], 1e-6 * (1 + std::abs(a->losses[i]))) << "step " << i;
  const graph::FusedSteps* f = fused->fused_steps();
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->stats().captures, 1);
  EXPECT_EQ(f->stats().replays, steps - 1);
  EXPECT_EQ(f->stats().diverged, 0);
  ASSERT_NE(f->plan(), nullptr);
  size_t with_producer = 0;
  for (const graph::FusedGroup& g : f->plan()->groups)
    with_producer += g.producer >= 0;
  EXPECT_EQ(with_producer, epilogues) << graph::to_string(*f->graph(), &f->plan()->group_of);
  EXPECT_EQ(f->stats().fused_launches, (steps - 1) * int64_t(f->plan()->groups.size()));
  // Weights, and batch norm's running statistics.
  auto want = eager->model().state_dict(), got = fused->model().state_dict();
  ASSERT_EQ(want.size(), got.size());
  for (const auto& [name, tensor] : want) {
    if (tensor.dtype() != DType::kF32) continue;  // num_batches_tracked
    std::vector<float> w = tensor.contiguous().value().to_vector<float>().value();
    std::vector<float> g = got.at(name).contiguous().value().to_vector<float>().value();
    ASSERT_EQ(w.size(), g.size()) << name;
    for (size_t i = 0; i < w.size(); ++i)
      ASSERT_NEAR(g[i], w[i], 1e-6 * (1 + std::abs(w[i]))) << name << "[" << i << "]";
  }
}

TEST(FusedTraining, AnMlpsReluFusesIntoItsGemmsAndTrainsAsEager) {
  expect_same_runs("name = \"mlp\"\nhidden = [32, 16]", 5, 4);
}

TEST(FusedTraining, TheCnnsBatchNormAndReluFuseAndTrainAsEager) {
  expect_same_runs("name = \"cnn\"", 3, 4);
}

TEST(FusedTraining, GptTinysResidualAddsFuseIntoTheirGemmsAndTrainAsEager) {
  auto eager = WorkloadRun::create("gpt_tiny", cpu_device(), 3, /*batch_rows=*/2).value();
  auto fused = WorkloadRun::create("gpt_tiny", cpu_device(), 3, /*batch_rows=*/2).value();
  graph::FusedSteps steps;
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(eager->step().ok());
    Status s = steps.run([&] { return fused->step(); });
    ASSERT_TRUE(s.ok()) << s.to_string();
    const double want = eager->last_loss().value(), got = fused->last_loss().value();
    EXPECT_NEAR(got, want, 1e-6 * (1 + std::abs(want))) << "step " << i;
  }
  ASSERT_NE(steps.plan(), nullptr);
  int epilogues = 0;
  for (const graph::FusedGroup& g : steps.plan()->groups)
    epilogues += g.producer >= 0;
  // 4 blocks x (attention, MLP) residual adds into their gemms. The gelu gradients would fuse
  // into the products before them but are too costly for an epilogue (fusible.h).
  EXPECT_EQ(epilogues, 8);
  EXPECT_EQ(steps.stats().replays, 3);
  EXPECT_EQ(steps.stats().fused_launches, 3 * int64_t(steps.plan()->groups.size()));
  const std::vector<float> want = eager->parameters().groups()[0].values.to_vector<float>().value();
  const std::vector<float> got = fused->parameters().groups()[0].values.to_vector<float>().value();
  ASSERT_EQ(want.size(), got.size());
  for (size_t i = 0; i < want.size(); ++i)
    ASSERT_NEAR(got[i], want[i], 1e-6 * (1 + std::abs(want[i]))) << i;
}

TEST(FusedTraining, DumpGraphPrintsTheGraphBeforeAndAfterFusion) {
  std::FILE* out = std::tmpfile();
  ASSERT_NE(out, nullptr);
  auto t = Trainer::create(config("name = \"mlp\"\nhidden = [16]", true, 2),
                           {.progress = nullptr, .evaluate_at_end = false, .dump_graph = out})
               .value();
  ASSERT_TRUE(t->run().ok());
  std::rewind(out);
  std::string text;
  char buffer[4096];
  for (size_t n; (n = std::fread(buffer, 1, sizeof buffer, out)) > 0;)
    text.append(buffer, n);
  std::fclose(out);
  EXPECT_NE(text.find("--- the step's graph (before fusion) ---"), std::string::npos) << text;
  EXPECT_NE(text.find("--- after fusion: "), std::string::npos) << text;
  EXPECT_NE(text.find("gemm{BIAS=1} <linear>"), std::string::npos) << text;
  EXPECT_NE(text.find("unary{OP=1} <relu>"), std::string::npos) << text;
  EXPECT_NE(text.find("adamw <rule/optimizer>"), std::string::npos) << text;
}

}  // namespace
}  // namespace tessel::train
