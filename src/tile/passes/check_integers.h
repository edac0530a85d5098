// Pass: after specialisation, every integer the compiler would have to compute at compile time
// has a value. Folding (simplify) leaves an operation unfolded when its exact result does not
// fit its type or it divides by zero; this pass names each such operation with its
// file:line:col ("integer overflow: 9223372036854775807 * 2 does not fit i64", "division by zero
// in 'cdiv(N, 0)'"), so hostile kernels give an error rather than a wrapped size or a
// division by zero in the generated code.
#pragma once

#include "support/status.h"
#include "tile/ir/ir.h"

namespace tessel::tile {

Status check_integers(const Kernel& kernel);

}  // namespace tessel::tile
