// `tessel bench conv`: the convolution layers of ResNet-50 (ImageNet, 224 x 224, batch 8) and
// ResNet-18 (CIFAR stem, 32 x 32, batch 32) as the bench train workloads run them, forward and
// both backward passes, tessel's conv2d op (ops/conv_ops.cpp) next to oneDNN's convolution
// primitives (bench_conv_peer.h) in the same run. The two take turns in every repetition, each
// call timed alone after the other's threads have stopped spinning and right after an untimed
// call of its own (warm caches on both sides); GFLOP/s from the median (or the minimum).
// Every shape appears once (the first layer that has it names it).
//
//   tessel bench conv [--nets resnet50,resnet18] [--passes fwd,bwd_data,bwd_weight]
//                     [--layers NAME,...] [--batch N] [--reps N] [--clock wall|cpu]
//                     [--stat median|min] [--json]
#include <time.h>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>

#include "cli/bench_conv_peer.h"
#include "cli/commands.h"
#include "ops/conv_winograd.h"
#include "ops/op.h"
#include "ops/ops.h"
#include "support/log.h"
#include "support/random.h"
#include "support/thread_pool.h"
#include "tune/choices.h"

namespace tessel::cli {
namespace {

struct Layer {
  std::string name;  // "resnet50.layer2.0.conv2"
  ConvLayerShape shape;
};

// Adds a k x k convolution of h x h images (padding k / 2, as torchvision's) under `name`, unless
// a layer of the same shape is there already.
void add_layer(std::vector<Layer>& layers, const std::string& name, int64_t batch, int64_t c,
               int64_t o, int64_t k, int64_t stride, int64_t h) {
  const ConvLayerShape s{batch, c, h, h, o, k, stride, k / 2};
  for (const Layer& l : layers) {
    const ConvLayerShape& t = l.shape;
    if (t.n == s.n && t.c == s.c && t.h == s.h && t.w == s.w && t.o == s.o && t.k == s.k &&
        t.stride == s.stride && t.pad == s.pad)
      return;
  }
  layers.push_back({name, s});
}

// The convolutions of torchvision's ResNet-50 (v1.5: the stride on the 3x3) at `image` pixels,
// the names its state dict gives them.
std::vector<Layer> resnet50_layers(int64_t batch, int64_t image) {
  std::vector<Layer> layers;
  auto conv = [&](const std::string& name, auto... sizes) {
    add_layer(layers, "resnet50." + name, batch, sizes...);
  };
  conv("conv1", 3, 64, 7, 2, image);
  int64_t in = 64, h = (image / 2 + 1) / 2;  // after the stem's stride and the 3x3/2 max-pool
  const int64_t blocks[4] = {3, 4, 6, 3};
  for (int stage = 0; stage < 4; ++stage) {
    const int64_t planes = 64 << stage, stride = stage > 0 ? 2 : 1;
    for (int64_t b = 0; b < blocks[stage]; ++b) {
      const std::string prefix = fmt::format("layer{}.{}.", stage + 1, b);
      const int64_t s = b == 0 ? stride : 1;
      conv(prefix + "conv1", in, planes, 1, 1, h);
      conv(prefix + "conv2", planes, planes, 3, s, h);
      const int64_t out_h = (h - 1) / s + 1;
      conv(prefix + "conv3", planes, 4 * planes, 1, 1, out_h);
      if (b == 0) conv(prefix + "downsample.0", in, 4 * planes, 1, s, h);
      in = 4 * planes;
      h = out_h;
    }
  }
  return layers;
}

// ResNet-18 with the CIFAR stem (3x3, stride 1, no max-pool), as nn::ResNet builds it.
std::vector<Layer> resnet18_layers(int64_t batch, int64_t image) {
  std::vector<Layer> layers;
  auto conv = [&](const std::string& name, auto... sizes) {
    add_layer(layers, "resnet18." + name, batch, sizes...);
  };
  conv("conv1", 3, 64, 3, 1, image);
  int64_t in = 64, h = image;
  for (int stage = 0; stage < 4; ++stage) {
    const int64_t planes = 64 << stage, stride = stage > 0 ? 2 : 1;
    for (int64_t b = 0; b < 2; ++b) {
      const std::string prefix = fmt::format("layer{}.{}.", stage + 1, b);
      const int64_t s = b == 0 ? stride : 1;
      const int64_t out_h = (h - 1) / s + 1;
      conv(prefix + "conv1", in, planes, 3, s, h);
      conv(prefix + "conv2", planes, planes, 3, 1, out_h);
      if (b == 0 && (s != 1 || in != planes)) conv(prefix + "downsample.0", in, planes, 1, s, h);
      in = planes;
      h = out_h;
    }
  }
  return layers;
}

Expected<Tensor> random_tensor(const Shape& shape, Pcg32& rng, float scale) {
  std::vector<float> v(size_t(shape_numel(shape)));
  for (float& x : v)
    x = scale * (2.0f * float(rng.next_u32()) * 0x1p-32f - 1.0f);
  return Tensor::from_vector(v, shape);
}

// tessel's conv2d op for one pass of one layer, with its tensors.
class TesselConv {
 public:
  static ops::TensorMeta meta(const Tensor& t) { return {t.shape(), t.dtype()}; }

