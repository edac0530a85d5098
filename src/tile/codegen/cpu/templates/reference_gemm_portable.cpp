// The reference gemm's portable variant: this file is compiled without ISA flags (plain C++ for
// any target; SSE2 on x86-64).
#include <string_view>

#include "tile/codegen/cpu/templates/reference_gemm_variant.h"

static_assert(std::string_view(tessel_cpu::kIsaName) == "portable",
              "reference_gemm_portable.cpp must be compiled without ISA flags");

namespace tessel::tile {
extern constinit const ReferenceGemmVariant kReferenceGemmPortable =
    tessel_cpu::make_reference_gemm_variant();
}  // namespace tessel::tile
