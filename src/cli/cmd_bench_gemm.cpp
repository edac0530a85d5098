// `tessel bench gemm`: GFLOP/s of kernels/gemm.tile as the tile compiler builds it for the CPU
// ("tessel-cpu") and for the OpenCL device ("tessel-opencl", PoCL here), next to oneDNN and
// OpenBLAS (loaded at run time, bench_gemm_peers.h), on the gemm workloads of WORKLOADS.md, f32
// and bf16 (bf16 inputs, f32 output and accumulation), with each tessel figure's ratio to the best
// peer, all in one run; tessel-opencl is compared with CLBlast (bench_gemm_clblast.h), the tuned
// OpenCL BLAS, on the same device and queue (f32: CLBlast has no bf16). Kernels are compiled (or
// loaded from the JIT's cache) before any timing; OpenCL buffers are written before timing and read
// back after it, so its figure is the kernel.
//
// The implementations take turns inside every repetition, so a slowdown from a neighbour on a
// shared machine hits all of them alike. A turn is: untimed calls for 10 ms for short problems
// (they wake the library's sleeping threads, as back-to-back calls would find them), the timed
// call, then a wait until the library's threads stop spinning (OpenBLAS's spin for 0.1 s and would
// otherwise hold a core during the next implementation's call). Each figure is the median of the
// timed calls, or with `--stat min` the fastest one (on a shared machine a neighbour only ever
// slows a call down, so the fastest turn is the least disturbed; JSON carries both). Every result
// is checked against the first peer's (tessel-cpu's when no peer loads).
// `--reference-loop` adds the CPU gemm templates run by the hand-written block loop
// (templates/reference_gemm.h), for tuning the templates apart from the compiler.
// `--layouts nn,nt,tn` times the operand layouts a training step launches: nt is x @ W^T (a linear
// layer's forward, the tied head's logits), tn is dY^T @ X (a weight's gradient, A transposed),
// tessel reading the transposed operand as a strided view and the peers told to transpose it.
// `--batched` adds tessel-cpu-batched: kernels/batched_gemm.tile with Z = 1, what matmul launches
// for 2-d operands (a linear layer's backward).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/bench_gemm_clblast.h"
#include "cli/bench_gemm_peers.h"
#include "cli/bench_gemm_tuned.h"
#include "cli/commands.h"
#include "hw/cpu_info.h"
#include "ops/device_kernel.h"
#include "ops/kernel_cache.h"
#include "runtime/device.h"
#include "support/thread_pool.h"
#include "tile/codegen/cpu/templates/reference_gemm.h"
#include "tile/parse/parser.h"
#include "tile/run/cpu_jit.h"
#include "tune/tune_db.h"

