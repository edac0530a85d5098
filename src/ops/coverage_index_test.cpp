// Edge cases of index_select, gather and scatter_add (ops/index_ops.cpp) on every device the op
// library launches on: negative ids counted from the end (ONNX Gather / GatherElements /
// ScatterElements; PyTorch raises for them), ids outside [-N, N) as errors found on the ids'
// device (PyTorch: "index out of range"), repeated ids summing their gradients. Values are
// PyTorch's for the same inputs with the negative ids written as id + N
// (tools/pytorch/edge_cases.py prints them).
#include <gtest/gtest.h>

#include "ops/op.h"
#include "ops/ops.h"
#include "ops/testing/edge_check.h"

namespace tessel::ops {
namespace {

using namespace testing;  // NOLINT: the helpers of ops/testing/edge_check.h

TEST(OpIndexEdgeCases, NegativeIdsCountFromTheEnd) {
  for_each_device("index_select", {DType::kF32}, [&](Device* d) {
    Tensor x = floats(d, iota(12), {4, 3});
    // x.index_select(0, [3, 0]) and the ONNX Gather of a [2, 1] index along dim 1.
    EXPECT_EQ(host(index_select(x, 0, longs(d, {-1, 0}, {2}))),
              (std::vector<float>{9, 10, 11, 0, 1, 2}));
    Expected<Tensor> g = index_select(x, 1, longs(d, {-3, 2}, {2, 1}));
    ASSERT_TRUE(g.ok()) << g.status().to_string();
    EXPECT_EQ(g->shape(), (Shape{4, 2, 1}));
    EXPECT_EQ(host(g), (std::vector<float>{0, 2, 3, 5, 6, 8, 9, 11}));
    // torch.gather(x, 0, [[3, 0, 1]]).
    EXPECT_EQ(host(gather(x, 0, longs(d, {-1, 0, -3}, {1, 3}))), (std::vector<float>{9, 1, 5}));
    // zeros(4, 3).scatter_add(0, [[3, 0, 1]], ones).
    EXPECT_EQ(host(scatter_add(floats(d, std::vector<float>(12, 0), {4, 3}), 0,
                               longs(d, {-1, 0, -3}, {1, 3}), floats(d, {1, 1, 1}, {1, 3}))),
              (std::vector<float>{0, 1, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0}));
  });
}

TEST(OpIndexEdgeCases, IdsOutsideTheDimensionAreErrors) {
  for_each_device("gather", {DType::kF32}, [&](Device* d) {
    Tensor x = floats(d, iota(12), {4, 3});
    expect_error(index_select(x, 0, longs(d, {0, 4}, {2})), Code::kOutOfRange,
                 {"index_select: index 4 at position 1 is outside [-4, 4)"});
    expect_error(index_select(x, 1, longs(d, {-4}, {1})), Code::kOutOfRange,
                 {"index -4 at position 0 is outside [-3, 3)"});
    expect_error(gather(x, 0, longs(d, {4, 0, 1}, {1, 3})), Code::kOutOfRange,
                 {"gather: index 4 at position 0"});
    expect_error(scatter_add(x, 0, longs(d, {0, -5, 1}, {1, 3}), floats(d, {1, 1, 1}, {1, 3})),
                 Code::kOutOfRange, {"scatter_add: index -5 at position 1"});
    expect_error(gather(x, 0, longs(d, {0, 1, 2, 3}, {1, 4})), Code::kInvalidArgument,
                 {"gather: index must have x's rank and sizes no larger than x's except along "
                  "dim 0"});
  });
}

// An index smaller than x in the other dimensions (and than src, for scatter_add), as PyTorch
// allows: gather reads and scatter_add writes only the covered part (tools/pytorch/
// edge_cases.py). src's gradient is 0 past the index (PyTorch 2.15 fails there).
TEST(OpIndexEdgeCases, IndexSmallerThanTheInput) {
  for_each_device("gather", {DType::kF32}, [&](Device* d) {
    Tensor x = floats(d, iota(12), {4, 3});
    Tensor index = longs(d, {3, 0, 2, -1}, {2, 2});
    EXPECT_EQ(host(gather(x, 0, index)), (std::vector<float>{9, 1, 6, 10}));
    std::vector<Tensor> g =
        backward_of("gather", {x, index}, floats(d, {1, 2, 3, 4}, {2, 2}), Attrs().set("dim", 0));
    EXPECT_EQ(host(g[0]), (std::vector<float>{0, 2, 0, 0, 0, 0, 3, 0, 0, 1, 4, 0}));
    Tensor zeros = floats(d, std::vector<float>(12, 0), {4, 3});
    Tensor src = floats(d, iota(12), {3, 4}), into = longs(d, {2, 2, 0, 1}, {2, 2});
    EXPECT_EQ(host(scatter_add(zeros, 1, into, src)),
              (std::vector<float>{0, 0, 1, 4, 5, 0, 0, 0, 0, 0, 0, 0}));
    g = backward_of("scatter_add", {zeros, into, src}, floats(d, iota(12), {4, 3}),
                    Attrs().set("dim", 1));
    EXPECT_EQ(host(g[0]), iota(12));
    EXPECT_EQ(host(g[2]), (std::vector<float>{2, 2, 0, 0, 3, 4, 0, 0, 0, 0, 0, 0}));
  });
}

// Repeated ids add their gradients (PyTorch: x.index_select(0, [1, 1, 3]) with output gradient
// rows 1, 2, 4 gives rows [0, 3, 0, 4]); scatter_add's gradients are g and g gathered.
TEST(OpIndexEdgeCases, RepeatedIdsSumTheirGradients) {
  for_each_device("scatter_add", {DType::kF32}, [&](Device* d) {
    Tensor x = floats(d, iota(12), {4, 3});
    std::vector<Tensor> g =
        backward_of("index_select", {x, longs(d, {1, -3, 3}, {3})},
                    floats(d, {1, 1, 1, 2, 2, 2, 4, 4, 4}, {3, 3}), Attrs().set("dim", 0));
    EXPECT_EQ(host(g[0]), (std::vector<float>{0, 0, 0, 3, 3, 3, 0, 0, 0, 4, 4, 4}));
    Tensor zeros = floats(d, std::vector<float>(6, 0), {2, 3});
    Tensor index = longs(d, {0, 0, 2, 1, 1, 1}, {2, 3});
    Tensor src = floats(d, iota(6), {2, 3});
    EXPECT_EQ(host(scatter_add(zeros, 1, index, src)), (std::vector<float>{1, 0, 2, 0, 12, 0}));
    g = backward_of("scatter_add", {zeros, index, src}, floats(d, iota(6, 10), {2, 3}),
                    Attrs().set("dim", 1));
    EXPECT_EQ(host(g[0]), iota(6, 10));
    EXPECT_EQ(host(g[2]), (std::vector<float>{10, 10, 12, 14, 14, 14}));
  });
}

}  // namespace
}  // namespace tessel::ops
