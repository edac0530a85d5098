// Shape helpers: strides, element counts, dim normalisation and broadcasting, with their errors.
#include "runtime/shape.h"

#include <gtest/gtest.h>

namespace tessel {
namespace {

TEST(Shape, StridesAndCounts) {
  EXPECT_EQ(contiguous_strides({2, 3, 4}), (Strides{12, 4, 1}));
  EXPECT_EQ(contiguous_strides({}), Strides{});
  EXPECT_EQ(contiguous_strides({5, 0, 2}), (Strides{2, 2, 1}));
  EXPECT_EQ(shape_numel({2, 3, 4}), 24);
  EXPECT_EQ(shape_numel({}), 1);
  EXPECT_EQ(shape_numel({3, 0}), 0);
  EXPECT_EQ(shape_string({2, 3}), "[2, 3]");
  EXPECT_EQ(shape_string({}), "[]");
}

TEST(Shape, ChecksSizes) {
  EXPECT_TRUE(check_shape({1 << 20, 1 << 20}, 4).ok());
  EXPECT_EQ(check_shape({3, -2}, 4).message(), "shape [3, -2] has a negative size");
  Status huge = check_shape({int64_t{1} << 40, int64_t{1} << 30}, 2);
  EXPECT_EQ(huge.message(),
            "shape [1099511627776, 1073741824] is too large: its byte size overflows");
}

TEST(Shape, NormalizesDims) {
  EXPECT_EQ(*normalize_dim(-1, {2, 3}), 1);
  EXPECT_EQ(*normalize_dim(0, {2, 3}), 0);
  EXPECT_EQ(normalize_dim(2, {2, 3}).status().message(),
            "dim 2 is out of range for shape [2, 3] (rank 2)");
  EXPECT_EQ(normalize_dim(-3, {2, 3}).status().code(), Code::kOutOfRange);
}

TEST(Shape, Broadcasts) {
  EXPECT_EQ(*broadcast_shapes({3, 1}, {4}), (Shape{3, 4}));
  EXPECT_EQ(*broadcast_shapes({2, 1, 5}, {7, 1}), (Shape{2, 7, 5}));
  EXPECT_EQ(*broadcast_shapes({}, {2, 2}), (Shape{2, 2}));
  EXPECT_EQ(*broadcast_shapes({0}, {1}), (Shape{0}));
  EXPECT_EQ(broadcast_shapes({2, 3}, {4, 3}).status().message(),
            "shapes [2, 3] and [4, 3] do not broadcast: size 2 against 4 at dim 0");
}

}  // namespace
}  // namespace tessel