  static Expected<std::unique_ptr<TesselConv>> make(const ConvLayerShape& s, ConvPass pass,
                                                    Pcg32& rng) {
    auto t = std::make_unique<TesselConv>();
    t->pass_ = pass;
    t->attrs_.set("stride", std::vector<int64_t>{s.stride, s.stride})
        .set("padding", std::vector<int64_t>{s.pad, s.pad});
    TESSEL_ASSIGN_OR_RETURN(t->x_, random_tensor({s.n, s.c, s.h, s.w}, rng, 1.0f));
    TESSEL_ASSIGN_OR_RETURN(t->w_, random_tensor({s.o, s.c, s.k, s.k}, rng, 0.05f));
    TESSEL_ASSIGN_OR_RETURN(t->b_, Tensor::zeros({s.o}, DType::kF32));
    TESSEL_ASSIGN_OR_RETURN(t->dy_, random_tensor({s.n, s.o, s.out_h(), s.out_w()}, rng, 1.0f));
    TESSEL_ASSIGN_OR_RETURN(t->op_, ops::find_op("conv2d"));
    return t;
  }

  Status run() {
    if (pass_ == ConvPass::kForward) {
      TESSEL_ASSIGN_OR_RETURN(Tensor y, ops::run("conv2d", {x_, w_, b_}, attrs_));
      (void)y;
      return ok_status();
    }
    ops::BackwardArgs args{
        {x_, w_, b_},
        Tensor(),
        {meta(x_), meta(w_), meta(b_)},
        attrs_,
        dy_,
        {pass_ == ConvPass::kBackwardData, pass_ == ConvPass::kBackwardWeights, false},
        {}};
    TESSEL_ASSIGN_OR_RETURN(std::vector<Tensor> grads, op_->backward(args));
    (void)grads;
    return ok_status();
  }

