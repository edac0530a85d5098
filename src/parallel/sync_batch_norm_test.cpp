// SyncBatchNorm (sync_batch_norm.h) against one process with the whole batch: ranks (threads of
// this process on the shm backend) train a small conv net with two BatchNorm2d layers on their
// parts of each global batch, with DataParallel, and must compute what one process computes with
// plain (per-process) batch norm on all of it: the same losses over several AdamW steps, the same
// gradient of the input rows, and the same running statistics, with even shares (PyTorch's
// SyncBatchNorm under DDP) and with uneven ones that change every step (the weighting of the
// backward's all-reduce). The reference is the fused batch_norm op, which ops_test checks against
// PyTorch; the synchronised layers compose other ops, so agreement is at rounding level.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <map>
#include <thread>

#include "nn/conv_layers.h"
#include "nn/layers.h"
#include "parallel/data_parallel.h"
#include "parallel/sync_batch_norm.h"
#include "parallel/testing/tiny_gpt_job.h"

namespace tessel::parallel {
namespace {

using autograd::Variable;

constexpr int kSteps = 8;
constexpr double kLossTolerance = 2e-5;  // data_parallel_test's

// conv -> BN -> relu -> conv (stride 2) -> BN -> relu -> mean over H, W -> linear. The convs have
// no bias, as in a ResNet: batch norm cancels a bias, whose gradient is then rounding noise that
// AdamW's normalisation would turn into steps of lr in a random direction, moving the running
// means differently in any two runs.
class BnNet : public nn::Module {
 public:
  BnNet() {
    conv1_ = &register_module(
        "conv1",
        std::make_unique<nn::Conv2d>(3, 4, 3, nn::Conv2dOptions{.padding = 1, .bias = false}));
    bn1_ = &register_module("bn1", std::make_unique<nn::BatchNorm2d>(4));
    conv2_ = &register_module(
        "conv2", std::make_unique<nn::Conv2d>(
                     4, 6, 3, nn::Conv2dOptions{.stride = 2, .padding = 1, .bias = false}));
    bn2_ = &register_module("bn2", std::make_unique<nn::BatchNorm2d>(6));
    fc_ = &register_module("fc", std::make_unique<nn::Linear>(6, 3));
  }
  Expected<Variable> forward(const Variable& x) override {
    TESSEL_ASSIGN_OR_RETURN(Variable h, autograd::relu((*bn1_)((*conv1_)(x)).value()));
    TESSEL_ASSIGN_OR_RETURN(h, autograd::relu((*bn2_)((*conv2_)(h)).value()));
    TESSEL_ASSIGN_OR_RETURN(h, autograd::mean(h, {2, 3}));
    return (*fc_)(h);
  }
  std::string type_name() const override { return "BnNet"; }

