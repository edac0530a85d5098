// One rank of a multi-process data-parallel test (data_parallel_test.cpp starts it through
// dist::launch): trains a tiny GPT with DataParallel for a few steps and, when told to, dies in
// the middle of a step (SIGKILL: no clean-up, no goodbye to the peers), so the test can check
// that the surviving ranks fail with an error naming the dead one instead of hanging.
//
//   data_parallel_rank --zero-stage 2 --steps 6 --die-rank 1 --die-step 3
//
// With --uneven-rows G it trains tiny_gpt_job.h's job instead, on a global batch of G rows split
// by the rebalancer (parallel/rebalance.h) from each rank's measured compute, re-balanced every
// step without hysteresis; --threads R0,R1,... gives rank r R_r threads of the CPU kernel pool
// (TESSEL_THREADS, set before the pool exists), so that the ranks run at different speeds.
// Rank 0 prints "LOSS <step> <global batch loss>" and "SHARES <step> <rows of rank 0>:<rank 1>..."
// for every step.
// Exit codes: 0 done; 1 a step failed (the error is printed to stderr); 2 bad arguments.
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "nn/gpt.h"
#include "parallel/data_parallel.h"
#include "parallel/rebalance.h"
#include "parallel/testing/tiny_gpt_job.h"

using namespace tessel;