 private:
  ConvPass pass_ = ConvPass::kForward;
  ops::Attrs attrs_;
  Tensor x_, w_, b_, dy_;
  const ops::OpDef* op_ = nullptr;
};

// Wall time, or with `cpu` the process's CPU time (all its threads): on a machine other jobs
// keep busy, the time a call was descheduled is not its cost, and with one thread
// (TESSEL_THREADS=1, which oneDNN gets too) the CPU time is the call's work alone.
double now_seconds(bool cpu) {
  if (cpu) {
    timespec t{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

struct Options {
  std::vector<std::string> nets = {"resnet50", "resnet18"};
  std::vector<std::string> passes = {"fwd", "bwd_data", "bwd_weight"};
  std::vector<std::string> layers;  // empty: all
  int64_t batch = 0;                // 0: the workload's (8 for ResNet-50, 32 for ResNet-18)
  int reps = 5;
  std::string clock = "wall";
  std::string stat = "median";
  bool json = false;
};

Status run_bench(const Options& o) {
  if (o.reps < 1) return invalid_argument("--reps must be >= 1, got {}", o.reps);
  if (o.clock != "wall" && o.clock != "cpu")
    return invalid_argument("--clock: {} is not wall or cpu", o.clock);
  const bool cpu_clock = o.clock == "cpu";
  if (o.stat != "median" && o.stat != "min")
    return invalid_argument("--stat: {} is not median or min", o.stat);
  // The fastest run is the one least disturbed by other work on a shared machine.
  auto summary = [&](const std::vector<double>& t) {
    return o.stat == "min" ? *std::min_element(t.begin(), t.end()) : median(t);
  };
  std::vector<ConvPass> passes;
  for (const std::string& p : o.passes) {
    bool found = false;
    for (ConvPass c : {ConvPass::kForward, ConvPass::kBackwardData, ConvPass::kBackwardWeights})
      if (p == conv_pass_name(c)) {
        passes.push_back(c);
        found = true;
      }
    if (!found) return invalid_argument("--passes: {} is not fwd, bwd_data or bwd_weight", p);
  }
  std::vector<Layer> layers;
  for (const std::string& net : o.nets) {
    std::vector<Layer> add;
    if (net == "resnet50")
      add = resnet50_layers(o.batch > 0 ? o.batch : 8, 224);
    else if (net == "resnet18")
      add = resnet18_layers(o.batch > 0 ? o.batch : 32, 32);
    else
      return invalid_argument("--nets: {} is not resnet50 or resnet18", net);
    for (Layer& l : add)
      if (o.layers.empty() || std::find(o.layers.begin(), o.layers.end(), l.name) != o.layers.end())
        layers.push_back(std::move(l));
  }
  const int threads = ThreadPool::global().num_threads();
  std::string why;
  std::unique_ptr<ConvPeer> dnnl = load_onednn_conv(threads, &why);
  if (!o.json) {
    std::printf(
        "# tessel bench conv: f32, %d threads; GFLOP/s (2 x multiply-adds / %s %s time of %d "
        "runs, taking turns)\n",
        threads, o.stat.c_str(), cpu_clock ? "CPU" : "wall", o.reps);
    std::printf("# peer: %s\n", dnnl ? dnnl->describe().c_str() : why.c_str());
    // Tuned kernel specialisations and algorithm choices change tessel's rows.
    std::printf("# tuning database: %s\n", tune::TuneChoices::global().describe().c_str());
    std::printf(
        "# a pass marked * ran as Winograd F(4x4, 3x3): its GFLOP/s are effective (a direct "
        "convolution's flops over Winograd's time)\n");
    std::printf("%-32s %-26s %-10s %9s %9s %7s\n", "layer", "shape (n c h w -> o k/s)", "pass",
                "tessel", "onednn", "ratio");
  } else if (!dnnl) {
    log_warn("bench conv: {}", why);
  }
  Pcg32 rng(1234, 54);
  std::vector<double> ratios;
  for (const Layer& layer : layers) {
    const ConvLayerShape& s = layer.shape;
    for (ConvPass pass : passes) {
      TESSEL_ASSIGN_OR_RETURN(std::unique_ptr<TesselConv> tessel, TesselConv::make(s, pass, rng));
      std::unique_ptr<ConvPrimitive> peer;
      if (dnnl) {
        TESSEL_ASSIGN_OR_RETURN(peer, dnnl->prepare(s, pass));
      }
      // One untimed call each (kernel compiles, page faults), then turns. In every turn each
      // side makes an untimed call of the same pass right before its timed one: otherwise a
      // timed call found the caches holding the other side's tensors (and, after a peer's
      // call, its threads' working sets), and the first side of a turn paid for refilling them.
      const int64_t winograd_before = ops::winograd_runs();
      TESSEL_TRY(tessel->run().with_context("{} {}", layer.name, conv_pass_name(pass)));
      const bool winograd = ops::winograd_runs() > winograd_before;
      if (peer) TESSEL_TRY(peer->run());
      std::vector<double> t_tessel, t_peer;
      for (int r = 0; r < o.reps; ++r) {
        TESSEL_TRY(tessel->run());
        double start = now_seconds(cpu_clock);
        TESSEL_TRY(tessel->run());
        t_tessel.push_back(now_seconds(cpu_clock) - start);
        if (!peer) continue;
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
        TESSEL_TRY(peer->run());
        start = now_seconds(cpu_clock);
        TESSEL_TRY(peer->run());
        t_peer.push_back(now_seconds(cpu_clock) - start);
        std::this_thread::sleep_for(std::chrono::duration<double>(dnnl->settle_seconds()));
      }
      const double gf_tessel = s.flop() / summary(t_tessel) / 1e9;
      const double gf_peer = peer ? s.flop() / summary(t_peer) / 1e9 : 0.0;
      const std::string shape =
          fmt::format("{} {} {} {} -> {} {}/{}", s.n, s.c, s.h, s.w, s.o, s.k, s.stride);
      if (peer) ratios.push_back(gf_tessel / gf_peer);
      if (o.json) {
        auto row = [&](const char* impl, double gf) {
          nlohmann::json j = {{"layer", layer.name},
                              {"pass", conv_pass_name(pass)},
                              {"impl", impl},
                              {"gflops", std::round(gf * 10) / 10},
                              {"n", s.n},
                              {"c", s.c},
                              {"h", s.h},
                              {"w", s.w},
                              {"o", s.o},
                              {"k", s.k},
                              {"stride", s.stride},
                              {"padding", s.pad},
                              {"threads", threads},
                              {"clock", o.clock},
                              {"winograd", winograd}};
          std::printf("%s\n", j.dump().c_str());
        };
        row("tessel", gf_tessel);
        if (peer) row("onednn", gf_peer);
      } else {
        const std::string pass_name = std::string(conv_pass_name(pass)) + (winograd ? "*" : "");
        std::printf("%-32s %-26s %-10s %9.1f %9.1f %7.2f\n", layer.name.c_str(), shape.c_str(),
                    pass_name.c_str(), gf_tessel, gf_peer, peer ? gf_tessel / gf_peer : 0.0);
      }
      std::fflush(stdout);
    }
  }
  if (!o.json && !ratios.empty()) {
    double log_sum = 0;
    for (double r : ratios)
      log_sum += std::log(r);
    std::printf("# tessel / onednn: geometric mean %.2f, lowest %.2f over %zu rows\n",
                std::exp(log_sum / double(ratios.size())),
                *std::min_element(ratios.begin(), ratios.end()), ratios.size());
    std::fflush(stdout);
  }
  return ok_status();
}

}  // namespace

void add_bench_conv_command(CLI::App& bench) {
  auto options = std::make_shared<Options>();
  CLI::App* conv = bench.add_subcommand(
      "conv", "ResNet-50 / ResNet-18 convolution layers, fwd and both backward passes, vs oneDNN");
  conv->add_option("--nets", options->nets, "resnet50, resnet18 (default both)")->delimiter(',');
  conv->add_option("--passes", options->passes, "fwd, bwd_data, bwd_weight (default all)")
      ->delimiter(',');
  conv->add_option("--layers", options->layers, "only these layers (names as printed)")
      ->delimiter(',');
  conv->add_option("--batch", options->batch,
                   "images per batch (default: the bench train workload's, 8 and 32)");
  conv->add_option("--reps", options->reps, "timed runs per implementation (default 5)");
  conv->add_option("--clock", options->clock,
                   "wall (default) or cpu: the process's CPU time, steadier on a busy machine "
                   "(with TESSEL_THREADS=1: the call's own work)");
  conv->add_option(
      "--stat", options->stat,
      "median (default) or min: the fastest run, the least disturbed on a busy machine");
  conv->add_flag("--json", options->json, "one JSON object per (layer, pass, impl)");
  conv->callback([options] {
    Status s = run_bench(*options);
    if (!s.ok()) {
      std::fprintf(stderr, "tessel bench conv: %s\n", s.message().c_str());
      exit_code = 1;
    }
  });
}

}  // namespace tessel::cli
