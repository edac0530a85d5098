// Text form of the tile IR. Before lowering, the text is valid .tile source: parsing what the
// printer wrote gives back the same IR (and prints the same text). Lowered IR adds a few
// annotations the parser does not accept (layouts, masks, limits, barriers), written so a person
// can read what each pass did: `tessel compile --dump-ir`.
#pragma once

#include <string>

#include "tile/ir/ir.h"

namespace tessel::tile {

std::string to_string(const Expr& e);
std::string to_string(const Stmt& s, int indent = 0);
std::string to_string(const Kernel& k);
std::string shape_string(const std::vector<Expr>& shape);  // "[64, 32]"

}  // namespace tessel::tile