namespace {

Status train(int zero_stage, int steps, int die_rank, int die_step) {
  TESSEL_ASSIGN_OR_RETURN(auto group, dist::ProcessGroup::from_env());
  nn::GPT model({.vocab_size = 16, .block_size = 8, .n_layer = 2, .n_head = 2, .n_embd = 16});
  Pcg32 rng(7, 1);
  TESSEL_ASSIGN_OR_RETURN(nn::FlatParameters params,
                          nn::FlatParameters::create(model, cpu_device(), rng));
  auto make_adamw = [](nn::FlatParameters& p) -> Expected<std::unique_ptr<optim::Optimizer>> {
    TESSEL_ASSIGN_OR_RETURN(auto opt, optim::AdamW::create(p, {}));
    return std::unique_ptr<optim::Optimizer>(std::move(opt));
  };
  TESSEL_ASSIGN_OR_RETURN(auto dp, parallel::DataParallel::create(params, *group, make_adamw,
                                                                  {.zero_stage = zero_stage,
                                                                   .bucket_cap_bytes = 8 << 10,
                                                                   .first_bucket_bytes = 2 << 10}));
  std::vector<int64_t> ids(4 * 8);
  for (size_t i = 0; i < ids.size(); ++i)
    ids[i] = int64_t((i * 7 + size_t(group->rank())) % 16);
  TESSEL_ASSIGN_OR_RETURN(Tensor x, Tensor::from_vector(ids, {4, 8}));
  for (int s = 0; s < steps; ++s) {
    TESSEL_ASSIGN_OR_RETURN(autograd::Variable logits, model.forward(autograd::Variable(x)));
    TESSEL_ASSIGN_OR_RETURN(autograd::Variable loss, model.loss(logits, autograd::Variable(x)));
    if (group->rank() == die_rank && s == die_step) std::raise(SIGKILL);  // mid-step
    TESSEL_TRY(loss.backward());
    TESSEL_TRY(dp->finish_backward());
    TESSEL_TRY(dp->optimizer().step());
    TESSEL_TRY(params.zero_grad());
  }
  return ok_status();
}

// One rank of the uneven job: rows [lo, lo + share) of each global batch of `global_rows`.
Status train_uneven(int zero_stage, int steps, int64_t global_rows) {
  namespace job = parallel::testing;
  TESSEL_ASSIGN_OR_RETURN(auto group, dist::ProcessGroup::from_env());
  const int rank = group->rank();
  nn::GPT model(job::test_gpt());
  Pcg32 rng(7 + uint64_t(rank), 1);  // rank 0's weights reach every rank by broadcast
  TESSEL_ASSIGN_OR_RETURN(nn::FlatParameters params,
                          nn::FlatParameters::create(model, cpu_device(), rng));
  TESSEL_ASSIGN_OR_RETURN(auto dp, parallel::DataParallel::create(params, *group, job::make_adamw,
                                                                  {.zero_stage = zero_stage,
                                                                   .bucket_cap_bytes = 8 << 10,
                                                                   .first_bucket_bytes = 2 << 10}));
  TESSEL_ASSIGN_OR_RETURN(parallel::Rebalancer balance,
                          parallel::Rebalancer::create(global_rows, group->size(),
                                                       {.hysteresis = 0.0, .smoothing = 1.0}));
  for (int s = 0; s < steps; ++s) {
    const std::vector<int64_t> shares = balance.shares();
    int64_t lo = 0;
    for (int q = 0; q < rank; ++q)
      lo += shares[size_t(q)];
    const int64_t rows = shares[size_t(rank)];
    TESSEL_TRY(dp->set_batch_share(rows, global_rows));
    const auto start = std::chrono::steady_clock::now();
    auto [x, y] = job::batch(s, lo, rows);
    TESSEL_ASSIGN_OR_RETURN(autograd::Variable logits, model.forward(autograd::Variable(x)));
    TESSEL_ASSIGN_OR_RETURN(autograd::Variable loss, model.loss(logits, autograd::Variable(y)));
    TESSEL_TRY(loss.backward());
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    TESSEL_TRY(dp->finish_backward());
    TESSEL_TRY(dp->optimizer().step());
    TESSEL_TRY(params.zero_grad());
    TESSEL_ASSIGN_OR_RETURN(std::vector<float> value, loss.data().to_vector<float>());
    double part = double(value.at(0)) * double(rows) / double(global_rows);
    TESSEL_ASSIGN_OR_RETURN(
        dist::Work w, group->all_reduce(&part, 1, dist::DataType::kFloat64, dist::RedOp::kSum));
    TESSEL_TRY(w.wait());
    if (rank == 0) {
      std::string cut;
      for (int64_t share : shares) {
        if (!cut.empty()) cut += ':';
        cut += std::to_string(share);
      }
      std::printf("LOSS %d %.9g\nSHARES %d %s\n", s, part, s, cut.c_str());
    }
    TESSEL_TRY(balance.exchange(*group, rows, seconds).status());
  }
  std::fflush(stdout);
  return ok_status();
}

// "2,1" and rank 1: "1".
std::string nth_of_list(const char* list, int n) {
  std::string s(list);
  for (int i = 0; i < n; ++i) {
    const size_t comma = s.find(',');
    if (comma == std::string::npos) return "";
    s = s.substr(comma + 1);
  }
  return s.substr(0, s.find(','));
}

}  // namespace

int main(int argc, char** argv) {
  int zero_stage = 0, steps = 4, die_rank = -1, die_step = -1, uneven_rows = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    const int value = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--threads")) {
      const char* rank = std::getenv("TESSEL_RANK");
      const std::string threads = nth_of_list(argv[i + 1], rank ? std::atoi(rank) : 0);
      if (!threads.empty()) ::setenv("TESSEL_THREADS", threads.c_str(), 1);
    } else if (!std::strcmp(argv[i], "--uneven-rows"))
      uneven_rows = value;
    else if (!std::strcmp(argv[i], "--zero-stage"))
      zero_stage = value;
    else if (!std::strcmp(argv[i], "--steps"))
      steps = value;
    else if (!std::strcmp(argv[i], "--die-rank"))
      die_rank = value;
    else if (!std::strcmp(argv[i], "--die-step"))
      die_step = value;
    else {
      std::fprintf(stderr, "unknown argument %s\n", argv[i]);
      return 2;
    }
  }
  Status s = uneven_rows > 0 ? train_uneven(zero_stage, steps, uneven_rows)
                             : train(zero_stage, steps, die_rank, die_step);
  if (!s.ok()) {
    std::fprintf(stderr, "error: %s\n", s.to_string().c_str());
    return 1;
  }
  return 0;
}
