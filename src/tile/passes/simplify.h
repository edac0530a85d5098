// Pass: fold constants and drop identities (x + 0, x * 1, casts to the same type, selects and
// ifs on constant conditions). Integer division and remainder round toward zero, as in C and in
// every code generator.
#pragma once

#include "tile/ir/ir.h"

namespace tessel::tile {

Expr simplify(const Expr& e);
Stmt simplify(const Stmt& s);
Kernel simplify(Kernel k);

}  // namespace tessel::tile
