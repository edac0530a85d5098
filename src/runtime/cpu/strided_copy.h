// Copies a strided block of host memory into another strided block: the CPU's way of making a
// view contiguous, and of writing into a view.
//
//   // dst is a contiguous [4, 3] buffer, src the transpose of a contiguous [3, 4] one:
//   copy_strided({4, 3}, sizeof(float), dst, {3, 1}, src, {1, 4});
//
// Strides are in elements of `element_size` bytes and may be 0 (the same source element read
// many times); destination elements must not overlap. Dimensions that are contiguous in both
// are merged first, rows whose inner stride is 1 on both sides are copied with memcpy, and
// large copies run on the thread pool.
#pragma once

#include <cstddef>

#include "runtime/shape.h"

namespace tessel {

void copy_strided(const Shape& shape, size_t element_size, void* dst, const Strides& dst_strides,
                  const void* src, const Strides& src_strides);

}  // namespace tessel
