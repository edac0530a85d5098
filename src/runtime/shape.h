// Shapes and strides of tensors, and the checks on them that user code can get wrong.
//
// A Shape lists sizes outermost first; Strides says, per dimension, how many elements apart two
// neighbours along it are (0 for a broadcast dimension). Dimensions may be negative, counting
// from the end, wherever a function takes a `dim`.
//
//   Shape s = {2, 3, 4};
//   contiguous_strides(s) == Strides{12, 4, 1};   shape_numel(s) == 24
//   shape_string(s) == "[2, 3, 4]"
//   *broadcast_shapes({3, 1}, {4}) == Shape{3, 4}
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "support/status.h"

namespace tessel {

using Shape = std::vector<int64_t>;
using Strides = std::vector<int64_t>;

int64_t shape_numel(const Shape& shape);
// Row-major strides: the last dimension varies fastest.
Strides contiguous_strides(const Shape& shape);
std::string shape_string(const std::vector<int64_t>& dims);

// Checks that every size is >= 0 and that the element count and its byte size fit in int64.
Status check_shape(const Shape& shape, size_t element_size);

// `dim` in [-rank, rank) mapped to [0, rank); otherwise out_of_range naming the shape.
Expected<int64_t> normalize_dim(int64_t dim, const Shape& shape);

// NumPy broadcasting: align at the end; each pair of sizes must match or one of them be 1.
Expected<Shape> broadcast_shapes(const Shape& a, const Shape& b);

}  // namespace tessel
