// .tile source -> IR. A file holds one or more kernels:
//
//   kernel gemm<T: dtype = f32, BM = 64, BN = 64, BK = 64>(A: T[M, K], B: T[K, N], C: f32[M, N]) {
//     grid (cdiv(N, BN), cdiv(M, BM)) as (bx, by) { ... }
//   }
//
// The full grammar is in docs/TILE.md. Any mistake in the source comes back as a Status whose
// message starts with "file:line:col: "; the parser never asserts on its input.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "support/status.h"
#include "tile/ir/ir.h"

namespace tessel::tile {

// `file` is the name used in messages (a path, or something like "<test>").
Expected<std::vector<Kernel>> parse_tile(std::string_view source, const std::string& file);

// The one kernel in `source`, or the one called `name` when the file has several.
Expected<Kernel> parse_kernel(std::string_view source, const std::string& file,
                              const std::string& name = "");

// Reads and parses a file from disk.
Expected<std::vector<Kernel>> parse_tile_file(const std::string& path);

}  // namespace tessel::tile
