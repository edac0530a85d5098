// A rank whose model computes on the OpenCL device (here PoCL: an OpenCL device on the CPU) beside
// a rank on the CPU, with uneven shares of the global batch: DataParallel keeps the parameters,
// collectives and optimizer in host memory, the OpenCL rank copies the values in before forward
// and its gradients out after backward (copy_values_to, finish_backward_from). Checked against
// one process with the whole batch, for DDP and ZeRO 1, 2 and 3.
//
// Tolerance: the OpenCL kernels are the same tile kernels compiled by another compiler (PoCL's
// LLVM, other vector widths and summation orders), so one step's values differ at the 1e-7
// level as between two CPU ranks; over 8 AdamW steps the losses agree within 5e-5.
#include <gtest/gtest.h>

#include <thread>

#include "parallel/data_parallel.h"
#include "parallel/testing/tiny_gpt_job.h"

namespace tessel::parallel {
namespace {

using autograd::Variable;
using testing::batch;
using testing::make_adamw;
using testing::test_gpt;

constexpr int kSteps = 8;
constexpr double kTolerance = 5e-5;

// Rank 0 on the CPU takes 2 rows, rank 1 on `device` 4 (then 5 and 1, in turn): 6 a step.
std::vector<int64_t> shares(int step) {
  return step % 2 == 0 ? std::vector<int64_t>{2, 4} : std::vector<int64_t>{5, 1};
}

// Rank r's part of each step's global loss (its mean loss x rows / global rows).
std::vector<std::vector<double>> run_cpu_and_device(Device* device, int stage) {
  auto groups = dist::ProcessGroup::in_process(2).value();
  std::vector<std::vector<double>> losses(2);
  std::vector<std::string> errors(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      auto fail = [&](const Status& s) { errors[size_t(r)] = s.to_string(); };
      Device* mine = r == 1 ? device : cpu_device();
      nn::GPT host_model(test_gpt()), device_model(test_gpt());
      Pcg32 rng(7 + uint64_t(r), 1), device_rng(9, 1);
      auto host = nn::FlatParameters::create(host_model, cpu_device(), rng);
      if (!host.ok()) return fail(host.status());
      // Rank 1's model on its device: other weights at first, copy_values_to replaces them.
      auto on_device = nn::FlatParameters::create(device_model, mine, device_rng);
      if (!on_device.ok()) return fail(on_device.status());
      auto dp = DataParallel::create(
          *host, *groups[size_t(r)], make_adamw,
          {.zero_stage = stage, .bucket_cap_bytes = 8 << 10, .first_bucket_bytes = 2 << 10});
      if (!dp.ok()) return fail(dp.status());
      for (int s = 0; s < kSteps; ++s) {
        const std::vector<int64_t> rows = shares(s);
        const int64_t global = rows[0] + rows[1], first = r == 0 ? 0 : rows[0];
        Status st = (*dp)->set_batch_share(rows[size_t(r)], global);
        if (st.ok() && r == 1) st = (*dp)->copy_values_to(*on_device);
        if (!st.ok()) return fail(st);
        nn::GPT& model = r == 1 ? device_model : host_model;
        auto [x, y] = batch(s, first, rows[size_t(r)]);
        auto x_here = x.to(mine);
        auto y_here = y.to(mine);
        if (!x_here.ok() || !y_here.ok()) return fail(x_here.status());
        auto logits = model.forward(Variable(*x_here));
        if (!logits.ok()) return fail(logits.status());
        auto loss = model.loss(*logits, Variable(*y_here));
        if (!loss.ok()) return fail(loss.status());
        st = loss->backward();
        if (st.ok())
          st = r == 1 ? (*dp)->finish_backward_from(*on_device) : (*dp)->finish_backward();
        if (st.ok()) st = (*dp)->optimizer().step();
        if (st.ok()) st = host->zero_grad();
        if (st.ok() && r == 1) st = on_device->zero_grad();
        if (!st.ok()) return fail(st);
        const double value = loss->data().to_vector<float>().value().at(0);
        losses[size_t(r)].push_back(value * double(rows[size_t(r)]) / double(global));
      }
    });
  for (auto& t : threads)
    t.join();
  for (int r = 0; r < 2; ++r)
    EXPECT_EQ(errors[size_t(r)], "") << "stage " << stage << ", rank " << r;
  return losses;
}

TEST(DeviceRank, AnOpenClRankBesideACpuRankTrainsAsOneProcess) {
  Expected<Device*> opencl = get_device("opencl:0");
  if (!opencl.ok()) GTEST_SKIP() << "no OpenCL device: " << opencl.status().to_string();
  const std::vector<double> want = testing::one_process_losses(6, kSteps).value();
  ASSERT_LT(want.back(), want.front() - 0.05) << "the reference run does not learn";
  for (int stage = 0; stage <= 3; ++stage) {
    const auto per_rank = run_cpu_and_device(*opencl, stage);
    ASSERT_EQ(per_rank[0].size(), want.size());
    ASSERT_EQ(per_rank[1].size(), want.size());
    for (size_t s = 0; s < want.size(); ++s)
      EXPECT_NEAR(per_rank[0][s] + per_rank[1][s], want[s], kTolerance)
          << "ZeRO stage " << stage << ", step " << s;
  }
}

// The same path with the CPU as the "device": no other compiler involved, so the DDP tolerance.
TEST(DeviceRank, TheHostCopyPathMatchesOneProcessOnTheCpuToo) {
  const std::vector<double> want = testing::one_process_losses(6, kSteps).value();
  for (int stage : {0, 2, 3}) {
    const auto per_rank = run_cpu_and_device(cpu_device(), stage);
    ASSERT_EQ(per_rank[1].size(), want.size());
    for (size_t s = 0; s < want.size(); ++s)
      EXPECT_NEAR(per_rank[0][s] + per_rank[1][s], want[s], 2e-5)
          << "ZeRO stage " << stage << ", step " << s;
  }
}

TEST(DeviceRank, AMirrorOfAnotherModelIsAnError) {
  auto groups = dist::ProcessGroup::in_process(1).value();
  nn::GPT model(test_gpt()), twin(test_gpt());
  nn::GPT deeper({.vocab_size = 16, .block_size = 8, .n_layer = 3, .n_head = 2, .n_embd = 16});
  Pcg32 rng(7, 1);
  auto params = nn::FlatParameters::create(model, cpu_device(), rng).value();
  auto other = nn::FlatParameters::create(deeper, cpu_device(), rng).value();
  auto same = nn::FlatParameters::create(twin, cpu_device(), rng).value();
  auto dp = DataParallel::create(params, *groups[0], make_adamw, {}).value();
  for (Status s : {dp->copy_values_to(other), dp->finish_backward_from(other)}) {
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.message().find("not laid out as the data-parallel ones"), std::string::npos)
        << s.to_string();
  }
  ASSERT_TRUE(dp->copy_values_to(same).ok());
  EXPECT_EQ(same.groups()[0].values.to_vector<float>().value(),
            params.groups()[0].values.to_vector<float>().value());
}

}  // namespace
}  // namespace tessel::parallel
