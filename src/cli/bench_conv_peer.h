// oneDNN's convolution primitives, the peer `tessel bench conv` compares with, loaded at run time
// with dlopen (as bench_gemm_peers.h loads its gemms), so oneDNN is linked into nothing. The
// primitives get the memory layouts oneDNN prefers for each shape (format `any`: its blocked
// nChw16c and weight layouts), which is its best case; the reorders into them are not timed.
//
//   std::string why;
//   std::unique_ptr<ConvPeer> dnnl = load_onednn_conv(/*threads=*/2, &why);
//   auto fwd = dnnl->prepare(shape, ConvPass::kForward);   // then (*fwd)->run() in a loop
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "support/status.h"

namespace tessel::cli {

// One convolution: x [n, c, h, w], weight [o, c, k, k], stride, padding (no groups, dilation 1).
struct ConvLayerShape {
  int64_t n = 1, c = 1, h = 1, w = 1, o = 1, k = 1, stride = 1, pad = 0;
  int64_t out_h() const { return (h + 2 * pad - k) / stride + 1; }
  int64_t out_w() const { return (w + 2 * pad - k) / stride + 1; }
  // Multiply-adds times two: the same for all three passes.
  double flop() const { return 2.0 * double(n * o * out_h() * out_w()) * double(c * k * k); }
};

enum class ConvPass { kForward, kBackwardData, kBackwardWeights };
const char* conv_pass_name(ConvPass pass);  // "fwd", "bwd_data", "bwd_weight"

// A primitive with its memory, ready to run.
class ConvPrimitive {
 public:
  virtual ~ConvPrimitive() = default;
  virtual Status run() = 0;  // returns when the result is in memory
};

class ConvPeer {
 public:
  virtual ~ConvPeer() = default;
  virtual std::string describe() const = 0;  // "oneDNN 2.6.3"
  virtual Expected<std::unique_ptr<ConvPrimitive>> prepare(const ConvLayerShape& shape,
                                                           ConvPass pass) = 0;
  // libgomp's workers spin a few ms after a call; the next implementation waits this long.
  virtual double settle_seconds() const = 0;
};

// oneDNN on `threads` OpenMP threads, or null with the reason in *why.
std::unique_ptr<ConvPeer> load_onednn_conv(int threads, std::string* why);

}  // namespace tessel::cli