namespace tessel::cli {
namespace {

using tile::GemmInput;

struct Workload {
  int64_t m, n, k;
};

// WORKLOADS.md: M = N = K in {512 .. 4096}; gpt_mini's projections, M = 2048 tokens and
// K x N in {384 x 1152, 384 x 384, 384 x 1536, 1536 x 384}.
const Workload kWorkloads[] = {{512, 512, 512},    {1024, 1024, 1024}, {2048, 2048, 2048},
                               {4096, 4096, 4096}, {2048, 1152, 384},  {2048, 384, 384},
                               {2048, 1536, 384},  {2048, 384, 1536}};

struct Options {
  bool json = false;
  std::vector<std::string> sizes;
  std::vector<std::string> dtypes = {"f32", "bf16"};
  int threads = 0;
  std::string isa;
  double seconds = 0.3;
  std::string stat = "median";  // which turn stands for an implementation: median or min (time)
  std::string tiles;            // BMxBNxBK for tessel-cpu; empty: the kernel's defaults
  bool reference_loop = false;
  bool no_opencl = false;
  int64_t opencl_max = 1024;               // PoCL on a few cores takes seconds per call above this
  std::vector<std::string> opencl_params;  // NAME=VALUE for tessel-opencl; empty: gemm.tile's
  std::vector<std::string> layouts = {"nn"};
  std::string clock = "wall";  // or "cpu": the calling thread's CPU time (one thread only)
  bool batched = false;        // also time batched_gemm.tile with Z = 1
};

// How A and B lie in memory: nn is A [M, K] and B [K, N] row-major; a `t` means that operand is
// stored transposed (A as [K, M], B as [N, K]) and read as a strided view.
struct Layout {
  std::string name;
  bool trans_a = false, trans_b = false;
};

Expected<std::vector<Layout>> parse_layouts(const std::vector<std::string>& names) {
  std::vector<Layout> out;
  for (const std::string& name : names) {
    if (name.size() != 2 || (name[0] != 'n' && name[0] != 't') ||
        (name[1] != 'n' && name[1] != 't'))
      return invalid_argument("--layouts: '{}' is not one of nn, nt, tn, tt", name);
    out.push_back({name, name[0] == 't', name[1] == 't'});
  }
  return out;
}

// "2048" is 2048^3; "MxNxK" any shape.
Expected<std::vector<Workload>> parse_sizes(const std::vector<std::string>& tokens) {
  if (tokens.empty()) return std::vector<Workload>(std::begin(kWorkloads), std::end(kWorkloads));
  std::vector<Workload> out;
  for (const std::string& token : tokens) {
    long long m = 0, n = 0, k = 0;
    char tail = 0;
    if (std::sscanf(token.c_str(), "%lldx%lldx%lld%c", &m, &n, &k, &tail) == 3 && m > 0 && n > 0 &&
        k > 0) {
      out.push_back({m, n, k});
    } else if (std::sscanf(token.c_str(), "%lld%c", &m, &tail) == 1 && m > 0) {
      out.push_back({m, m, m});
    } else {
      return invalid_argument("--sizes: '{}' is neither N (for N^3) nor MxNxK", token);
    }
  }
  return out;
}

Expected<std::vector<GemmInput>> parse_dtypes(const std::vector<std::string>& names) {
  std::vector<GemmInput> out;
  for (const std::string& name : names) {
    if (name == "f32")
      out.push_back(GemmInput::kF32);
    else if (name == "bf16")
      out.push_back(GemmInput::kBf16);
    else
      return invalid_argument("--dtypes: '{}' is not one of f32, bf16", name);
  }
  return out;
}

uint16_t round_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

// One implementation in one workload: how to run it, its output, its timings. `fetch`, when
// set, copies the output to `c` after timing (a device's result).
struct Contender {
  Contender(std::string name, std::function<Status(float* c)> runner, double settle)
      : impl(std::move(name)), run(std::move(runner)), settle_seconds(settle) {}
  std::string impl;
  std::function<Status(float* c)> run;
  double settle_seconds;
  std::function<Status(float* c)> fetch;
  bool is_tessel = false;
  std::string tiles;  // tessel-cpu's tuned block sizes, when the tuning database chose them
  bool tuned_is_default = false;  // ... and they are gemm.tile's own
  bool opencl_peer = false;       // CLBlast: tessel-opencl's peer, not tessel-cpu's
  std::vector<float> c;
  std::vector<double> seconds;
  double gflops = 0;  // by the chosen statistic
  double gflops_median = 0, gflops_min_time = 0;
};

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The calling thread's CPU time (`--clock cpu`, single-threaded runs only): on a machine shared
// by several builds, wall time measured the neighbours as much as the gemm (oneDNN's fastest turn
// at one shape spread 28-75 GFLOP/s across runs minutes apart at load 6 on 2 cores); the time a
// thread actually ran does not count the time it waited for a core.
double thread_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

// Calls shorter than this get untimed calls first in their turn, for at least kWakeUpSeconds:
// on this VM a thread that slept for a while sits on a halted virtual CPU, which takes
// milliseconds to come back, and one untimed call was not enough (a pool whose workers sleep
// again after a short spin then ran the timed call on one thread: 225 instead of 470 GFLOP/s at
// 2048x384x384). Back-to-back calls, as in a training step, find the threads awake.
constexpr double kWakeUpBelowSeconds = 0.05;
// tessel's pool threads spin ~0.2 ms after a job and then yield their CPU for up to 1 ms
// (support/thread_pool.cpp) before they sleep; the next implementation is timed after that.
constexpr double kPoolSettleSeconds = 0.0015;
constexpr double kWakeUpSeconds = 0.01;

void settle(double seconds) {
  if (seconds > 0) std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

tile::ScalarType scalar_type(GemmInput dtype) {
  return dtype == GemmInput::kBf16 ? tile::ScalarType::kBF16 : tile::ScalarType::kF32;
}

// The strides of A [M, K] and B [K, N] as views of their storage in `layout`.
std::vector<int64_t> a_strides(const Workload& w, const Layout& layout) {
  return layout.trans_a ? std::vector<int64_t>{1, w.m} : std::vector<int64_t>{w.k, 1};
}
std::vector<int64_t> b_strides(const Workload& w, const Layout& layout) {
  return layout.trans_b ? std::vector<int64_t>{1, w.k} : std::vector<int64_t>{w.n, 1};
}

// kernels/gemm.tile's launch arguments: C = A @ B (alpha 1, beta 0, no bias).
std::vector<tile::LaunchArg> gemm_args(const Workload& w, const Layout& layout, GemmInput dtype,
                                       void* a, void* b, void* c) {
  return {tile::TensorArg{a, scalar_type(dtype), {w.m, w.k}, a_strides(w, layout), 0},
          tile::TensorArg{b, scalar_type(dtype), {w.k, w.n}, b_strides(w, layout), 0},
          tile::TensorArg{c, tile::ScalarType::kF32, {w.m, w.n}, {}, 0},
          tile::TensorArg{nullptr, tile::ScalarType::kF32, {w.n}, {}, 0},
          1.0,
          0.0};
}

// kernels/batched_gemm.tile's, with Z = 1 (batch stride 0), as matmul launches a 2-d product.
std::vector<tile::LaunchArg> batched_gemm_args(const Workload& w, const Layout& layout,
                                               GemmInput dtype, void* a, void* b, void* c) {
  const std::vector<int64_t> as = a_strides(w, layout), bs = b_strides(w, layout);
  return {tile::TensorArg{a, scalar_type(dtype), {1, w.m, w.k}, {0, as[0], as[1]}, 0},
          tile::TensorArg{b, scalar_type(dtype), {1, w.k, w.n}, {0, bs[0], bs[1]}, 0},
          tile::TensorArg{c, tile::ScalarType::kF32, {1, w.m, w.n}, {0, w.n, 1}, 0}, 1.0, 0.0};
}

std::map<std::string, std::string> gemm_params(GemmInput dtype, const std::string& tiles) {
  std::map<std::string, std::string> params = {{"T", tile::gemm_input_name(dtype)}, {"U", "f32"}};
  int bm = 0, bn = 0, bk = 0;
  if (!tiles.empty() && std::sscanf(tiles.c_str(), "%dx%dx%d", &bm, &bn, &bk) == 3) {
    params["BM"] = std::to_string(bm);
    params["BN"] = std::to_string(bn);
    params["BK"] = std::to_string(bk);
  }
  return params;
}

// A buffer of a device, released on destruction, filled from `init` when given.
struct DeviceMemory {
  Device* device = nullptr;
  DeviceBuffer buffer;
  ~DeviceMemory() {
    if (device) device->allocator().release(buffer);
  }
};

Expected<std::unique_ptr<DeviceMemory>> device_memory(Device* device, size_t bytes,
                                                      const void* init) {
  auto memory = std::make_unique<DeviceMemory>();
  TESSEL_ASSIGN_OR_RETURN(memory->buffer, device->allocator().allocate(bytes));
  memory->device = device;
  if (init) TESSEL_TRY(device->copy_from_host(memory->buffer, 0, init, bytes));
  return memory;
}

Status run_bench(const Options& options) {
  TESSEL_ASSIGN_OR_RETURN(std::vector<Workload> workloads, parse_sizes(options.sizes));
  TESSEL_ASSIGN_OR_RETURN(std::vector<GemmInput> dtypes, parse_dtypes(options.dtypes));
  TESSEL_ASSIGN_OR_RETURN(std::vector<Layout> layouts, parse_layouts(options.layouts));
  if (options.threads < 0) return invalid_argument("--threads: {} is negative", options.threads);
  if (!(options.seconds > 0)) return invalid_argument("--seconds must be positive");
  if (options.stat != "median" && options.stat != "min")
    return invalid_argument("--stat: '{}' is not one of median, min", options.stat);
  const bool fastest_turn = options.stat == "min";
  if (options.clock != "wall" && options.clock != "cpu")
    return invalid_argument("--clock: '{}' is not one of wall, cpu", options.clock);
  if (options.clock == "cpu" && options.threads != 1)
    return invalid_argument("--clock cpu needs --threads 1 (it times the calling thread only)");
  double (*const clock_seconds)() = options.clock == "cpu" ? thread_cpu_seconds : now_seconds;
  const int threads =
      options.threads > 0 ? options.threads : std::max(1, host_cpu_info().topology.usable_cores);
  // tessel-cpu runs on the process-wide pool, which is sized once, from TESSEL_THREADS, when it is
  // first used: --threads sets that before anything launches, so every implementation runs on the
  // same number of threads. Without --threads the pool takes its own default (physical cores).
  if (options.threads > 0) ::setenv("TESSEL_THREADS", std::to_string(threads).c_str(), 1);
  const int tessel_threads = ThreadPool::global().num_threads();
  if (options.threads > 0 && tessel_threads != threads)
    return failed_precondition(
        "--threads {}: tessel's thread pool already runs {} threads (TESSEL_THREADS or a thread "
        "that could not start)",
        threads, tessel_threads);
  int tile_m = 0, tile_n = 0, tile_k = 0;
  if (!options.tiles.empty()) {
    char tail = 0;
    if (std::sscanf(options.tiles.c_str(), "%dx%dx%d%c", &tile_m, &tile_n, &tile_k, &tail) != 3 ||
        tile_m <= 0 || tile_n <= 0 || tile_k <= 0)
      return invalid_argument("--tiles: '{}' is not BMxBNxBK", options.tiles);
  }
  tile::CpuIsa isa = tile::host_cpu_isa();
  if (!options.isa.empty()) {
    TESSEL_ASSIGN_OR_RETURN(isa, tile::cpu_isa_named(options.isa));
    ops::TargetOptions cpu_options = ops::target_options(DeviceKind::kCpu);
    cpu_options.cpu_isa = isa.name;
    ops::set_target_options(DeviceKind::kCpu, cpu_options);
  }
  std::optional<tile::ReferenceGemm> reference_loop;
  if (options.reference_loop) {
    TESSEL_ASSIGN_OR_RETURN(tile::ReferenceGemm g, tile::ReferenceGemm::create(options.isa));
    reference_loop.emplace(std::move(g));
  }
  std::vector<std::string> notes;
  std::vector<std::unique_ptr<GemmPeer>> peers = load_gemm_peers(threads, &notes);

  // Every kernel is compiled before anything is timed.
  TESSEL_ASSIGN_OR_RETURN(
      tile::Kernel gemm_tile,
      tile::parse_kernel(ops::embedded_kernel_files().at("gemm.tile"), "kernels/gemm.tile"));
  std::map<GemmInput, std::shared_ptr<ops::DeviceKernel>> cpu_kernels;
  std::map<GemmInput, std::shared_ptr<ops::DeviceKernel>> batched_kernels;
  std::map<GemmInput, std::shared_ptr<ops::DeviceKernel>> opencl_kernels;
  Device* opencl = nullptr;
  if (!options.no_opencl) {
    Expected<Device*> dev = get_device("opencl:0");
    if (dev.ok())
      opencl = *dev;
    else
      notes.push_back("tessel-opencl: " + dev.status().to_string());
  }
  std::optional<ClBlastGemm> clblast;
  if (opencl) {
    Expected<ClBlastGemm> peer = ClBlastGemm::create(opencl);
    if (peer.ok())
      clblast.emplace(*peer);
    else
      notes.push_back("clblast: " + peer.status().to_string());
  }
  for (GemmInput dtype : dtypes) {
    TESSEL_ASSIGN_OR_RETURN(
        ops::DeviceKernel k,
        ops::DeviceKernel::compile(gemm_tile, cpu_device(), gemm_params(dtype, options.tiles)));
    cpu_kernels[dtype] = std::make_shared<ops::DeviceKernel>(std::move(k));
    if (options.batched) {
      TESSEL_ASSIGN_OR_RETURN(
          tile::Kernel batched_tile,
          tile::parse_kernel(ops::embedded_kernel_files().at("batched_gemm.tile"),
                             "kernels/batched_gemm.tile"));
      std::map<std::string, std::string> params = gemm_params(dtype, options.tiles);
      params.erase("U");
      TESSEL_ASSIGN_OR_RETURN(ops::DeviceKernel kb,
                              ops::DeviceKernel::compile(batched_tile, cpu_device(), params));
      batched_kernels[dtype] = std::make_shared<ops::DeviceKernel>(std::move(kb));
    }
    if (opencl) {
      std::map<std::string, std::string> params = gemm_params(dtype, "");
      for (const std::string& p : options.opencl_params) {
        const size_t eq = p.find('=');
        if (eq == std::string::npos || eq == 0)
          return invalid_argument("--opencl-params: '{}' is not NAME=VALUE", p);
        params[p.substr(0, eq)] = p.substr(eq + 1);
      }
      TESSEL_ASSIGN_OR_RETURN(ops::DeviceKernel k2,
                              ops::DeviceKernel::compile(gemm_tile, opencl, params));
      opencl_kernels[dtype] = std::make_shared<ops::DeviceKernel>(std::move(k2));
    }
  }
  // With a tuning database (tessel tune gemm), tessel-cpu takes its block sizes for each shape
  // and tessel-cpu-default keeps gemm.tile's beside it.
  TunedGemms tuned;
  if (options.tiles.empty()) {
    std::vector<std::tuple<int64_t, int64_t, int64_t>> shapes;
    std::map<GemmInput, std::map<std::string, std::string>> base;
    for (const Workload& w : workloads)
      shapes.emplace_back(w.m, w.n, w.k);
    for (GemmInput dtype : dtypes)
      base[dtype] = gemm_params(dtype, "");
    TESSEL_ASSIGN_OR_RETURN(tuned, tuned_cpu_gemms(gemm_tile, dtypes, shapes, base));
  }

  if (!options.json) {
    std::printf(
        "tessel bench gemm: C = A * B, row-major, %d threads (tessel-cpu %d); GFLOP/s, %s "
        "after one warm-up, implementations taking turns in each repetition%s\n",
        threads, tessel_threads, fastest_turn ? "fastest turn" : "median",
        options.clock == "cpu" ? "; thread CPU time" : "");
    std::printf("  tessel-cpu: kernels/gemm.tile compiled for the CPU (%s, %s tiles)\n",
                isa.name.c_str(), options.tiles.empty() ? "default" : options.tiles.c_str());
    if (opencl)
      std::printf(
          "  tessel-opencl: kernels/gemm.tile on %s (%s); only where m, n, k <= "
          "%lld (--opencl-max), '-' elsewhere\n",
          opencl->name().c_str(),
          options.opencl_params.empty()
              ? "gemm.tile's opencl defaults"
              : fmt::format("{}", fmt::join(options.opencl_params, " ")).c_str(),
          (long long)options.opencl_max);
    if (reference_loop)
      std::printf(
          "  tessel-ref-loop: the CPU gemm templates (%s) via the hand-written block loop\n",
          reference_loop->isa());
    for (const auto& peer : peers)
      std::printf("  %s: %s\n", peer->name(), peer->describe().c_str());
    if (clblast) std::printf("  clblast: %s\n", clblast->describe().c_str());
    for (const std::string& note : notes)
      std::printf("  %s\n", note.c_str());
    std::printf("  results checked against %s\n", peers.empty() ? "tessel-cpu" : peers[0]->name());
    if (!tuned.empty())
      std::printf("  tessel-cpu: block sizes from the tuning database %s where it has them\n",
                  tune::default_tune_db_path().c_str());
    std::printf("\n%-5s %-6s %5s %5s %5s  %10s", "dtype", "layout", "m", "n", "k", "tessel-cpu");
    if (!tuned.empty()) std::printf(" %18s", "tessel-cpu-default");
    if (options.batched) std::printf(" %18s", "tessel-cpu-batched");
    if (opencl) std::printf(" %13s", "tessel-opencl");
    if (clblast) std::printf(" %9s", "clblast");
    if (reference_loop) std::printf(" %15s", "tessel-ref-loop");
    for (const auto& peer : peers)
      std::printf(" %9s", peer->name());
    std::printf("  %s\n", "tessel-cpu/best cpu peer, tessel-opencl/clblast");
  }

  // Inputs: uniform in [-1, 1], the largest workload's worth, shared by all workloads.
  int64_t a_elems = 0, b_elems = 0;
  for (const Workload& w : workloads) {
    a_elems = std::max(a_elems, w.m * w.k);
    b_elems = std::max(b_elems, w.k * w.n);
  }
  std::vector<float> a_f32(static_cast<size_t>(a_elems)), b_f32(static_cast<size_t>(b_elems));
  std::mt19937 rng(42);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (float& x : a_f32)
    x = dist(rng);
  for (float& x : b_f32)
    x = dist(rng);
  std::vector<uint16_t> a_bf16(a_f32.size()), b_bf16(b_f32.size());
  std::transform(a_f32.begin(), a_f32.end(), a_bf16.begin(), round_to_bf16);
  std::transform(b_f32.begin(), b_f32.end(), b_bf16.begin(), round_to_bf16);

  int disagreements = 0;
  for (GemmInput dtype : dtypes) {
    const bool bf16 = dtype == GemmInput::kBf16;
    void* a = bf16 ? static_cast<void*>(a_bf16.data()) : a_f32.data();
    void* b = bf16 ? static_cast<void*>(b_bf16.data()) : b_f32.data();
    const size_t in_bytes = bf16 ? 2 : 4;
    std::vector<std::pair<Layout, Workload>> cases;  // every workload in every layout
    for (const Layout& layout : layouts)
      for (const Workload& w : workloads)
        cases.emplace_back(layout, w);
    for (const auto& one : cases) {
      const Layout& layout = one.first;
      const Workload& w = one.second;
      std::vector<Contender> contenders;
      std::vector<bool> peer_present(peers.size());
      for (size_t p = 0; p < peers.size(); ++p) {
        peer_present[p] = peers[p]->supports(dtype);
        if (!peer_present[p]) continue;
        GemmPeer* peer = peers[p].get();
        contenders.emplace_back(
            peer->name(),
            [=, &w](float* c) {
              return peer->run({w.m, w.n, w.k, dtype, a, b, c, layout.trans_a, layout.trans_b});
            },
            peer->settle_seconds());
      }
      const size_t peer_count = contenders.size();
      ops::DeviceKernel* cpu = cpu_kernels.at(dtype).get();
      auto tuned_here = tuned.find({dtype, w.m, w.n, w.k});
      ops::DeviceKernel* tuned_cpu =
          tuned_here == tuned.end() ? cpu : tuned_here->second.kernel.get();
      contenders.emplace_back(
          "tessel-cpu",
          [=, &w, &layout](float* c) {
            return tuned_cpu->launch(gemm_args(w, layout, dtype, a, b, c));
          },
          kPoolSettleSeconds);
      contenders.back().is_tessel = true;
      if (tuned_here != tuned.end()) {
        contenders.back().tiles = tuned_here->second.params;
        contenders.back().tuned_is_default = tuned_here->second.is_default;
      }
      if (!tuned.empty()) {
        contenders.emplace_back(
            "tessel-cpu-default",
            [=, &w, &layout](float* c) {
              return cpu->launch(gemm_args(w, layout, dtype, a, b, c));
            },
            kPoolSettleSeconds);
        contenders.back().is_tessel = true;
      }
      if (options.batched) {
        ops::DeviceKernel* batched = batched_kernels.at(dtype).get();
        contenders.emplace_back(
            "tessel-cpu-batched",
            [=, &w, &layout](float* c) {
              return batched->launch(batched_gemm_args(w, layout, dtype, a, b, c));
            },
            kPoolSettleSeconds);
        contenders.back().is_tessel = true;
      }
      std::unique_ptr<DeviceMemory> a_cl, b_cl, c_cl, c_clblast;
      const bool run_opencl = opencl && std::max({w.m, w.n, w.k}) <= options.opencl_max;
      if (run_opencl) {
        TESSEL_ASSIGN_OR_RETURN(a_cl, device_memory(opencl, size_t(w.m * w.k) * in_bytes, a));
        TESSEL_ASSIGN_OR_RETURN(b_cl, device_memory(opencl, size_t(w.k * w.n) * in_bytes, b));
        TESSEL_ASSIGN_OR_RETURN(c_cl, device_memory(opencl, size_t(w.m * w.n) * 4, nullptr));
        ops::DeviceKernel* kernel = opencl_kernels.at(dtype).get();
        void* am = a_cl->buffer.handle;
        void* bm = b_cl->buffer.handle;
        void* cm = c_cl->buffer.handle;
        Device* dev = opencl;
        // Launches are queued: the timed call waits for the kernel.
        contenders.emplace_back(
            "tessel-opencl",
            [=, &w, &layout](float*) {
              TESSEL_TRY(kernel->launch(gemm_args(w, layout, dtype, am, bm, cm)));
              return dev->synchronize();
            },
            /*settle=*/0.001);
        contenders.back().is_tessel = true;
        DeviceBuffer c_buffer = c_cl->buffer;
        contenders.back().fetch = [=, &w](float* c) {
          return dev->copy_to_host(c, c_buffer, 0, size_t(w.m * w.n) * 4);
        };
        if (clblast && dtype == GemmInput::kF32) {
          TESSEL_ASSIGN_OR_RETURN(c_clblast, device_memory(opencl, size_t(w.m * w.n) * 4, nullptr));
          const ClBlastGemm* peer = &*clblast;
          DeviceBuffer a_buffer = a_cl->buffer, b_buffer = b_cl->buffer;
          DeviceBuffer out = c_clblast->buffer;
          contenders.emplace_back(
              "clblast",
              [=, &w](float*) {
                TESSEL_TRY(peer->sgemm(w.m, w.n, w.k, a_buffer, b_buffer, out));
                return dev->synchronize();
              },
              /*settle=*/0.001);
          contenders.back().opencl_peer = true;
          contenders.back().fetch = [=, &w](float* c) {
            return dev->copy_to_host(c, out, 0, size_t(w.m * w.n) * 4);
          };
        }
      }
      if (reference_loop) {
        contenders.emplace_back(
            "tessel-ref-loop",
            [&, a, b, dtype](float* c) {
              tile::ReferenceGemmCall call;
              call.m = w.m;
              call.n = w.n;
              call.k = w.k;
              call.input = dtype;
              call.a = a;
              call.a_row_stride = a_strides(w, layout)[0];
              call.a_col_stride = a_strides(w, layout)[1];
              call.b = b;
              call.b_row_stride = b_strides(w, layout)[0];
              call.b_col_stride = b_strides(w, layout)[1];
              call.c = c;
              call.ldc = w.n;
              call.threads = threads;
              call.bm = tile_m;
              call.bn = tile_n;
              call.bk = tile_k;
              return reference_loop->run(call);
            },
            kPoolSettleSeconds);
        contenders.back().is_tessel = true;
      }
      // Warm-up (pages, thread start-up), which also sizes the repetitions.
      double slowest = 0;
      for (Contender& x : contenders) {
        x.c.assign(size_t(w.m * w.n), 0.0f);
        const double start = now_seconds();
        TESSEL_TRY(x.run(x.c.data())
                       .with_context("{} {} {}x{}x{}", x.impl, tile::gemm_input_name(dtype), w.m,
                                     w.n, w.k));
        slowest = std::max(slowest, now_seconds() - start);
        settle(x.settle_seconds);
      }
      const int reps = std::clamp(int(std::ceil(options.seconds / slowest)), 5, 41) | 1;
      const bool wake_first = slowest < kWakeUpBelowSeconds;
      for (int r = 0; r < reps; ++r)
        for (Contender& x : contenders) {
          if (wake_first) {
            const double wake_start = now_seconds();
            do {
              TESSEL_TRY(x.run(x.c.data()));
            } while (now_seconds() - wake_start < kWakeUpSeconds);
          }
          const double start = clock_seconds();
          TESSEL_TRY(x.run(x.c.data()));
          x.seconds.push_back(clock_seconds() - start);
          settle(x.settle_seconds);
        }
      for (Contender& x : contenders)
        if (x.fetch) TESSEL_TRY(x.fetch(x.c.data()));
      const double flop = 2.0 * double(w.m) * double(w.n) * double(w.k);
      double best_peer = 0, opencl_peer = 0;
      for (Contender& x : contenders) {
        x.gflops_median = flop / median(x.seconds) / 1e9;
        x.gflops_min_time = flop / *std::min_element(x.seconds.begin(), x.seconds.end()) / 1e9;
        x.gflops = fastest_turn ? x.gflops_min_time : x.gflops_median;
        if (x.opencl_peer)
          opencl_peer = std::max(opencl_peer, x.gflops);
        else if (!x.is_tessel)
          best_peer = std::max(best_peer, x.gflops);
      }
      // Same inputs, f32 sums in another order: |difference| <= 2 * 2 K u sum|a||b| <= 4 K^2 u.
      const double tolerance = 4.0 * double(w.k) * double(w.k) * std::ldexp(1.0, -24);
      const Contender& reference = peer_count > 0 ? contenders[0] : contenders[peer_count];
      std::vector<bool> agrees(contenders.size(), true);
      for (size_t x = 0; x < contenders.size(); ++x)
        for (size_t i = 0; i < reference.c.size(); ++i)
          if (!(std::fabs(double(reference.c[i]) - contenders[x].c[i]) <= tolerance)) {
            agrees[x] = false;
            ++disagreements;
            break;
          }
      // tessel-opencl against CLBlast where it ran, everything else against the best CPU peer.
      auto peer_of = [&](const Contender& x) {
        return x.impl == "tessel-opencl" && opencl_peer > 0 ? opencl_peer : best_peer;
      };
      auto ratio = [&](const Contender& x) { return peer_of(x) > 0 ? x.gflops / peer_of(x) : 0.0; };

      if (options.json) {
        for (size_t x = 0; x < contenders.size(); ++x) {
          const Contender& c = contenders[x];
          nlohmann::json row = {{"impl", c.impl},
                                {"dtype", tile::gemm_input_name(dtype)},
                                {"layout", layout.name},
                                {"m", w.m},
                                {"n", w.n},
                                {"k", w.k},
                                {"gflops", std::round(c.gflops * 10) / 10},
                                {"stat", options.stat},
                                {"clock", options.clock},
                                {"gflops_median", std::round(c.gflops_median * 10) / 10},
                                {"gflops_min_time", std::round(c.gflops_min_time * 10) / 10},
                                {"threads", c.impl == "tessel-cpu" ? tessel_threads : threads},
                                {"reps", reps},
                                {"agrees", bool(agrees[x])}};
          if (c.is_tessel && peer_of(c) > 0) row["ratio"] = std::round(ratio(c) * 1000) / 1000;
          if (c.impl == "tessel-cpu") row["isa"] = isa.name;
          if (!c.tiles.empty()) {
            row["tuned"] = c.tiles;
            row["tuned_is_default"] = c.tuned_is_default;
          }
          std::printf("%s\n", row.dump().c_str());
        }
      } else {
        auto find = [&](const char* name) -> const Contender* {
          for (const Contender& c : contenders)
            if (c.impl == name) return &c;
          return nullptr;
        };
        std::printf("%-5s %-6s %5lld %5lld %5lld  %10.1f", tile::gemm_input_name(dtype),
                    layout.name.c_str(), (long long)w.m, (long long)w.n, (long long)w.k,
                    find("tessel-cpu")->gflops);
        if (const Contender* d = find("tessel-cpu-default")) std::printf(" %18.1f", d->gflops);
        if (const Contender* d = find("tessel-cpu-batched")) std::printf(" %18.1f", d->gflops);
        const Contender* cl = find("tessel-opencl");
        if (opencl) {
          if (cl)
            std::printf(" %13.1f", cl->gflops);
          else
            std::printf(" %13s", "-");
        }
        if (clblast) {
          if (const Contender* peer = find("clblast"))
            std::printf(" %9.1f", peer->gflops);
          else
            std::printf(" %9s", "-");
        }
        if (const Contender* r = find("tessel-ref-loop")) std::printf(" %15.1f", r->gflops);
        size_t next = 0;  // the CPU peers come first among the contenders
        for (size_t p = 0; p < peers.size(); ++p) {
          if (peer_present[p])
            std::printf(" %9.1f", contenders[next++].gflops);
          else
            std::printf(" %9s", "n/a");
        }
        if (best_peer > 0) std::printf("  %.2fx", ratio(*find("tessel-cpu")));
        if (const Contender* d = find("tessel-cpu-batched"); d && best_peer > 0)
          std::printf(" (batched %.2fx)", ratio(*d));
        if (cl && peer_of(*cl) > 0) std::printf(", %.2fx", ratio(*cl));
        const Contender* cpu = find("tessel-cpu");
        if (const Contender* d = find("tessel-cpu-default"); d && d->gflops > 0)
          std::printf("; tuned %.2fx default (%s)", cpu->gflops / d->gflops,
                      cpu->tiles.empty()      ? "not tuned"
                      : cpu->tuned_is_default ? "same kernel: the tuner kept the defaults"
                                              : cpu->tiles.c_str());
        bool all_agree = std::all_of(agrees.begin(), agrees.end(), [](bool v) { return v; });
        std::printf("%s\n", all_agree ? "" : "  RESULTS DIFFER");
      }
      std::fflush(stdout);
    }
  }
  if (disagreements > 0)
    return internal_error("{} result(s) differed from the reference's", disagreements);
  return ok_status();
}

}  // namespace

void add_bench_gemm_command(CLI::App& bench) {
  auto options = std::make_shared<Options>();
  CLI::App* gemm = bench.add_subcommand(
      "gemm",
      "GFLOP/s of tessel's gemm (cpu, opencl) next to oneDNN, OpenBLAS and CLBlast, f32 and bf16");
  gemm->add_flag("--json", options->json, "One JSON object per implementation and workload");
  gemm->add_option("--sizes", options->sizes,
                   "Workloads: N for N^3 or MxNxK, comma-separated (default: all of "
                   "WORKLOADS.md)")
      ->delimiter(',');
  gemm->add_option("--dtypes", options->dtypes, "f32, bf16 (default both)")->delimiter(',');
  gemm->add_option("--threads", options->threads,
                   "Threads for every implementation (default: the usable cores)");
  gemm->add_option("--isa", options->isa,
                   "tessel-cpu's variant: avx512bf16, avx512, avx2, portable (default: best here)");
  gemm->add_option("--tiles", options->tiles,
                   "tessel-cpu's block sizes BMxBNxBK (default: gemm.tile's, for tuning)");
  gemm->add_flag("--reference-loop", options->reference_loop,
                 "Also time the CPU templates through the hand-written block loop");
  gemm->add_flag("--no-opencl", options->no_opencl, "Leave tessel-opencl out");
  gemm->add_option("--layouts", options->layouts,
                   "Operand layouts, comma-separated: nn (default), nt (B stored transposed, as a "
                   "linear weight), tn (A stored transposed, as in a weight gradient), tt")
      ->delimiter(',');
  gemm->add_flag("--batched", options->batched,
                 "Also time kernels/batched_gemm.tile with Z = 1 (what matmul launches)");
  gemm->add_option("--opencl-params", options->opencl_params,
                   "tessel-opencl's compile-time parameters NAME=VALUE, comma-separated (e.g. "
                   "BM=32,BN=64,TM=4,TN=16; default: gemm.tile's `on opencl` values)")
      ->delimiter(',');
  gemm->add_option("--opencl-max", options->opencl_max,
                   "Largest m, n or k timed on OpenCL (default 1024)");
  gemm->add_option("--stat", options->stat,
                   "The turn each figure and ratio stands on: median (default) or min, the "
                   "fastest turn (least disturbed on a shared machine); JSON carries both");
  gemm->add_option("--clock", options->clock,
                   "wall (default) or cpu: the calling thread's CPU time, with --threads 1, so "
                   "that time spent waiting for a core on a loaded machine is not counted");
  gemm->add_option("--seconds", options->seconds,
                   "Time per implementation and workload, which sets the repetitions (5..41)");
  gemm->callback([options] {
    Status status = run_bench(*options);
    if (!status.ok()) {
      std::fprintf(stderr, "tessel bench gemm: %s\n", status.to_string().c_str());
      exit_code = 1;
      return;
    }
    exit_code = 0;
  });
}

}  // namespace tessel::cli