 private:
  nn::Module *conv1_, *bn1_, *conv2_, *bn2_, *fc_;
};

// Rows [first, first + rows) of step `step`'s global batch: images [rows, 3, 6, 6] and labels.
std::pair<Tensor, Tensor> images(int step, int64_t first, int64_t rows) {
  std::vector<float> x;
  std::vector<int64_t> y;
  for (int64_t row = first; row < first + rows; ++row) {
    Pcg32 rng(500 + uint64_t(step % 2), uint64_t(row));
    const int64_t label = int64_t(rng.below(3));
    y.push_back(label);
    for (int i = 0; i < 3 * 36; ++i)  // the label shifts the first channel: learnable
      x.push_back(rng.next_float() * 2.0f - 1.0f + (i < 36 ? float(label) : 0.0f));
  }
  return {Tensor::from_vector<float>(x, {rows, 3, 6, 6}).value(),
          Tensor::from_vector<int64_t>(y, {rows}).value()};
}

struct Result {
  std::vector<double> losses;     // per step: the global batch's mean loss
  std::vector<float> input_grad;  // step 0: d loss / d input, every row in order
  std::map<std::string, std::vector<double>> buffers;  // after the last step
};

std::map<std::string, std::vector<double>> buffers_of(nn::Module& model) {
  std::map<std::string, std::vector<double>> out;
  for (auto& [name, buffer] : model.named_buffers()) {
    std::vector<double>& v = out[name];
    if (buffer->tensor.dtype() == DType::kI64) {
      const std::vector<int64_t> values = buffer->tensor.to_vector<int64_t>().value();
      v.assign(values.begin(), values.end());
    } else {
      const std::vector<float> values = buffer->tensor.to_vector<float>().value();
      v.assign(values.begin(), values.end());
    }
  }
  return out;
}

Result one_process(int64_t rows) {
  BnNet model;
  Pcg32 rng(7, 1);
  auto params = nn::FlatParameters::create(model, cpu_device(), rng).value();
  auto opt = testing::make_adamw(params).value();
  Result r;
  for (int s = 0; s < kSteps; ++s) {
    auto [x, y] = images(s, 0, rows);
    Variable input(x, /*requires_grad=*/s == 0);
    Variable loss = autograd::cross_entropy(model(input).value(), Variable(y)).value();
    EXPECT_TRUE(loss.backward().ok());
    if (s == 0) r.input_grad = input.grad().to_vector<float>().value();
    r.losses.push_back(loss.item().value());
    EXPECT_TRUE(opt->step().ok());
    EXPECT_TRUE(params.zero_grad().ok());
  }
  r.buffers = buffers_of(model);
  return r;
}

// `n` ranks with shares(step) rows each, synchronised batch norm; per rank: its buffers, and
// rank 0's Result carries the global losses and every rank's input-gradient rows.
Result ranks(int n, int zero_stage, const std::function<std::vector<int64_t>(int)>& shares,
             std::vector<std::map<std::string, std::vector<double>>>* rank_buffers) {
  auto groups = dist::ProcessGroup::in_process(n).value();
  std::vector<std::string> errors(static_cast<size_t>(n));
  std::vector<std::vector<double>> losses(static_cast<size_t>(n));
  std::vector<std::vector<float>> grads(static_cast<size_t>(n));
  rank_buffers->assign(size_t(n), {});
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      auto fail = [&](const Status& s) { errors[size_t(r)] = s.to_string(); };
      BnNet model;
      Pcg32 rng(7 + uint64_t(r), 1);  // rank 0's weights reach the others by broadcast
      auto params = nn::FlatParameters::create(model, cpu_device(), rng);
      if (!params.ok()) return fail(params.status());
      auto dp = DataParallel::create(
          *params, *groups[size_t(r)], testing::make_adamw,
          {.zero_stage = zero_stage, .bucket_cap_bytes = 1 << 10, .first_bucket_bytes = 256});
      if (!dp.ok()) return fail(dp.status());
      auto converted = convert_sync_batchnorm(model, *groups[size_t(r)], dp->get());
      if (!converted.ok()) return fail(converted.status());
      if ((*converted)->layers() != 2)
        return fail(internal_error("converted {} layers", (*converted)->layers()));
      for (int s = 0; s < kSteps; ++s) {
        const std::vector<int64_t> share = shares(s);
        int64_t first = 0, global = 0;
        for (int q = 0; q < n; ++q) {
          if (q < r) first += share[size_t(q)];
          global += share[size_t(q)];
        }
        const int64_t rows = share[size_t(r)];
        Status st = (*dp)->set_batch_share(rows, global);
        if (!st.ok()) return fail(st);
        auto [x, y] = images(s, first, rows);
        Variable input(x, /*requires_grad=*/s == 0);
        auto loss = autograd::cross_entropy(model(input).value(), Variable(y));
        if (!loss.ok()) return fail(loss.status());
        st = loss->backward();
        if (st.ok()) st = (*dp)->finish_backward();
        if (st.ok()) st = (*dp)->optimizer().step();
        if (st.ok()) st = params->zero_grad();
        if (!st.ok()) return fail(st);
        // Rank r's loss counts rows / global in the whole batch's mean, and so does its input
        // gradient (the backward's all-reduce divides by this rank's weight).
        const double part = double(rows) / double(global);
        losses[size_t(r)].push_back(loss->item().value() * part);
        if (s == 0) {
          const std::vector<float> grad = input.grad().to_vector<float>().value();
          for (float g : grad)
            grads[size_t(r)].push_back(float(g * part));
        }
      }
      (*rank_buffers)[size_t(r)] = buffers_of(model);
    });
  for (auto& t : threads)
    t.join();
  Result out;
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(errors[size_t(r)], "") << "rank " << r;
    out.losses.resize(losses[size_t(r)].size());
    for (size_t s = 0; s < losses[size_t(r)].size(); ++s)
      out.losses[s] += losses[size_t(r)][s];
    out.input_grad.insert(out.input_grad.end(), grads[size_t(r)].begin(), grads[size_t(r)].end());
  }
  out.buffers = (*rank_buffers)[0];
  return out;
}

