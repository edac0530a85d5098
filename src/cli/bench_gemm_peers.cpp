// oneDNN and OpenBLAS behind dlopen for `tessel bench gemm`. Their C signatures are declared here
// (row-major dnnl_* calls, CBLAS enums) because their headers are not needed to build tessel.
#include "cli/bench_gemm_peers.h"

#include <dlfcn.h>

#include <cstdlib>
#include <string>
#include <vector>

namespace tessel::cli {
namespace {

using tile::GemmInput;

// The first of `names` that loads, or null; the dlerror text of the last attempt in *error.
void* open_library(const std::vector<const char*>& names, std::string* error) {
  for (const char* name : names) {
    if (void* handle = dlopen(name, RTLD_NOW | RTLD_LOCAL)) return handle;
    const char* e = dlerror();
    *error = e ? e : "unknown dlopen error";
  }
  return nullptr;
}

template <typename Fn>
Fn symbol(void* handle, const char* name) {
  return reinterpret_cast<Fn>(dlsym(handle, name));
}

class OneDnn : public GemmPeer {
 public:
  using Sgemm = int (*)(char, char, int64_t, int64_t, int64_t, float, const float*, int64_t,
                        const float*, int64_t, float, float*, int64_t);
  using GemmBf16 = int (*)(char, char, int64_t, int64_t, int64_t, float, const uint16_t*, int64_t,
                           const uint16_t*, int64_t, float, float*, int64_t);
  struct Version {
    int major, minor, patch;
    const char* hash;
  };

  OneDnn(void* handle, Sgemm sgemm, GemmBf16 gemm_bf16)
      : handle_(handle), sgemm_(sgemm), gemm_bf16_(gemm_bf16) {}
  ~OneDnn() override { dlclose(handle_); }

  const char* name() const override { return "onednn"; }
  std::string describe() const override {
    auto version = symbol<const Version* (*)()>(handle_, "dnnl_version");
    if (!version) return "oneDNN";
    const Version* v = version();
    return fmt::format("oneDNN {}.{}.{}", v->major, v->minor, v->patch);
  }
  bool supports(GemmInput input) const override {
    return input == GemmInput::kF32 || (input == GemmInput::kBf16 && bf16_runs());
  }
  // libgomp's workers spin GOMP_SPINCOUNT (300000) rounds before they sleep: a few ms.
  double settle_seconds() const override { return 0.02; }
  Status run(const PeerGemmCall& c) override {
    const char ta = c.trans_a ? 'T' : 'N', tb = c.trans_b ? 'T' : 'N';
    const int64_t lda = c.trans_a ? c.m : c.k, ldb = c.trans_b ? c.k : c.n;
    const int status =
        c.input == GemmInput::kF32
            ? sgemm_(ta, tb, c.m, c.n, c.k, 1.0f, static_cast<const float*>(c.a), lda,
                     static_cast<const float*>(c.b), ldb, 0.0f, c.c, c.n)
            : gemm_bf16_(ta, tb, c.m, c.n, c.k, 1.0f, static_cast<const uint16_t*>(c.a), lda,
                         static_cast<const uint16_t*>(c.b), ldb, 0.0f, c.c, c.n);
    if (status != 0) return internal_error("oneDNN gemm returned status {}", status);
    return ok_status();
  }

 private:
  // Whether dnnl_gemm_bf16bf16f32 runs here: the symbol is there on every CPU, but oneDNN 2.6
  // answers dnnl_unimplemented (3) on one without AVX-512 (a Zen 3), so a 16^3 call asks once.
  bool bf16_runs() const {
    if (!bf16_probed_) {
      bf16_probed_ = true;
      if (gemm_bf16_ != nullptr) {
        std::vector<uint16_t> a(16 * 16, 0x3f80), b(16 * 16, 0x3f80);  // bf16 1.0
        std::vector<float> c(16 * 16);
        bf16_ok_ = gemm_bf16_('N', 'N', 16, 16, 16, 1.0f, a.data(), 16, b.data(), 16, 0.0f,
                              c.data(), 16) == 0;
      }
    }
    return bf16_ok_;
  }

  void* handle_;
  Sgemm sgemm_;
  GemmBf16 gemm_bf16_;
  mutable bool bf16_probed_ = false;
  mutable bool bf16_ok_ = false;
};

class OpenBlas : public GemmPeer {
 public:
  static constexpr int kRowMajor = 101, kNoTrans = 111, kTrans = 112;
  using Sgemm = void (*)(int, int, int, int, int, int, float, const float*, int, const float*, int,
                         float, float*, int);
  using Sbgemm = void (*)(int, int, int, int, int, int, float, const uint16_t*, int,
                          const uint16_t*, int, float, float*, int);

