// The reference gemm's avx2 variant: this file is compiled with the avx2 flags of
// isa_variants.cmake (x86-64 only).
#if defined(__x86_64__)
#include <string_view>

#include "tile/codegen/cpu/templates/reference_gemm_variant.h"

static_assert(std::string_view(tessel_cpu::kIsaName) == "avx2",
              "reference_gemm_avx2.cpp was compiled without the avx2 flags of isa_variants.cmake");

namespace tessel::tile {
extern constinit const ReferenceGemmVariant kReferenceGemmAvx2 =
    tessel_cpu::make_reference_gemm_variant();
}  // namespace tessel::tile
#endif
