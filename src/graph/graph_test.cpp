// Graph capture, the fusion pass and fused replay. The fused kernels are checked by running them:
// against the unfused ops on every device here (broadcast operands, a transposed view) and a
// plain C++ reference in double; replayed training steps against the same steps run eagerly.
#include <gtest/gtest.h>

#include <cmath>
#include <optional>

#include "autograd/functional.h"
#include "autograd/variable.h"
#include "graph/fusion.h"
#include "graph/graph.h"
#include "graph/replay.h"
#include "ops/ops.h"
#include "ops/testing/every_device.h"
#include "support/random.h"
#include "tile/codegen/render.h"
#include "tile/parse/parser.h"
#include "tile/pipeline.h"

namespace tessel::graph {
namespace {

using autograd::Variable;

std::vector<float> random_values(size_t n, uint64_t seed) {
  Pcg32 rng(seed, 1);
  std::vector<float> v(n);
  for (float& x : v)
    x = rng.next_float() * 2.0f - 1.0f;
  return v;
}

Tensor tensor(const std::vector<float>& v, const Shape& shape, Device* device) {
  return Tensor::from_vector(v, shape, device).value();
}

std::vector<float> values(const Tensor& t) {
  return t.contiguous().value().to_vector<float>().value();
}

// What f() returns when run as one step of `fused` (captured on its first step, replayed after).
template <typename F>
auto run_fused(FusedSteps& fused, F&& f) -> decltype(f()) {
  std::optional<decltype(f())> out;
  TESSEL_TRY(fused.run([&]() -> Status {
    out.emplace(f());
    return out->ok() ? ok_status() : out->status();
  }));
  return std::move(*out);
}

// The index of the first node running `kernel` with OP = `op` ("" : any), from `from` on.
int find_node(const Graph& g, const std::string& kernel, const std::string& op = "",
              size_t from = 0) {
  for (size_t i = from; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    auto it = n.params.find("OP");
    if (n.kernel == kernel && (op.empty() || (it != n.params.end() && it->second == op)))
      return int(i);
  }
  return -1;
}

TEST(GraphCapture, RecordsATinyMlpStepWithItsEdges) {
  Device* cpu = cpu_device();
  Variable x(tensor(random_values(4 * 3, 1), {4, 3}, cpu));
  Variable w1(tensor(random_values(5 * 3, 2), {5, 3}, cpu), true);
  Variable b1(tensor(random_values(5, 3), {5}, cpu), true);
  Variable w2(tensor(random_values(2 * 5, 4), {2, 5}, cpu), true);
  Variable b2(tensor(random_values(2, 5), {2}, cpu), true);
  Variable y(Tensor::from_vector<int64_t>({0, 1, 1, 0}, {4}, cpu).value());
  Expected<Graph> g = capture_step([&]() -> Status {
    TESSEL_ASSIGN_OR_RETURN(Variable h, autograd::linear(x, w1, b1));
    TESSEL_ASSIGN_OR_RETURN(Variable a, autograd::relu(h));
    TESSEL_ASSIGN_OR_RETURN(Variable logits, autograd::linear(a, w2, b2));
    TESSEL_ASSIGN_OR_RETURN(Variable loss, autograd::cross_entropy(logits, y));
    return loss.backward();
  });
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  SCOPED_TRACE(to_string(*g));
  // Forward: gemm (linear, bias in its epilogue), relu, gemm; then the loss and backward.
  const int gemm1 = find_node(*g, "gemm");
  const int relu = find_node(*g, "unary", "1");
  ASSERT_GE(gemm1, 0);
  ASSERT_GT(relu, gemm1);
  EXPECT_EQ(g->nodes[size_t(gemm1)].op, "linear");
  EXPECT_EQ(g->nodes[size_t(relu)].op, "relu");
  EXPECT_TRUE(g->nodes[size_t(relu)].elementwise);
  const int gemm2 = find_node(*g, "gemm", "", size_t(relu));
  ASSERT_GT(gemm2, relu);
  EXPECT_GE(find_node(*g, "cross_entropy_rows"), gemm2);
  // relu reads what the first gemm wrote (its third operand, C), and the second gemm reads
  // relu's output.
  const Node& r = g->nodes[size_t(relu)];
  EXPECT_EQ(r.operands[0].value, g->nodes[size_t(gemm1)].operands[2].value);
  EXPECT_EQ(g->values[size_t(r.output().value)].producer, relu);
  EXPECT_EQ(g->nodes[size_t(gemm2)].operands[0].value, r.output().value);
  // relu's backward (a rule's own launch, no op) reads relu's saved output.
  const int relu_grad = find_node(*g, "unary_grad", "1");
  ASSERT_GT(relu_grad, gemm2);
  EXPECT_EQ(g->nodes[size_t(relu_grad)].op, "");
  EXPECT_EQ(g->nodes[size_t(relu_grad)].operands[0].value, r.output().value);
  // The weights are from outside the step; the activations are its temporaries.
  EXPECT_FALSE(g->values[size_t(g->nodes[size_t(gemm1)].operands[1].value)].temporary);
  EXPECT_TRUE(g->values[size_t(r.output().value)].temporary);
  // The first gemm's output is read by relu alone: relu becomes its epilogue. In backward, the
  // product that makes relu's output gradient (matmul's, a batched_gemm) gets relu's gradient as
  // its epilogue. The second gemm's output is the logits, which cross-entropy reads.
  const FusionPlan plan = plan_fusion(*g);
  ASSERT_EQ(plan.groups.size(), 2u) << to_string(*g);
  EXPECT_EQ(plan.groups[0].producer, gemm1);
  EXPECT_EQ(plan.groups[0].nodes, (std::vector<int>{gemm1, relu}));
  ASSERT_GE(plan.groups[1].producer, 0);
  EXPECT_EQ(g->nodes[size_t(plan.groups[1].producer)].kernel, "batched_gemm");
  EXPECT_EQ(plan.groups[1].nodes.back(), relu_grad);
}

// y = (relu(0.5 x + b) * c - d) / (sigmoid(x) + e): b [N] and d [M, 1] broadcast, c is a
// transposed view, e a 0-d tensor; eight element-wise launches with single-use intermediates.
Expected<Tensor> chain(const Tensor& x, const Tensor& b, const Tensor& c, const Tensor& d,
                       const Tensor& e) {
  TESSEL_ASSIGN_OR_RETURN(Tensor t0, ops::scale(x, 0.5));
  TESSEL_ASSIGN_OR_RETURN(Tensor t1, ops::add(t0, b));
  TESSEL_ASSIGN_OR_RETURN(Tensor t2, ops::relu(t1));
  TESSEL_ASSIGN_OR_RETURN(Tensor t3, ops::mul(t2, c));
  TESSEL_ASSIGN_OR_RETURN(Tensor t4, ops::sub(t3, d));
  TESSEL_ASSIGN_OR_RETURN(Tensor t5, ops::sigmoid(x));
  TESSEL_ASSIGN_OR_RETURN(Tensor t6, ops::add(t5, e));
  return ops::div(t4, t6);
}

double chain_reference(double x, double b, double c, double d, double e) {
  const double t = std::max(0.5 * x + b, 0.0) * c - d;
  return t / (1.0 / (1.0 + std::exp(-x)) + e);
}

TEST(GraphFusion, FusedChainMatchesTheUnfusedOpsOnEveryDevice) {
  const int64_t M = 37, N = 300;  // N past one 256-wide block, M not a multiple of 4
  for (Device* device : ops::testing::op_test_devices()) {
    SCOPED_TRACE(device->id());
    FusedSteps fused;
    Tensor out;
    for (int step = 0; step < 3; ++step) {
      const uint64_t seed = 10 * uint64_t(step);
      const std::vector<float> xv = random_values(size_t(M * N), seed + 1),
                               bv = random_values(size_t(N), seed + 2),
                               cv = random_values(size_t(N * M), seed + 3),
                               dv = random_values(size_t(M), seed + 4);
      Tensor x = tensor(xv, {M, N}, device), b = tensor(bv, {N}, device);
      Tensor c = tensor(cv, {N, M}, device).transpose(0, 1).value();  // [M, N], strides [1, M]
      Tensor d = tensor(dv, {M, 1}, device), e = tensor({1.5f}, {}, device);
      Expected<Tensor> eager = chain(x, b, c, d, e);
      ASSERT_TRUE(eager.ok()) << eager.status().to_string();
      ASSERT_TRUE(fused
                      .run([&]() -> Status {
                        TESSEL_ASSIGN_OR_RETURN(out, chain(x, b, c, d, e));
                        return ok_status();
                      })
                      .ok());
      if (step == 0) {  // the capture: one group of all eight launches
        ASSERT_NE(fused.plan(), nullptr);
        ASSERT_EQ(fused.plan()->groups.size(), 1u) << to_string(*fused.graph());
        EXPECT_EQ(fused.plan()->groups[0].nodes.size(), 8u);
        EXPECT_NE(fused.plan()->groups[0].source.find("kernel fused_"), std::string::npos);
      }
      const std::vector<float> got = values(out), want = values(*eager);
      ASSERT_EQ(got.size(), want.size());
      for (int64_t i = 0; i < M; ++i) {
        for (int64_t j = 0; j < N; ++j) {
          const size_t k = size_t(i * N + j);
          const double ref =
              chain_reference(xv[k], bv[size_t(j)], cv[size_t(j * M + i)], dv[size_t(i)], 1.5);
          ASSERT_NEAR(got[k], want[k], 1e-6 * (1 + std::abs(want[k]))) << i << ", " << j;
          ASSERT_NEAR(got[k], ref, 1e-5 * (1 + std::abs(ref))) << i << ", " << j;
        }
      }
    }
    EXPECT_EQ(fused.stats().captures, 1);
    EXPECT_EQ(fused.stats().replays, 2);
    EXPECT_EQ(fused.stats().fused_launches, 2);  // one per replayed step
  }
}

// linear(x, W, b) + r, then scaled: the gemm's output is read only by the add, so the add and
// the scale run in the gemm's epilogue (kernels/gemm.tile with the chain after its own epilogue).
TEST(GraphFusion, AnAddAfterALinearBecomesTheGemmsEpilogueOnEveryDevice) {
  const int64_t M = 50, K = 33, N = 70;
  for (Device* device : ops::testing::op_test_devices()) {
    SCOPED_TRACE(device->id());
    FusedSteps fused;
    for (int step = 0; step < 3; ++step) {
      const uint64_t seed = 100 + 10 * uint64_t(step);
      const std::vector<float> xv = random_values(size_t(M * K), seed + 1),
                               wv = random_values(size_t(N * K), seed + 2),
                               bv = random_values(size_t(N), seed + 3),
                               rv = random_values(size_t(M * N), seed + 4);
      Tensor x = tensor(xv, {M, K}, device), w = tensor(wv, {N, K}, device),
             b = tensor(bv, {N}, device), r = tensor(rv, {M, N}, device);
      auto f = [&]() -> Expected<Tensor> {
        TESSEL_ASSIGN_OR_RETURN(Tensor y, ops::linear(x, w, b));
        TESSEL_ASSIGN_OR_RETURN(Tensor z, ops::add(y, r));
        return ops::scale(z, 0.25);
      };
      Expected<Tensor> eager = f();
      ASSERT_TRUE(eager.ok()) << eager.status().to_string();
      Expected<Tensor> fused_out = run_fused(fused, f);
      ASSERT_TRUE(fused_out.ok()) << fused_out.status().to_string();
      const Tensor& out = *fused_out;
      if (step == 0) {
        ASSERT_EQ(fused.plan()->groups.size(), 1u) << to_string(*fused.graph());
        EXPECT_GE(fused.plan()->groups[0].producer, 0) << to_string(*fused.graph());
        EXPECT_EQ(fused.plan()->groups[0].nodes.size(), 3u);
      }
      const std::vector<float> got = values(out), want = values(*eager);
      for (int64_t i = 0; i < M; ++i) {
        for (int64_t j = 0; j < N; ++j) {
          double dot = bv[size_t(j)];
          for (int64_t k = 0; k < K; ++k)
            dot += double(xv[size_t(i * K + k)]) * wv[size_t(j * K + k)];
          const double ref = 0.25 * (dot + rv[size_t(i * N + j)]);
          const size_t at = size_t(i * N + j);
          ASSERT_NEAR(got[at], want[at], 1e-6 * (1 + std::abs(want[at]))) << i << ", " << j;
          ASSERT_NEAR(got[at], ref, 1e-4 * (1 + std::abs(ref))) << i << ", " << j;
        }
      }
    }
    EXPECT_EQ(fused.stats().replays, 2);
    EXPECT_EQ(fused.stats().fused_launches, 2);
  }
}

// relu(batch_norm(x)) + r in training mode: batch norm's output is read by relu alone (relu
// keeps its output), so relu and the add run in batchnorm_apply's epilogue.
TEST(GraphFusion, ReluAndAnAddAfterBatchNormBecomeItsEpilogueOnEveryDevice) {
  const int64_t N = 3, C = 5, H = 7, W = 9, S = H * W;
  for (Device* device : ops::testing::op_test_devices()) {
    SCOPED_TRACE(device->id());
    FusedSteps fused;
    for (int step = 0; step < 3; ++step) {
      const uint64_t seed = 200 + 10 * uint64_t(step);
      const std::vector<float> xv = random_values(size_t(N * C * S), seed + 1),
                               wv = random_values(size_t(C), seed + 2),
                               bv = random_values(size_t(C), seed + 3),
                               rv = random_values(size_t(N * C * S), seed + 4);
      Tensor x = tensor(xv, {N, C, H, W}, device), w = tensor(wv, {C}, device),
             b = tensor(bv, {C}, device), r = tensor(rv, {N, C, H, W}, device);
      Tensor mean = Tensor::zeros({C}, DType::kF32, device).value();
      Tensor var = Tensor::full({C}, 1.0, DType::kF32, device).value();
      auto f = [&]() -> Expected<Tensor> {
        TESSEL_ASSIGN_OR_RETURN(Tensor y, ops::batch_norm(x, w, b, mean, var, true));
        TESSEL_ASSIGN_OR_RETURN(Tensor z, ops::relu(y));
        return ops::add(z, r);
      };
      Expected<Tensor> eager = f();
      ASSERT_TRUE(eager.ok()) << eager.status().to_string();
      Expected<Tensor> fused_out = run_fused(fused, f);
      ASSERT_TRUE(fused_out.ok()) << fused_out.status().to_string();
      const Tensor& out = *fused_out;
      if (step == 0) {
        ASSERT_EQ(fused.plan()->groups.size(), 1u) << to_string(*fused.graph());
        const FusedGroup& group = fused.plan()->groups[0];
        ASSERT_GE(group.producer, 0) << to_string(*fused.graph());
        EXPECT_EQ(fused.graph()->nodes[size_t(group.producer)].kernel, "batchnorm_apply");
        EXPECT_EQ(group.nodes.size(), 3u);
      }
      const std::vector<float> got = values(out), want = values(*eager);
      for (int64_t c = 0; c < C; ++c) {
        double sum = 0, squares = 0;
        for (int64_t n = 0; n < N; ++n)
          for (int64_t i = 0; i < S; ++i)
            sum += xv[size_t((n * C + c) * S + i)];
        const double m = sum / double(N * S);
        for (int64_t n = 0; n < N; ++n)
          for (int64_t i = 0; i < S; ++i)
            squares += std::pow(xv[size_t((n * C + c) * S + i)] - m, 2);
        const double inv_std = 1.0 / std::sqrt(squares / double(N * S) + 1e-5);
        for (int64_t n = 0; n < N; ++n) {
          for (int64_t i = 0; i < S; ++i) {
            const size_t at = size_t((n * C + c) * S + i);
            const double ref =
                std::max((xv[at] - m) * inv_std * wv[size_t(c)] + bv[size_t(c)], 0.0) + rv[at];
            ASSERT_NEAR(got[at], want[at], 1e-6 * (1 + std::abs(want[at]))) << at;
            ASSERT_NEAR(got[at], ref, 1e-4 * (1 + std::abs(ref))) << at;
          }
        }
      }
    }
    EXPECT_EQ(fused.stats().replays, 2);
    EXPECT_EQ(fused.stats().fused_launches, 2);
  }
}

// Every kind of generated kernel (an element-wise chain, a gemm epilogue, a batch norm
// epilogue) lowers and renders for the CPU, OpenCL and CUDA targets. This machine has no CUDA
// device, so this is what checks the CUDA side here; scripts/gpu_check.sh runs the graph tests
// on a GPU.
TEST(GraphFusion, GeneratedKernelsRenderForEveryTarget) {
  Device* cpu = cpu_device();
  Tensor x = tensor(random_values(6 * 8, 1), {6, 8}, cpu),
         w = tensor(random_values(8 * 8, 2), {8, 8}, cpu);
  Tensor b = tensor(random_values(8, 3), {8}, cpu);
  Tensor x4 = tensor(random_values(2 * 8 * 3 * 3, 4), {2, 8, 3, 3}, cpu);
  Tensor mean = Tensor::zeros({8}, DType::kF32, cpu).value();
  Tensor var = Tensor::full({8}, 1.0, DType::kF32, cpu).value();
  Tensor out1, out2, out3;
  Expected<Graph> g = capture_step([&]() -> Status {
    TESSEL_ASSIGN_OR_RETURN(Tensor t, ops::scale(x, 2.0));
    TESSEL_ASSIGN_OR_RETURN(out1, ops::sigmoid(t));
    TESSEL_ASSIGN_OR_RETURN(Tensor y, ops::linear(x, w, b));
    TESSEL_ASSIGN_OR_RETURN(out2, ops::add(y, x));
    TESSEL_ASSIGN_OR_RETURN(Tensor n, ops::batch_norm(x4, b, b, mean, var, true));
    TESSEL_ASSIGN_OR_RETURN(out3, ops::relu(n));
    return ok_status();
  });
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  const FusionPlan plan = plan_fusion(*g);
  ASSERT_EQ(plan.groups.size(), 3u) << to_string(*g);
  for (const FusedGroup& group : plan.groups) {
    Expected<std::vector<tile::Kernel>> parsed = tile::parse_tile(group.source, "generated.tile");
    ASSERT_TRUE(parsed.ok()) << parsed.status().to_string() << "\n" << group.source;
    ASSERT_EQ(parsed->size(), 1u);
    for (const tile::Target& target :
         {tile::Target::cpu(), tile::Target::opencl(), tile::Target::cuda()}) {
      tile::CompileOptions options;
      options.target = target;
      Expected<tile::Kernel> lowered = tile::compile_ir((*parsed)[0], options);
      ASSERT_TRUE(lowered.ok()) << lowered.status().to_string() << "\n" << group.source;
      EXPECT_FALSE(tile::render(*lowered, target).empty());
    }
  }
}

// A step whose shapes change leaves the graph: it runs eagerly (correct), and the next step is
// captured again.
TEST(GraphFusion, AChangedShapeRunsEagerlyAndIsCapturedAgain) {
  Device* cpu = cpu_device();
  FusedSteps fused;
  for (int64_t n : {8, 8, 9, 9, 9}) {
    Tensor x = tensor(random_values(size_t(n), uint64_t(n)), {n}, cpu);
    Tensor out;
    ASSERT_TRUE(fused
                    .run([&]() -> Status {
                      TESSEL_ASSIGN_OR_RETURN(Tensor t, ops::scale(x, 3.0));
                      TESSEL_ASSIGN_OR_RETURN(out, ops::tanh(t));
                      return ok_status();
                    })
                    .ok());
    const std::vector<float> xv = values(x), got = values(out);
    for (size_t i = 0; i < xv.size(); ++i)
      ASSERT_NEAR(got[i], std::tanh(3.0 * xv[i]), 1e-6);
  }
  EXPECT_EQ(fused.stats().captures, 2);  // n = 8, then n = 9 after the step that diverged
  EXPECT_EQ(fused.stats().diverged, 1);
  EXPECT_EQ(fused.stats().replays, 2);
}

// A training step of a small network with a residual connection, x sigmoid(x) spelled out and a
// plain SGD update made of ops: the residual add becomes the gemm's epilogue, the backward (mul,
// sigmoid's gradient, the sum of the two paths) and the update (scale, sub) fuse. The update
// is first planned as the weight gradient's epilogue, but holding that product's output back
// makes autograd copy it into the fresh leaf's gradient (a launch the capture did not have): the
// step leaves the graph, and the next capture keeps that product out. Fused steps give eager's
// losses and weights throughout.
struct TinyNet {
  Tensor w, b;
};

Expected<double> train_step(TinyNet& net, const Tensor& x, const Tensor& y) {
  Variable w(net.w, true), b(net.b, true);
  TESSEL_ASSIGN_OR_RETURN(Variable h, autograd::linear(Variable(x), w, b) + Variable(x));
  TESSEL_ASSIGN_OR_RETURN(Variable s, autograd::sigmoid(h));
  TESSEL_ASSIGN_OR_RETURN(Variable a, autograd::mul(h, s));
  TESSEL_ASSIGN_OR_RETURN(Variable loss, autograd::cross_entropy(a, Variable(y)));
  TESSEL_TRY(loss.backward());
  for (auto [param, var] : {std::pair{&net.w, &w}, std::pair{&net.b, &b}}) {
    TESSEL_ASSIGN_OR_RETURN(Tensor step, ops::scale(var->grad(), 0.1));
    TESSEL_ASSIGN_OR_RETURN(*param, ops::sub(*param, step));
  }
  TESSEL_ASSIGN_OR_RETURN(std::vector<float> l, loss.data().to_vector<float>());
  return double(l[0]);
}

TEST(GraphFusion, ReplayedTrainingStepsMatchEagerSteps) {
  for (Device* device : ops::testing::op_test_devices()) {
    SCOPED_TRACE(device->id());
    const int64_t B = 16, IN = 7, OUT = 7;  // IN = OUT: the residual
    Tensor x = tensor(random_values(size_t(B * IN), 7), {B, IN}, device);
    std::vector<int64_t> labels(static_cast<size_t>(B));
    for (int64_t i = 0; i < B; ++i)
      labels[size_t(i)] = (i * 5) % OUT;
    Tensor y = Tensor::from_vector<int64_t>(labels, {B}, device).value();
    TinyNet eager{tensor(random_values(size_t(OUT * IN), 8), {OUT, IN}, device),
                  tensor(random_values(size_t(OUT), 9), {OUT}, device)};
    TinyNet fused_net{tensor(values(eager.w), {OUT, IN}, device),
                      tensor(values(eager.b), {OUT}, device)};
    FusedSteps fused;
    for (int step = 0; step < 6; ++step) {
      Expected<double> want = train_step(eager, x, y);
      ASSERT_TRUE(want.ok()) << want.status().to_string();
      Expected<double> got = run_fused(fused, [&] { return train_step(fused_net, x, y); });
      ASSERT_TRUE(got.ok()) << got.status().to_string();
      EXPECT_NEAR(*got, *want, 1e-6) << "step " << step;
    }
    ASSERT_NE(fused.plan(), nullptr);
    EXPECT_GE(fused.plan()->groups.size(), 4u)
        << to_string(*fused.graph(), &fused.plan()->group_of);
    int epilogues = 0;
    for (const FusedGroup& group : fused.plan()->groups)
      epilogues += group.producer >= 0;
    EXPECT_EQ(epilogues, 1) << to_string(*fused.graph(), &fused.plan()->group_of);
    EXPECT_EQ(fused.stats().captures, 2);
    EXPECT_EQ(fused.stats().diverged, 1);
    EXPECT_EQ(fused.stats().replays, 3);
    EXPECT_GT(fused.stats().fused_launches, 0);
    for (auto [a, b] : {std::pair{eager.w, fused_net.w}, std::pair{eager.b, fused_net.b}}) {
      const std::vector<float> va = values(a), vb = values(b);
      for (size_t i = 0; i < va.size(); ++i)
        ASSERT_NEAR(va[i], vb[i], 1e-6) << i;
    }
  }
}

}  // namespace
}  // namespace tessel::graph
