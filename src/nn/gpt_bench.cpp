// Training-step time of the GPT workloads of shared/WORKLOADS.md (gpt_tiny by default), beside
// PyTorch's when it is installed: forward, cross-entropy, backward, AdamW (lr 1e-3), one fill
// of the gradients, on random ids held in memory. The two run one after the other, in turns, so
// that a machine whose speed drifts slows both alike; the ratio is what to read.
//
//   tessel_gpt_bench [--workload gpt_tiny|gpt_mini] [--steps 30] [--rounds 3]
//                    [--python /opt/torchenv/bin/python] [--threads 2]
//
// PyTorch runs tools/pytorch/gpt_step_bench.py (found from TESSEL_SOURCE_DIR or the working
// directory) with torch.set_num_threads(--threads); tessel uses its thread pool
// (TESSEL_THREADS). Each prints the median step time of `steps` steps after 5 warm-up steps.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "autograd/variable.h"
#include "nn/gpt.h"
#include "optim/optimizer.h"

namespace tessel {
namespace {

struct Options {
  std::string workload = "gpt_tiny";
  int steps = 30;
  int rounds = 3;
  int threads = 2;
  std::string python = "/opt/torchenv/bin/python";
};

Expected<double> tessel_median_ms(const nn::GptConfig& config, int64_t batch, int steps) {
  nn::GPT model(config);
  Pcg32 rng(1, 1);
  TESSEL_ASSIGN_OR_RETURN(nn::FlatParameters params,
                          nn::FlatParameters::create(model, cpu_device(), rng));
  TESSEL_ASSIGN_OR_RETURN(auto adamw, optim::AdamW::create(params, {.lr = 1e-3}));
  std::vector<int64_t> ids(static_cast<size_t>(batch * config.block_size)), targets(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    ids[i] = rng.below(static_cast<uint32_t>(config.vocab_size));
    targets[i] = rng.below(static_cast<uint32_t>(config.vocab_size));
  }
  TESSEL_ASSIGN_OR_RETURN(Tensor x, Tensor::from_vector(ids, {batch, config.block_size}));
  TESSEL_ASSIGN_OR_RETURN(Tensor y, Tensor::from_vector(targets, {batch, config.block_size}));
  std::vector<double> ms;
  for (int i = 0; i < 5 + steps; ++i) {
    const auto start = std::chrono::steady_clock::now();
    {
      TESSEL_ASSIGN_OR_RETURN(autograd::Variable logits, model.forward(autograd::Variable(x)));
      TESSEL_ASSIGN_OR_RETURN(autograd::Variable loss, model.loss(logits, autograd::Variable(y)));
      TESSEL_TRY(loss.backward());
    }
    TESSEL_TRY(adamw->step());
    TESSEL_TRY(params.zero_grad());
    const double t =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
            .count();
    if (i >= 5) ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

std::string script_path() {
  const char* source = std::getenv("TESSEL_SOURCE_DIR");
  std::filesystem::path root = source ? source : std::filesystem::current_path();
  return (root / "tools/pytorch/gpt_step_bench.py").string();
}

// The median step of PyTorch in ms, or a negative number when it could not run.
double pytorch_median_ms(const Options& o, int steps) {
  const std::string script = script_path();
  if (!std::filesystem::exists(script) || !std::filesystem::exists(o.python)) return -1.0;
  const std::string command = fmt::format("{} {} --workload {} --steps {} --threads {}", o.python,
                                          script, o.workload, steps, o.threads);
  std::FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) return -1.0;
  char line[256] = {};
  double ms = -1.0;
  while (std::fgets(line, sizeof(line), pipe))
    std::sscanf(line, "median_ms %lf", &ms);
  pclose(pipe);
  return ms;
}

int run(const Options& o) {
  const bool tiny = o.workload == "gpt_tiny";
  const nn::GptConfig config = tiny ? nn::gpt_tiny() : nn::gpt_mini();
  const int64_t batch = tiny ? 12 : 8;
  const double tokens = double(batch * config.block_size);
  fmt::print("{}: {} x {} tokens, AdamW; median step of {} steps, {} rounds\n", o.workload, batch,
             config.block_size, o.steps, o.rounds);
  fmt::print("{:>5}  {:>10}  {:>12}  {:>10}  {:>12}  {:>6}\n", "round", "tessel ms", "tessel tok/s",
             "torch ms", "torch tok/s", "ratio");
  std::vector<double> ratios;
  for (int r = 0; r < o.rounds; ++r) {
    Expected<double> ours = tessel_median_ms(config, batch, o.steps);
    if (!ours.ok()) {
      fmt::print(stderr, "error: {}\n", ours.status().message());
      return 1;
    }
    const double theirs = pytorch_median_ms(o, o.steps);
    if (theirs > 0) {
      ratios.push_back(theirs / *ours);
      fmt::print("{:>5}  {:>10.2f}  {:>12.0f}  {:>10.2f}  {:>12.0f}  {:>5.2f}x\n", r, *ours,
                 tokens / *ours * 1e3, theirs, tokens / theirs * 1e3, theirs / *ours);
    } else {
      fmt::print("{:>5}  {:>10.2f}  {:>12.0f}  {:>10}  {:>12}  {:>6}\n", r, *ours,
                 tokens / *ours * 1e3, "-", "-", "-");
    }
  }
  if (ratios.empty()) {
    fmt::print("PyTorch did not run ({} with {})\n", o.python, script_path());
  } else {
    std::sort(ratios.begin(), ratios.end());
    fmt::print("median ratio (tessel throughput / PyTorch's): {:.2f}x\n",
               ratios[ratios.size() / 2]);
  }
  return 0;
}

}  // namespace
}  // namespace tessel

int main(int argc, char** argv) {
  tessel::Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string key = argv[i], value = argv[i + 1];
    if (key == "--workload" && (value == "gpt_tiny" || value == "gpt_mini")) o.workload = value;
    else if (key == "--steps") o.steps = std::max(1, std::atoi(value.c_str()));
    else if (key == "--rounds") o.rounds = std::max(1, std::atoi(value.c_str()));
    else if (key == "--threads") o.threads = std::max(1, std::atoi(value.c_str()));
    else if (key == "--python") o.python = value;
    else {
      std::fprintf(stderr, "usage: %s [--workload gpt_tiny|gpt_mini] [--steps N] [--rounds N] "
                           "[--threads N] [--python PATH]\n", argv[0]);
      return 2;
    }
  }
  return tessel::run(o);
}
