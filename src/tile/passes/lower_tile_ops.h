// Pass: rewrite tile operations as element loops, so code generators only see loops, loads and
// stores. fill -> parallel store; copy -> parallel load/convert/store (global reads get a mask
// from infer_bounds; `pad` becomes the masked value); reduce -> parallel over the result with a
// serial loop along the axis; gemm -> a serial loop over k around a parallel multiply-add.
//
// On the CPU, a gemm of two packed tiles and the copies into packed tiles (pack_gemm_operands)
// stay whole: the CPU code generator turns them into calls of the per-ISA micro-kernel templates.
#pragma once

#include "tile/ir/ir.h"
#include "tile/target.h"

namespace tessel::tile {

Kernel lower_tile_ops(const Kernel& kernel, const Target& target);

}  // namespace tessel::tile
