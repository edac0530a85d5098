// conv_transpose2d, conv_transpose1d, conv1d (ops/conv_transpose_ops.cpp) and conv3d
// (ops/conv3d_ops.cpp) against PyTorch on
// every device the op library launches on: src/ops/testdata/conv_cases.txt
// (tools/pytorch/coverage_fixtures.py) holds stride, padding, output_padding (also past the
// stride, below the dilation), dilation, groups and a depth that takes the CPU's implicit gemm,
// with PyTorch's output and the gradients of x, weight and bias. Random shapes against the C++
// reference and finite differences are in ops_test.cpp; here also the errors PyTorch raises.
#include <gtest/gtest.h>

#include "ops/op.h"
#include "ops/ops.h"
#include "ops/testing/edge_check.h"
#include "ops/testing/fixture.h"

namespace tessel::ops {
namespace {

using namespace testing;  // NOLINT: the helpers of ops/testing/

TEST(OpConvEdgeCases, MatchPyTorchOnEveryDevice) {
  const std::vector<FixtureCase> cases = read_fixture("conv");
  EXPECT_GE(cases.size(), 7u);
  for (const FixtureCase& c : cases) {
    for_each_device(c.op, {DType::kF32, DType::kF32, DType::kF32}, [&](Device* d) {
      SCOPED_TRACE(c.label);
      std::vector<Tensor> in;
      for (const char* name : {"x", "weight", "bias"})
        in.push_back(floats(d, c.floats(name), c.tensor(name).shape));
      Expected<Tensor> y = run(c.op, in, c.attrs);
      ASSERT_TRUE(y.ok()) << y.status().to_string();
      EXPECT_EQ(y->shape(), c.tensor("y").shape);
      expect_matches(host(y), c.tensor("y").values, 1e-5, 1e-5, "output");
      const RefTensor& gy = c.tensor("gy");
      std::vector<Tensor> g = backward_of(c.op, in, floats(d, c.floats("gy"), gy.shape), c.attrs);
      expect_matches(host(g[0]), c.tensor("gx").values, 1e-5, 1e-5, "x gradient");
      expect_matches(host(g[1]), c.tensor("gweight").values, 1e-5, 1e-5, "weight gradient");
      expect_matches(host(g[2]), c.tensor("gbias").values, 1e-5, 1e-5, "bias gradient");
    });
  }
}

TEST(OpConvEdgeCases, TransposedConvolutionErrors) {
  for_each_device("conv_transpose2d", {DType::kF32, DType::kF32, DType::kF32}, [&](Device* d) {
    Tensor x = floats(d, iota(9), {1, 1, 3, 3}), w = floats(d, iota(9), {1, 1, 3, 3});
    Tensor b = floats(d, {0}, {1});
    // PyTorch: "output padding must be smaller than either stride or dilation".
    expect_error(conv_transpose2d(x, w, b, {2, 2}, {0, 0}, {2, 2}), Code::kInvalidArgument,
                 {"output padding must be smaller than either stride or dilation"});
    expect_error(conv_transpose2d(x, w, b, {1, 1}, {3, 3}), Code::kInvalidArgument,
                 {"conv_transpose2d: output size is too small"});
    expect_error(conv_transpose2d(x, floats(d, iota(18), {2, 1, 3, 3}), b), Code::kInvalidArgument,
                 {"needs x [N, Cin, H, W], weight [Cin"});
    expect_error(conv1d(x, w, b), Code::kInvalidArgument, {"conv1d: needs x [N, C, L]"});
  });
}

// conv3d's errors, worded as PyTorch's where PyTorch has them.
TEST(OpConvEdgeCases, Conv3dErrors) {
  for_each_device("conv3d", {DType::kF32, DType::kF32, DType::kF32}, [&](Device* d) {
    Tensor x = floats(d, iota(32), {1, 1, 2, 4, 4}), w = floats(d, iota(27), {1, 1, 3, 3, 3});
    Tensor b = floats(d, {0}, {1});
    expect_error(conv3d(x, w, b), Code::kInvalidArgument,
                 {"Calculated padded input size per channel: (2 x 4 x 4). Kernel size: (3 x 3 x "
                  "3). Kernel size can't be greater than actual input size"});
    EXPECT_EQ(conv3d(x, w, b, {1, 1, 1}, {1, 0, 0}).value().shape(), (Shape{1, 1, 2, 2, 2}));
    // No images: an empty output (PyTorch: [0, 1, 1, 2, 2] for this window).
    Tensor none = Tensor::empty({0, 1, 3, 4, 4}, DType::kF32, d).value();
    EXPECT_EQ(conv3d(none, w, b).value().shape(), (Shape{0, 1, 1, 2, 2}));
    expect_error(conv3d(floats(d, iota(16), {1, 1, 4, 4}), w, b), Code::kInvalidArgument,
                 {"conv3d: needs x [N, C, D, H, W]"});
    expect_error(conv3d(x, w, b, {1, 1}), Code::kInvalidArgument, {"stride needs 1 or 3 values"});
    expect_error(conv3d(x, w, b, {0, 1, 1}, {1, 1, 1}), Code::kInvalidArgument,
                 {"strides and dilations >= 1"});
  });
}

// conv1d is conv2d over [N, C, 1, L]: the same values, bit for bit.
TEST(OpConvEdgeCases, Conv1dIsConv2dOverAUnitHeight) {
  for_each_device("conv1d", {DType::kF32, DType::kF32, DType::kF32}, [&](Device* d) {
    Tensor x = floats(d, iota(2 * 3 * 10, -7), {2, 3, 10});
    Tensor w = floats(d, iota(4 * 3 * 3, -11), {4, 3, 3}), b = floats(d, {1, 2, 3, 4}, {4});
    std::vector<float> one = host(conv1d(x, w, b, 2, 1, 2));
    std::vector<float> two =
        host(conv2d(reshape(x, {2, 3, 1, 10}).value(), reshape(w, {4, 3, 1, 3}).value(), b, {1, 2},
                    {0, 1}, {1, 2}));
    EXPECT_EQ(one, two);
  });
}

}  // namespace
}  // namespace tessel::ops
