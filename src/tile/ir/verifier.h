// Structural checks of a whole kernel, run by the pipeline after every pass: every variable and
// buffer is defined where it is used (buffers by identity, so a pass that changes a buffer must
// change every reference), element stores only happen in parallel loops, tile operations and
// barriers never do, and a specialised kernel has no parameters left. A failure is a compiler
// bug, reported as an internal error that names the pass.
#pragma once

#include "support/status.h"
#include "tile/ir/ir.h"

namespace tessel::tile {

Status verify(const Kernel& kernel);

}  // namespace tessel::tile
