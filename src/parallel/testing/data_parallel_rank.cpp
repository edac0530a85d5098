// One rank of a multi-process data-parallel test (data_parallel_test.cpp starts it through
// dist::launch): trains a tiny GPT with DataParallel for a few steps and, when told to, dies in
// the middle of a step (SIGKILL: no clean-up, no goodbye to the peers), so the test can check
// that the surviving ranks fail with an error naming the dead one instead of hanging.
//
//   data_parallel_rank --zero-stage 2 --steps 6 --die-rank 1 --die-step 3
// Exit codes: 0 done; 1 a step failed (the error is printed to stderr); 2 bad arguments.
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "nn/gpt.h"
#include "parallel/data_parallel.h"

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
  TESSEL_ASSIGN_OR_RETURN(
      auto dp, parallel::DataParallel::create(params, *group, make_adamw,
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

}  // namespace

int main(int argc, char** argv) {
  int zero_stage = 0, steps = 4, die_rank = -1, die_step = -1;
  for (int i = 1; i + 1 < argc; i += 2) {
    const int value = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--zero-stage")) zero_stage = value;
    else if (!std::strcmp(argv[i], "--steps")) steps = value;
    else if (!std::strcmp(argv[i], "--die-rank")) die_rank = value;
    else if (!std::strcmp(argv[i], "--die-step")) die_step = value;
    else {
      std::fprintf(stderr, "unknown argument %s\n", argv[i]);
      return 2;
    }
  }
  Status s = train(zero_stage, steps, die_rank, die_step);
  if (!s.ok()) {
    std::fprintf(stderr, "error: %s\n", s.to_string().c_str());
    return 1;
  }
  return 0;
}
