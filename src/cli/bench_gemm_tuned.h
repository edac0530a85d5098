// The tuned side of `tessel bench gemm`: gemm kernels compiled with the block sizes the tuning
// database chose for each benchmarked shape (`tessel tune gemm --shape MxKxN`), looked up as the
// op library looks them up (tune/choices.h; the nearest tuned shape when not that one).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "ops/device_kernel.h"
#include "support/status.h"
#include "tile/codegen/cpu/templates/reference_gemm.h"
#include "tile/ir/ir.h"

namespace tessel::cli {

struct TunedGemm {
  std::shared_ptr<ops::DeviceKernel> kernel;
  std::string params;       // "BK=384 BM=192 BN=256"
  bool is_default = false;  // the tuner kept gemm.tile's own block sizes for this shape
};
// By (dtype, m, n, k); empty when the database chose nothing for any shape.
using TunedGemms = std::map<std::tuple<tile::GemmInput, int64_t, int64_t, int64_t>, TunedGemm>;

// `base` holds T and U; shapes are (m, n, k).
Expected<TunedGemms> tuned_cpu_gemms(
    const tile::Kernel& gemm, const std::vector<tile::GemmInput>& dtypes,
    const std::vector<std::tuple<int64_t, int64_t, int64_t>>& shapes,
    const std::map<tile::GemmInput, std::map<std::string, std::string>>& base);

}  // namespace tessel::cli
