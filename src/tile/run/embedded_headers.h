// The headers that generated CPU kernels include, as text compiled into libtessel
// (src/tile/CMakeLists.txt embeds them). The CPU JIT writes them out for the system compiler.
#pragma once

#include <cstddef>

namespace tessel::tile {

struct EmbeddedFile {
  const char* path;  // relative to src/: "tile/codegen/cpu/prelude.h"
  const char* text;
};

extern const EmbeddedFile kEmbeddedCpuHeaders[];
extern const size_t kEmbeddedCpuHeaderCount;

}  // namespace tessel::tile
