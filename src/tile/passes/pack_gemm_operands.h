// Pass (CPU): a shared tile that is only ever filled by copies and only read as the same gemm
// operand (A, or B, transposed or not) is stored packed in the layout of the CPU micro-kernels
// (Layout::kPackedA / kPackedB), so the copy into it is the packing step and the gemm reads it
// directly. That is how BLAS libraries are built; every other tile stays row-major.
#pragma once

#include "tile/ir/ir.h"

namespace tessel::tile {

Kernel pack_gemm_operands(const Kernel& kernel);

}  // namespace tessel::tile
