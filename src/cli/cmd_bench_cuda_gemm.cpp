// `tessel bench cuda-gemm`: GFLOP/s of tessel's gemm on a CUDA GPU (the op library's matmul on
// cuda:N, kernels/gemm.tile as the tile compiler builds it) next to cuBLAS on the same GPU, the
// same buffers and the same stream, for the gemm workloads of WORKLOADS.md: f32 (cublasSgemm,
// plain f32 math, no TF32) and bf16 inputs with f32 output and accumulation (cublasGemmEx). cuBLAS
// is loaded at run time with dlopen (as bench_gemm_peers.h loads the CPU peers), so nothing links
// it. Each figure is the median of timed calls (each ended by a device synchronize) after warm-up
// calls that also compile tessel's kernel; tessel's result is checked against cuBLAS's.
//
//   tessel bench cuda-gemm --device cuda:0 --sizes 1024,4096
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "hw/dynamic_library.h"
#include "ops/ops.h"
#include "runtime/cuda/cuda_device.h"

namespace tessel::cli {
namespace {

using Clock = std::chrono::steady_clock;

// The few cuBLAS entry points used, as cublas_api.h declares them.
struct Cublas {
  using Handle = void*;
  int (*create)(Handle*) = nullptr;
  int (*destroy)(Handle) = nullptr;
  int (*set_stream)(Handle, void*) = nullptr;
  int (*get_version)(Handle, int*) = nullptr;
  int (*sgemm)(Handle, int, int, int, int, int, const float*, const void*, int, const void*, int,
               const float*, void*, int) = nullptr;
  int (*gemm_ex)(Handle, int, int, int, int, int, const void*, const void*, int, int, const void*,
                 int, int, const void*, void*, int, int, int, int) = nullptr;
  std::string library;
  Handle handle = nullptr;
  int version = 0;
};
constexpr int kOpN = 0;           // CUBLAS_OP_N
constexpr int kDataF32 = 0;       // CUDA_R_32F
constexpr int kDataBf16 = 14;     // CUDA_R_16BF
constexpr int kComputeF32 = 68;   // CUBLAS_COMPUTE_32F
constexpr int kGemmDefault = -1;  // CUBLAS_GEMM_DEFAULT

Expected<Cublas> load_cublas(const CudaDevice& gpu) {
  std::vector<std::string> names = {"libcublas.so", "libcublas.so.13", "libcublas.so.12"};
  for (const char* var : {"CUDA_HOME", "CUDA_PATH"})
    if (const char* root = std::getenv(var); root && *root)
      names.push_back(std::string(root) + "/lib64/libcublas.so");
  names.push_back("/usr/local/cuda/lib64/libcublas.so");
  TESSEL_ASSIGN_OR_RETURN(DynamicLibrary lib,
                          DynamicLibrary::open_first(names, "cuBLAS (libcublas)"));
  Cublas c;
  c.library = lib.name();
  TESSEL_TRY(lib.bind(c.create, "cublasCreate_v2"));
  TESSEL_TRY(lib.bind(c.destroy, "cublasDestroy_v2"));
  TESSEL_TRY(lib.bind(c.set_stream, "cublasSetStream_v2"));
  TESSEL_TRY(lib.bind(c.get_version, "cublasGetVersion_v2"));
  TESSEL_TRY(lib.bind(c.sgemm, "cublasSgemm_v2"));
  TESSEL_TRY(lib.bind(c.gemm_ex, "cublasGemmEx"));
  TESSEL_TRY(gpu.context()->make_current());  // cuBLAS works in the current (primary) context
  if (int r = c.create(&c.handle); r != 0) return internal_error("cublasCreate: status {}", r);
  if (int r = c.set_stream(c.handle, gpu.context()->stream()); r != 0)
    return internal_error("cublasSetStream: status {}", r);
  c.get_version(c.handle, &c.version);
  return c;
}

// Row-major C[m, n] = A[m, k] B[k, n] is column-major C^T = B^T A^T: cuBLAS gets B first.
Status cublas_gemm(const Cublas& c, const Tensor& a, const Tensor& b, const Tensor& out, int m,
                   int n, int k) {
  const float one = 1.0f, zero = 0.0f;
  const void* pa = a.storage()->buffer().handle;
  const void* pb = b.storage()->buffer().handle;
  void* pc = out.storage()->buffer().handle;
  int r = a.dtype() == DType::kF32
              ? c.sgemm(c.handle, kOpN, kOpN, n, m, k, &one, pb, n, pa, k, &zero, pc, n)
              : c.gemm_ex(c.handle, kOpN, kOpN, n, m, k, &one, pb, kDataBf16, n, pa, kDataBf16, k,
                          &zero, pc, kDataF32, n, kComputeF32, kGemmDefault);
  return r == 0 ? ok_status() : internal_error("cuBLAS gemm: status {}", r);
}

struct Options {
  std::string device = "cuda:0";
  std::vector<std::string> sizes;  // "1024" (square) or "MxNxK"; empty: WORKLOADS.md's
  std::vector<std::string> dtypes = {"f32", "bf16"};
  int reps = 10;
  bool json = false;
};

// Median seconds of `reps` calls of `fn`, each followed by a synchronize, after 3 warm-up calls.
Expected<double> time_calls(Device* gpu, int reps, const std::function<Status()>& fn) {
  for (int i = 0; i < 3; ++i)
    TESSEL_TRY(fn());
  TESSEL_TRY(gpu->synchronize());
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    const Clock::time_point t0 = Clock::now();
    TESSEL_TRY(fn());
    TESSEL_TRY(gpu->synchronize());
    t.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

Status run(const Options& o) {
  TESSEL_ASSIGN_OR_RETURN(Device * device, get_device(o.device));
  if (device->kind() != DeviceKind::kCuda)
    return invalid_argument("--device {}: cuda-gemm compares with cuBLAS on a CUDA GPU", o.device);
  auto* gpu = static_cast<CudaDevice*>(device);
  TESSEL_ASSIGN_OR_RETURN(Cublas cublas, load_cublas(*gpu));
  std::vector<std::array<int, 3>> shapes;  // m, n, k
  std::vector<std::string> sizes = o.sizes;
  if (sizes.empty())
    sizes = {"512",           "1024",         "2048",          "4096",
             "2048x1152x384", "2048x384x384", "2048x1536x384", "2048x384x1536"};
  for (const std::string& s : sizes) {
    int m = 0, n = 0, k = 0;
    if (std::sscanf(s.c_str(), "%dx%dx%d", &m, &n, &k) == 3) {
      shapes.push_back({m, n, k});
    } else if (std::sscanf(s.c_str(), "%d", &m) == 1 && m > 0) {
      shapes.push_back({m, m, m});
    } else {
      return invalid_argument("--sizes {}: expected N or MxNxK", s);
    }
  }
  if (!o.json)
    std::printf(
        "# tessel bench cuda-gemm on %s (%s), cuBLAS %d from %s; median of %d calls\n"
        "%-18s %-5s %12s %12s %8s %10s\n",
        gpu->id().c_str(), gpu->name().c_str(), cublas.version, cublas.library.c_str(), o.reps,
        "MxNxK", "dtype", "tessel GF/s", "cuBLAS GF/s", "ratio", "max |diff|");
  std::mt19937 rng(1);
  for (const std::string& dtype_name : o.dtypes) {
    const DType dtype = dtype_name == "bf16" ? DType::kBF16 : DType::kF32;
    for (const std::array<int, 3>& shape_mnk : shapes) {
      const int m = shape_mnk[0], n = shape_mnk[1], k = shape_mnk[2];
      std::normal_distribution<float> normal(0.0f, 1.0f);
      std::vector<float> ha(size_t(m) * k), hb(size_t(k) * n);
      for (float& v : ha)
        v = normal(rng);
      for (float& v : hb)
        v = normal(rng);
      TESSEL_ASSIGN_OR_RETURN(Tensor a32, Tensor::from_vector(ha, {m, k}, gpu));
      TESSEL_ASSIGN_OR_RETURN(Tensor b32, Tensor::from_vector(hb, {k, n}, gpu));
      TESSEL_ASSIGN_OR_RETURN(Tensor a, ops::cast(a32, dtype));
      TESSEL_ASSIGN_OR_RETURN(Tensor b, ops::cast(b32, dtype));
      TESSEL_ASSIGN_OR_RETURN(Tensor theirs, Tensor::empty({m, n}, DType::kF32, gpu));
      Tensor mine;
      TESSEL_ASSIGN_OR_RETURN(double t_mine, time_calls(gpu, o.reps, [&]() -> Status {
                                TESSEL_ASSIGN_OR_RETURN(mine, ops::matmul(a, b));
                                return ok_status();
                              }));
      TESSEL_ASSIGN_OR_RETURN(double t_theirs, time_calls(gpu, o.reps, [&] {
                                return cublas_gemm(cublas, a, b, theirs, m, n, k);
                              }));
      TESSEL_ASSIGN_OR_RETURN(std::vector<float> x, mine.to_vector<float>());
      TESSEL_ASSIGN_OR_RETURN(std::vector<float> y, theirs.to_vector<float>());
      double diff = 0;
      for (size_t i = 0; i < x.size(); ++i)
        diff = std::max(diff, double(std::fabs(x[i] - y[i])));
      const double flops = 2.0 * m * n * k;
      const double gf_mine = flops / t_mine * 1e-9, gf_theirs = flops / t_theirs * 1e-9;
      const std::string shape = fmt::format("{}x{}x{}", m, n, k);
      if (o.json) {
        std::printf("%s\n", nlohmann::json{{"shape", shape},
                                           {"dtype", dtype_name},
                                           {"tessel_gflops", gf_mine},
                                           {"cublas_gflops", gf_theirs},
                                           {"ratio", gf_mine / gf_theirs},
                                           {"max_abs_diff", diff}}
                                .dump()
                                .c_str());
      } else {
        std::printf("%-18s %-5s %12.1f %12.1f %8.3f %10.2e\n", shape.c_str(), dtype_name.c_str(),
                    gf_mine, gf_theirs, gf_mine / gf_theirs, diff);
      }
      std::fflush(stdout);
      // Sums of k products of unit normals (size about sqrt(k)) in f32, added in another order
      // (and for bf16 inputs maybe with another rounding of the products): a relative 1e-3
      // (1e-2) of that size is far above the rounding and far below a wrong element.
      const double allowed = std::sqrt(double(k)) * (dtype == DType::kF32 ? 1e-3 : 1e-2);
      if (!(diff <= allowed))
        return internal_error("{} {}: tessel and cuBLAS differ by {} (allowed {})", shape,
                              dtype_name, diff, allowed);
    }
  }
  cublas.destroy(cublas.handle);
  return ok_status();
}

}  // namespace

void add_bench_cuda_gemm_command(CLI::App& bench) {
  auto options = std::make_shared<Options>();
  CLI::App* cmd = bench.add_subcommand(
      "cuda-gemm", "gemm GFLOP/s of tessel on a CUDA GPU vs cuBLAS on the same GPU and stream");
  cmd->add_option("--device", options->device, "the GPU (default cuda:0)");
  cmd->add_option("--sizes", options->sizes, "N (square) or MxNxK (default: WORKLOADS.md's)")
      ->delimiter(',');
  cmd->add_option("--dtypes", options->dtypes, "f32, bf16 (default both)")
      ->delimiter(',')
      ->check(CLI::IsMember({"f32", "bf16"}));
  cmd->add_option("--reps", options->reps, "timed calls per figure (default 10)")
      ->check(CLI::Range(1, 10000));
  cmd->add_flag("--json", options->json, "one JSON object per line instead of the table");
  cmd->callback([options] {
    Status s = run(*options);
    if (!s.ok()) {
      std::fprintf(stderr, "tessel bench cuda-gemm: %s\n", s.to_string().c_str());
      exit_code = 1;
    }
  });
}

}  // namespace tessel::cli
