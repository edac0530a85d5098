// `tessel bench precision`: training-step time of fp32 against bf16 (and fp16 on request) on the
// workloads of shared/WORKLOADS.md (gpt_mini, gpt_tiny, mlp), in one process, with the ratio to
// fp32. A step is forward, cross-entropy, backward, AdamW (lr 1e-3) on a batch held in memory;
// mixed precision is the trainer's (autograd/autocast.h: the gemm ops compute in 16 bits). The
// precisions take turns in every round, so drift on a shared machine hits them alike; each figure
// is the median over rounds, split into forward (with the loss), backward and optimizer. CPU time
// (all threads, getrusage) is printed beside wall time: on a machine shared with other jobs it
// moves far less than wall time does.
//
//   tessel bench precision                       # gpt_mini, fp32 vs bf16
//   tessel bench precision --workloads gpt_mini,mlp --precisions fp32,bf16,fp16 --json
#include <fmt/format.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "autograd/autocast.h"
#include "autograd/functional.h"
#include "cli/commands.h"
#include "nn/gpt.h"
#include "nn/layers.h"
#include "optim/grad_scaler.h"
#include "optim/optimizer.h"
#include "support/random.h"

namespace tessel::cli {
namespace {

using autograd::Variable;
using Clock = std::chrono::steady_clock;

struct Options {
  std::vector<std::string> workloads = {"gpt_mini"};
  std::vector<std::string> precisions = {"fp32", "bf16"};
  int warmup = 2;
  int rounds = 5;
  bool json = false;
};

// One workload with its parameters, optimizer and a fixed batch.
struct Workload {
  std::string name, unit;
  int64_t items_per_step = 0;  // samples or tokens
  std::unique_ptr<nn::Module> model;
  std::unique_ptr<nn::FlatParameters> params;
  std::unique_ptr<optim::Optimizer> optimizer;
  Tensor inputs, targets;
  bool is_gpt = false;
};

struct StepTimes {
  double forward_ms = 0, backward_ms = 0, optimizer_ms = 0;
  double cpu_ms = 0;  // user + system time of every thread of the process
  double total() const { return forward_ms + backward_ms + optimizer_ms; }
};

Expected<Tensor> random_ids(Shape shape, int64_t vocab, Pcg32& rng) {
  std::vector<int64_t> ids(static_cast<size_t>(shape_numel(shape)));
  for (int64_t& id : ids)
    id = static_cast<int64_t>(rng.below(static_cast<uint32_t>(vocab)));
  return Tensor::from_vector(ids, shape);
}

Expected<Workload> make_workload(const std::string& name) {
  Workload w;
  w.name = name;
  Pcg32 rng(1, 1);
  if (name == "gpt_mini" || name == "gpt_tiny") {
    nn::GptConfig config = name == "gpt_mini" ? nn::gpt_mini() : nn::gpt_tiny();
    const int64_t batch = name == "gpt_mini" ? 8 : 12, t = config.block_size;
    w.model = std::make_unique<nn::GPT>(config);
    w.is_gpt = true;
    w.unit = "tokens/s";
    w.items_per_step = batch * t;
    TESSEL_ASSIGN_OR_RETURN(w.inputs, random_ids({batch, t}, config.vocab_size, rng));
    TESSEL_ASSIGN_OR_RETURN(w.targets, random_ids({batch, t}, config.vocab_size, rng));
  } else if (name == "mlp") {
    w.model = std::make_unique<nn::MLP>(std::vector<int64_t>{784, 512, 256, 10});
    w.unit = "samples/s";
    w.items_per_step = 128;
    std::vector<float> x(128 * 784);
    for (float& v : x)
      v = rng.next_float() * 2.0f - 1.0f;
    TESSEL_ASSIGN_OR_RETURN(w.inputs, Tensor::from_vector(x, {128, 784}));
    TESSEL_ASSIGN_OR_RETURN(w.targets, random_ids({128}, 10, rng));
  } else {
    return invalid_argument("--workloads: '{}' is not one of gpt_mini, gpt_tiny, mlp", name);
  }
  Pcg32 init(1, 2);
  TESSEL_ASSIGN_OR_RETURN(nn::FlatParameters params,
                          nn::FlatParameters::create(*w.model, cpu_device(), init));
  w.params = std::make_unique<nn::FlatParameters>(std::move(params));
  optim::AdamWOptions adamw;
  adamw.lr = 1e-3;
  TESSEL_ASSIGN_OR_RETURN(w.optimizer, optim::AdamW::create(*w.params, adamw));
  return w;
}

double cpu_ms_now() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  auto ms = [](const timeval& t) { return double(t.tv_sec) * 1e3 + double(t.tv_usec) * 1e-3; };
  return ms(u.ru_utime) + ms(u.ru_stime);
}

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

// One training step as the trainer runs it for `precision` (fp16: backward from the scaled loss
// and unscaling, without skipping: the bench's losses stay finite).
Expected<StepTimes> train_step(Workload& w, DType compute, optim::GradScaler* scaler) {
  StepTimes t;
  const double cpu_start = cpu_ms_now();
  Clock::time_point start = Clock::now();
  {
    autograd::Autocast autocast(compute);
    TESSEL_ASSIGN_OR_RETURN(Variable logits, w.model->forward(Variable(w.inputs)));
    Variable loss;
    if (w.is_gpt) {
      TESSEL_ASSIGN_OR_RETURN(loss,
                              static_cast<nn::GPT&>(*w.model).loss(logits, Variable(w.targets)));
    } else {
      TESSEL_ASSIGN_OR_RETURN(loss, autograd::cross_entropy(logits, Variable(w.targets)));
    }
    TESSEL_TRY(loss.data().to_vector<float>());  // as the trainer reads the loss
    t.forward_ms = ms_since(start);
    start = Clock::now();
    if (scaler) {
      TESSEL_ASSIGN_OR_RETURN(Tensor seed,
                              Tensor::full(loss.shape(), scaler->scale(), DType::kF32));
      TESSEL_TRY(loss.backward(seed));
    } else {
      TESSEL_TRY(loss.backward());
    }
  }
  t.backward_ms = ms_since(start);
  start = Clock::now();
  if (scaler) TESSEL_TRY(scaler->unscale(*w.params));
  TESSEL_TRY(w.optimizer->step());
  TESSEL_TRY(w.params->zero_grad());
  t.optimizer_ms = ms_since(start);
  t.cpu_ms = cpu_ms_now() - cpu_start;
  return t;
}

DType dtype_of(const std::string& precision) {
  return precision == "bf16" ? DType::kBF16 : precision == "fp16" ? DType::kF16 : DType::kF32;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

Status run(const Options& o) {
  for (const std::string& p : o.precisions)
    if (p != "fp32" && p != "bf16" && p != "fp16")
      return invalid_argument("--precisions: '{}' is not one of fp32, bf16, fp16", p);
  if (!o.json)
    fmt::print(
        "training step, fp32 against 16-bit gemms (autocast); {} warm-up + {} timed "
        "steps per precision, taking turns; medians\n\n"
        "{:<9} {:<6} {:>9} {:>9} {:>9} {:>9} {:>12} {:>9} {:>9} {:>9}\n",
        o.warmup, o.rounds, "workload", "prec", "step ms", "fwd ms", "bwd ms", "opt ms",
        "throughput", "vs fp32", "cpu ms", "vs fp32");
  for (const std::string& name : o.workloads) {
    TESSEL_ASSIGN_OR_RETURN(Workload w, make_workload(name));
    std::map<std::string, std::unique_ptr<optim::GradScaler>> scalers;
    for (const std::string& p : o.precisions)
      if (p == "fp16") scalers[p] = std::make_unique<optim::GradScaler>();
    std::map<std::string, std::vector<StepTimes>> times;
    for (int round = 0; round < o.warmup + o.rounds; ++round)
      for (const std::string& p : o.precisions) {
        TESSEL_ASSIGN_OR_RETURN(StepTimes t, train_step(w, dtype_of(p), scalers[p].get()));
        if (round >= o.warmup) times[p].push_back(t);
      }
    double fp32_ms = 0, fp32_cpu_ms = 0;
    for (const std::string& p : o.precisions) {
      std::vector<double> total, fwd, bwd, opt, cpu;
      for (const StepTimes& t : times[p]) {
        total.push_back(t.total());
        cpu.push_back(t.cpu_ms);
        fwd.push_back(t.forward_ms);
        bwd.push_back(t.backward_ms);
        opt.push_back(t.optimizer_ms);
      }
      const double step_ms = median(total), cpu_ms = median(cpu);
      if (p == "fp32") {
        fp32_ms = step_ms;
        fp32_cpu_ms = cpu_ms;
      }
      const double ratio = fp32_ms > 0 ? step_ms / fp32_ms : 0.0;
      const double cpu_ratio = fp32_cpu_ms > 0 ? cpu_ms / fp32_cpu_ms : 0.0;
      const double throughput = double(w.items_per_step) / (step_ms / 1000.0);
      if (o.json) {
        nlohmann::json j = {{"workload", name},           {"precision", p},
                            {"step_ms", step_ms},         {"forward_ms", median(fwd)},
                            {"backward_ms", median(bwd)}, {"optimizer_ms", median(opt)},
                            {"throughput", throughput},   {"unit", w.unit}};
        j["cpu_ms"] = cpu_ms;
        if (fp32_ms > 0) {
          j["ratio_to_fp32"] = ratio;
          j["cpu_ratio_to_fp32"] = cpu_ratio;
        }
        fmt::print("{}\n", j.dump());
      } else {
        fmt::print(
            "{:<9} {:<6} {:>9.1f} {:>9.1f} {:>9.1f} {:>9.1f} {:>12.0f} {:>9} {:>9.1f} {:>9}\n",
            name, p, step_ms, median(fwd), median(bwd), median(opt), throughput,
            fp32_ms > 0 ? fmt::format("{:.2f}x", ratio) : "-", cpu_ms,
            fp32_cpu_ms > 0 ? fmt::format("{:.2f}x", cpu_ratio) : "-");
      }
    }
  }
  return ok_status();
}

}  // namespace

void add_bench_precision_command(CLI::App& bench) {
  auto o = std::make_shared<Options>();
  CLI::App* cmd = bench.add_subcommand(
      "precision", "training-step time of fp32 against bf16/fp16 mixed precision, same run");
  cmd->add_option("--workloads", o->workloads, "gpt_mini, gpt_tiny, mlp")->delimiter(',');
  cmd->add_option("--precisions", o->precisions, "fp32, bf16, fp16 (fp32 first for ratios)")
      ->delimiter(',');
  cmd->add_option("--warmup", o->warmup, "untimed steps per precision")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--rounds", o->rounds, "timed steps per precision")->check(CLI::PositiveNumber);
  cmd->add_flag("--json", o->json, "one JSON object per line");
  cmd->callback([o] {
    Status s = run(*o);
    if (!s.ok()) {
      fmt::print(stderr, "tessel bench precision: {}\n", s.to_string());
      exit_code = 1;
    }
  });
}

}  // namespace tessel::cli