void expect_one_process(int n, int zero_stage,
                        const std::function<std::vector<int64_t>(int)>& shares,
                        const std::string& what) {
  int64_t global = 0;
  for (int64_t rows : shares(0))
    global += rows;
  const Result want = one_process(global);
  std::vector<std::map<std::string, std::vector<double>>> rank_buffers;
  const Result got = ranks(n, zero_stage, shares, &rank_buffers);
  ASSERT_EQ(got.losses.size(), want.losses.size()) << what;
  for (size_t s = 0; s < want.losses.size(); ++s)
    EXPECT_NEAR(got.losses[s], want.losses[s], kLossTolerance) << what << ", step " << s;
  EXPECT_LT(want.losses.back(), want.losses.front() - 0.05) << what << ": it must learn";
  ASSERT_EQ(got.input_grad.size(), want.input_grad.size()) << what;
  double scale = 0;
  for (float g : want.input_grad)
    scale = std::max(scale, double(std::abs(g)));
  for (size_t i = 0; i < want.input_grad.size(); ++i)
    ASSERT_NEAR(got.input_grad[i], want.input_grad[i], 1e-4 * scale) << what << ", element " << i;
  for (int r = 0; r < n; ++r)
    for (const auto& [name, values] : want.buffers) {
      const std::vector<double>& mine = rank_buffers[size_t(r)][name];
      ASSERT_EQ(mine.size(), values.size()) << what << ", " << name;
      for (size_t i = 0; i < values.size(); ++i)
        EXPECT_NEAR(mine[i], values[i], 1e-5 * (1 + std::abs(values[i])))
            << what << ", rank " << r << ", " << name << "[" << i << "]";
    }
}

TEST(SyncBatchNorm, EvenSharesUnderDdpEqualOneProcess) {
  expect_one_process(
      2, 0,
      [](int) {
        return std::vector<int64_t>{3, 3};
      },
      "2 ranks, even");
}

TEST(SyncBatchNorm, UnevenSharesThatMoveEqualOneProcess) {
  auto shares = [](int step) {
    static const std::vector<std::vector<int64_t>> cycle = {{1, 5}, {4, 2}, {5, 1}};
    return cycle[size_t(step) % cycle.size()];
  };
  expect_one_process(2, 0, shares, "2 ranks, uneven, DDP");
  expect_one_process(2, 3, shares, "2 ranks, uneven, ZeRO-3");
}

TEST(SyncBatchNorm, ThreeUnevenRanksEqualOneProcess) {
  auto shares = [](int step) {
    return step % 2 == 0 ? std::vector<int64_t>{1, 2, 4} : std::vector<int64_t>{3, 3, 1};
  };
  expect_one_process(3, 0, shares, "3 ranks, uneven");
}

TEST(SyncBatchNorm, PerRankStatisticsDoNotEqualOneProcess) {
  // The control: without synchronisation an uneven split normalises each part by its own
  // statistics, and the same check fails (the reason SyncBatchNorm exists).
  const Result want = one_process(6);
  auto groups = dist::ProcessGroup::in_process(2).value();
  // Rank r's rows [first, first + rows) of 6, plain batch norm; its part of the global loss.
  auto rank_loss = [&](int r, int64_t first, int64_t rows, double* part) {
    BnNet model;
    Pcg32 rng(7, 1);
    auto params = nn::FlatParameters::create(model, cpu_device(), rng).value();
    auto dp = DataParallel::create(params, *groups[size_t(r)], testing::make_adamw, {}).value();
    ASSERT_TRUE(dp->set_batch_share(rows, 6).ok());
    auto [x, y] = images(0, first, rows);
    Variable loss = autograd::cross_entropy(model(Variable(x)).value(), Variable(y)).value();
    ASSERT_TRUE(loss.backward().ok());
    ASSERT_TRUE(dp->finish_backward().ok());
    ASSERT_TRUE(dp->optimizer().step().ok());
    *part = loss.item().value() * double(rows) / 6;
  };
  double part0 = 0, part1 = 0;
  std::thread other([&] { rank_loss(1, 1, 5, &part1); });
  rank_loss(0, 0, 1, &part0);  // one row still has 6 x 6 values per channel
  other.join();
  const double global = part0 + part1;
  EXPECT_GT(std::abs(global - want.losses[0]), 100 * kLossTolerance);
}

}  // namespace
}  // namespace tessel::parallel
