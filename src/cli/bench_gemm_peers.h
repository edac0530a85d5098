// The vendor gemm libraries `tessel bench gemm` compares with, loaded at run time with dlopen so
// that neither is linked into libtessel or the tessel binary: oneDNN (dnnl_sgemm,
// dnnl_gemm_bf16bf16f32) and OpenBLAS (cblas_sgemm, and cblas_sbgemm where the build has it).
// A library that is missing is simply absent from the comparison.
//
//   std::vector<std::unique_ptr<GemmPeer>> peers = load_gemm_peers(/*threads=*/2);
//   for (auto& p : peers) if (p->supports(GemmInput::kBf16)) p->run(...);
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "support/status.h"
#include "tile/codegen/cpu/templates/reference_gemm.h"

namespace tessel::cli {

// C[m x n] = op(A) * op(B), all row-major and contiguous; A and B are f32 or bf16 bits. op(A) is A
// [m x k], or with trans_a the transpose of A stored as [k x m]; op(B) is B [k x n], or with
// trans_b the transpose of B stored as [n x k] (a linear layer's weight).
struct PeerGemmCall {
  int64_t m = 0, n = 0, k = 0;
  tile::GemmInput input = tile::GemmInput::kF32;
  const void* a = nullptr;
  const void* b = nullptr;
  float* c = nullptr;
  bool trans_a = false, trans_b = false;
};

class GemmPeer {
 public:
  virtual ~GemmPeer() = default;
  virtual const char* name() const = 0;  // "onednn", "openblas"
  // Version and, for OpenBLAS, the kernel it chose for this CPU: "OpenBLAS 0.3.21 ... (core Zen)".
  virtual std::string describe() const = 0;
  virtual bool supports(tile::GemmInput input) const = 0;
  virtual Status run(const PeerGemmCall& call) = 0;
  // How long the library's threads keep spinning after a call, holding cores that the next
  // implementation would need; the benchmark waits this long before timing anything else.
  virtual double settle_seconds() const = 0;
};

// The peers found on this machine, each set to use `threads` threads. OPENBLAS_CORETYPE and
// OPENBLAS_L2_SIZE are removed from this process's environment before OpenBLAS loads, so that it
// picks its kernel from the CPU itself; `notes` collects what could not be loaded and why.
std::vector<std::unique_ptr<GemmPeer>> load_gemm_peers(int threads,
                                                       std::vector<std::string>* notes);

}  // namespace tessel::cli
