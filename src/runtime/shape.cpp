// Shape arithmetic and its error messages.
#include "runtime/shape.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <limits>

namespace tessel {

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

Strides contiguous_strides(const Shape& shape) {
  Strides strides(shape.size());
  int64_t stride = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = stride;
    stride *= std::max<int64_t>(shape[i], 1);
  }
  return strides;
}

std::string shape_string(const std::vector<int64_t>& dims) {
  return fmt::format("{}", dims);
}

Status check_shape(const Shape& shape, size_t element_size) {
  const int64_t limit = std::numeric_limits<int64_t>::max() / static_cast<int64_t>(element_size);
  // The strides count a size-0 dimension as 1 (contiguous_strides), so the product of the sizes
  // with zeros taken as ones must fit too, even when the shape holds no element.
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) return invalid_argument("shape {} has a negative size", shape_string(shape));
    const int64_t factor = std::max<int64_t>(d, 1);
    if (n > limit / factor) {
      return invalid_argument("shape {} is too large: its byte size overflows",
                              shape_string(shape));
    }
    n *= factor;
  }
  return ok_status();
}

Expected<int64_t> normalize_dim(int64_t dim, const Shape& shape) {
  const int64_t rank = static_cast<int64_t>(shape.size());
  if (dim < -rank || dim >= rank) {
    return out_of_range("dim {} is out of range for shape {} (rank {})", dim, shape_string(shape),
                        rank);
  }
  return dim < 0 ? dim + rank : dim;
}

Expected<Shape> broadcast_shapes(const Shape& a, const Shape& b) {
  Shape out(std::max(a.size(), b.size()));
  for (size_t i = 0; i < out.size(); ++i) {
    // Sizes counted from the end; a missing leading dimension acts as 1.
    const int64_t da = i < a.size() ? a[a.size() - 1 - i] : 1;
    const int64_t db = i < b.size() ? b[b.size() - 1 - i] : 1;
    if (da != db && da != 1 && db != 1) {
      return invalid_argument("shapes {} and {} do not broadcast: size {} against {} at dim {}",
                              shape_string(a), shape_string(b), da, db,
                              static_cast<int64_t>(out.size() - 1 - i));
    }
    out[out.size() - 1 - i] = da == 1 ? db : da;
  }
  return out;
}

}  // namespace tessel
