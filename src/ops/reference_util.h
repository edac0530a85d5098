// Small pieces shared by the plain-C++ references of the ops (used only by tests): row-major
// indexing and broadcasting, written independently of the runtime's shape code.
#pragma once

#include <cstdint>
#include <vector>

#include "ops/op.h"

namespace tessel::ops::reference {

inline int64_t numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s)
    n *= d;
  return n;
}

// The multi-index of a row-major linear position.
inline std::vector<int64_t> unravel(int64_t linear, const Shape& shape) {
  std::vector<int64_t> index(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    index[d] = shape[d] == 0 ? 0 : linear % shape[d];
    linear = shape[d] == 0 ? 0 : linear / shape[d];
  }
  return index;
}

// The row-major position in `shape` of an index of a shape it broadcasts to (aligned at the end;
// size-1 dimensions repeat).
inline int64_t broadcast_source(const std::vector<int64_t>& out_index, const Shape& shape) {
  int64_t linear = 0;
  size_t skip = out_index.size() - shape.size();
  for (size_t d = 0; d < shape.size(); ++d)
    linear = linear * shape[d] + (shape[d] == 1 ? 0 : out_index[skip + d]);
  return linear;
}

inline Shape broadcast(const Shape& a, const Shape& b) {
  Shape out(std::max(a.size(), b.size()), 1);
  for (size_t i = 0; i < out.size(); ++i) {
    int64_t x = i < out.size() - a.size() ? 1 : a[i - (out.size() - a.size())];
    int64_t y = i < out.size() - b.size() ? 1 : b[i - (out.size() - b.size())];
    out[i] = x == 1 ? y : x;
  }
  return out;
}

// Whether dropout keeps the element at row-major position n: the hash of kernels/mask.tile's
// `dropout`, written out again (threshold = ceil(p (2^31 - 1))).
inline bool dropout_keeps(int64_t n, int64_t seed, int64_t threshold) {
  constexpr int64_t kPrime = 2147483647;  // 2^31 - 1
  const int64_t h1 = (n % kPrime + (seed % kPrime) * 16807 + 1) % kPrime;
  const int64_t h2 = (h1 * h1 + 12345) % kPrime;
  const int64_t h3 = (h2 * 48271 + h1) % kPrime;
  const int64_t h4 = (h3 * h3 + 1013904223) % kPrime;
  return h4 >= threshold;
}

}  // namespace tessel::ops::reference
