// copy_strided against a plain index loop, for element sizes with and without a typed fast path
// and for layouts that merge, broadcast (stride 0) or interleave.
#include "runtime/cpu/strided_copy.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

namespace tessel {
namespace {

// Reference: visit every index of `shape` with an odometer and copy one element.
std::vector<unsigned char> reference(const Shape& shape, size_t element_size, size_t dst_bytes,
                                     const Strides& dst_strides,
                                     const std::vector<unsigned char>& src,
                                     const Strides& src_strides) {
  std::vector<unsigned char> dst(dst_bytes, 0xee);
  std::vector<int64_t> index(shape.size(), 0);
  for (int64_t n = 0; n < shape_numel(shape); ++n) {
    int64_t d_off = 0, s_off = 0;
    for (size_t i = 0; i < shape.size(); ++i) {
      d_off += index[i] * dst_strides[i];
      s_off += index[i] * src_strides[i];
    }
    std::memcpy(&dst[d_off * element_size], &src[s_off * element_size], element_size);
    for (size_t i = shape.size(); i-- > 0;) {
      if (++index[i] < shape[i]) break;
      index[i] = 0;
    }
  }
  return dst;
}

void check(const Shape& shape, size_t element_size, const Strides& dst_strides,
           const Strides& src_strides, size_t src_elements, size_t dst_elements) {
  std::vector<unsigned char> src(src_elements * element_size);
  for (size_t i = 0; i < src.size(); ++i)
    src[i] = static_cast<unsigned char>(i * 31 + 7);
  std::vector<unsigned char> dst(dst_elements * element_size, 0xee);
  copy_strided(shape, element_size, dst.data(), dst_strides, src.data(), src_strides);
  EXPECT_EQ(dst, reference(shape, element_size, dst.size(), dst_strides, src, src_strides))
      << shape_string(shape) << " element size " << element_size;
}

TEST(StridedCopy, MatchesAnIndexLoop) {
  for (size_t element_size : {1, 2, 3, 4, 8, 16}) {
    check({4, 5}, element_size, {5, 1}, {1, 4}, 20, 20);             // transpose
    check({2, 3, 4}, element_size, {12, 4, 1}, {12, 4, 1}, 24, 24);  // one merged row
    check({3, 4}, element_size, {4, 1}, {0, 1}, 4, 12);              // broadcast rows
    check({3, 4}, element_size, {8, 2}, {1, 3}, 12, 24);             // gaps in the destination
    check({1, 7, 1}, element_size, {7, 1, 1}, {1, 2, 9}, 14, 7);     // size-1 dims dropped
    check({}, element_size, {}, {}, 1, 1);                           // one element
    check({0, 3}, element_size, {3, 1}, {3, 1}, 0, 0);               // nothing
  }
  check({300, 257}, 4, {1, 300}, {257, 1}, 300 * 257, 300 * 257);  // big enough to go parallel
}

}  // namespace
}  // namespace tessel