  OpenBlas(void* handle, Sgemm sgemm, Sbgemm sbgemm)
      : handle_(handle), sgemm_(sgemm), sbgemm_(sbgemm) {}
  ~OpenBlas() override { dlclose(handle_); }

  const char* name() const override { return "openblas"; }
  std::string describe() const override {
    auto config = symbol<char* (*)()>(handle_, "openblas_get_config");
    auto corename = symbol<char* (*)()>(handle_, "openblas_get_corename");
    std::string text = config ? config() : "OpenBLAS";
    if (corename) text += fmt::format(" (core {})", corename());
    if (!sbgemm_) text += " (no cblas_sbgemm in this build)";
    return text;
  }
  bool supports(GemmInput input) const override {
    return input == GemmInput::kF32 || (input == GemmInput::kBf16 && sbgemm_ != nullptr);
  }
  // OpenBLAS's workers spin (yielding) for 2^28 time-stamp ticks after a call before they sleep,
  // 0.1 s at 2.6 GHz; the core they hold made the next implementation run at one thread's speed.
  double settle_seconds() const override { return 0.15; }
  Status run(const PeerGemmCall& c) override {
    if (c.m > INT32_MAX || c.n > INT32_MAX || c.k > INT32_MAX)
      return unimplemented("OpenBLAS takes 32-bit sizes");
    const int m = int(c.m), n = int(c.n), k = int(c.k);
    const int ta = c.trans_a ? kTrans : kNoTrans, tb = c.trans_b ? kTrans : kNoTrans;
    const int lda = c.trans_a ? m : k, ldb = c.trans_b ? k : n;
    if (c.input == GemmInput::kF32)
      sgemm_(kRowMajor, ta, tb, m, n, k, 1.0f, static_cast<const float*>(c.a), lda,
             static_cast<const float*>(c.b), ldb, 0.0f, c.c, n);
    else
      sbgemm_(kRowMajor, ta, tb, m, n, k, 1.0f, static_cast<const uint16_t*>(c.a), lda,
              static_cast<const uint16_t*>(c.b), ldb, 0.0f, c.c, n);
    return ok_status();
  }

 private:
  void* handle_;
  Sgemm sgemm_;
  Sbgemm sbgemm_;
};

}  // namespace

std::vector<std::unique_ptr<GemmPeer>> load_gemm_peers(int threads,
                                                       std::vector<std::string>* notes) {
  std::vector<std::unique_ptr<GemmPeer>> peers;
  std::string error;

  // oneDNN runs on OpenMP here: the thread count is read when libgomp starts, and set again
  // below through omp_set_num_threads in case the runtime was already up.
  setenv("OMP_NUM_THREADS", std::to_string(threads).c_str(), 1);
  if (void* dnnl = open_library({"libdnnl.so.3", "libdnnl.so.2", "libdnnl.so"}, &error)) {
    auto sgemm = symbol<OneDnn::Sgemm>(dnnl, "dnnl_sgemm");
    if (sgemm) {
      // dlsym on the library's handle also searches its dependencies (libgomp).
      if (auto set_threads = symbol<void (*)(int)>(dnnl, "omp_set_num_threads"))
        set_threads(threads);
      peers.push_back(std::make_unique<OneDnn>(
          dnnl, sgemm, symbol<OneDnn::GemmBf16>(dnnl, "dnnl_gemm_bf16bf16f32")));
    } else {
      notes->push_back("oneDNN: no dnnl_sgemm in the library");
      dlclose(dnnl);
    }
  } else {
    notes->push_back("oneDNN not loaded: " + error);
  }

  // Left set, these make OpenBLAS run an older kernel than the one it would pick for this CPU.
  unsetenv("OPENBLAS_CORETYPE");
  unsetenv("OPENBLAS_L2_SIZE");
  if (void* blas = open_library({"libopenblas.so.0", "libopenblas.so"}, &error)) {
    auto sgemm = symbol<OpenBlas::Sgemm>(blas, "cblas_sgemm");
    if (sgemm) {
      if (auto set_threads = symbol<void (*)(int)>(blas, "openblas_set_num_threads"))
        set_threads(threads);
      peers.push_back(
          std::make_unique<OpenBlas>(blas, sgemm, symbol<OpenBlas::Sbgemm>(blas, "cblas_sbgemm")));
    } else {
      notes->push_back("OpenBLAS: no cblas_sgemm in the library");
      dlclose(blas);
    }
  } else {
    notes->push_back("OpenBLAS not loaded: " + error);
  }
  return peers;
}

}  // namespace tessel::cli
