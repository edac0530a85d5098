// Edge cases of the op library against PyTorch's behaviour (issue 13), on every device the op
// library launches on: inputs that used to give a value without an error (class ids and
// embedding ids out of range, windows larger than the padded input, a negative eps) and tensors
// with a 0-sized dimension, views of more than 4 dimensions, ONNX's noop_with_empty_axes.
// Each expectation is what PyTorch 2 returns or raises for the same call (tools/pytorch/
// edge_cases.py prints them); values are closed forms (a sum of nothing is 0) or the inputs.
#include <gtest/gtest.h>

#include <cmath>

#include "ops/op.h"
#include "ops/ops.h"
#include "ops/testing/edge_check.h"

namespace tessel::ops {
namespace {

using namespace testing;  // NOLINT: the helpers of ops/testing/edge_check.h

// PyTorch: IndexError "Target 5 is out of bounds." for each of these, on the CPU and CUDA.
TEST(OpEdgeCases, CrossEntropyRejectsClassIdsOutsideTheClasses) {
  for_each_device("cross_entropy", {DType::kF32}, [&](Device* d) {
    Tensor logits = floats(d, iota(20, -3), {4, 5});
    for (int64_t bad : {int64_t{5}, int64_t{-1}, int64_t{1000000}, int64_t{1} << 40}) {
      expect_error(
          cross_entropy(logits, longs(d, {0, 1, bad, 2}, {4})), Code::kOutOfRange,
          {"cross_entropy: target " + std::to_string(bad) + " at position 2", "outside [0, 5)"});
    }
    // An ignored target may be anything, inside the classes or not; its row is left out.
    Expected<Tensor> kept = cross_entropy(logits, longs(d, {0, 1, -100, 2}, {4}));
    Expected<Tensor> three =
        cross_entropy(logits.slice(0, 0, 2).value(), longs(d, {0, 1}, {2}), -100, 0.0, 1);
    Expected<Tensor> last =
        cross_entropy(logits.slice(0, 3, 4).value(), longs(d, {2}, {1}), -100, 0.0, 1);
    ASSERT_TRUE(three.ok()) << three.status().to_string();
    ASSERT_TRUE(last.ok()) << last.status().to_string();
    EXPECT_NEAR(host(kept)[0], (host(three)[0] + host(last)[0]) / 3, 1e-5);
  });
}

// PyTorch: IndexError "index out of range in self" (CPU), a device assert (CUDA). On OpenCL the
// kernel read zero rows for these before the check on the device.
TEST(OpEdgeCases, EmbeddingRejectsIdsOutsideTheTableOnEveryDevice) {
  for_each_device("embedding", {DType::kF32}, [&](Device* d) {
    Tensor table = floats(d, iota(6), {2, 3});
    expect_error(embedding(table, longs(d, {0, 9}, {2})), Code::kOutOfRange,
                 {"embedding: id 9 at position 1", "outside [0, 2)"});
    expect_error(embedding(table, longs(d, {1, 0, -1}, {3})), Code::kOutOfRange,
                 {"id -1 at position 2"});
    // A large batch of good ids with one bad one at the end: the device's verdict finds it.
    std::vector<int64_t> many(5000, 1);
    many.back() = 2;
    expect_error(embedding(table, longs(d, many, {50, 100})), Code::kOutOfRange,
                 {"id 2 at position 4999"});
    many.back() = 0;
    std::vector<float> rows = host(embedding(table, longs(d, many, {50, 100})));
    ASSERT_EQ(rows.size(), 15000u);
    EXPECT_EQ(rows[0], 3.0f);
    EXPECT_EQ(rows[14997], 0.0f);
  });
}

// PyTorch: "Output size is too small" (pooling), "Kernel size can't be greater than actual input
// size" (conv). The output size formula rounds a negative span towards zero, which gave one
// output instead of an error.
TEST(OpEdgeCases, WindowsLargerThanThePaddedInputAreErrors) {
  for_each_device("max_pool2d", {DType::kF32}, [&](Device* d) {
    Tensor x = floats(d, iota(4), {1, 1, 2, 2});
    expect_error(max_pool2d(x, {3, 3}), Code::kInvalidArgument, {"max_pool2d", "does not fit"});
    expect_error(avg_pool2d(x, {3, 3}), Code::kInvalidArgument, {"avg_pool2d", "does not fit"});
    Tensor w = floats(d, iota(9), {1, 1, 3, 3});
    Tensor b = floats(d, {0.5f}, {1});
    expect_error(conv2d(x, w, b), Code::kInvalidArgument, {"conv2d", "does not fit"});
    // Dilation 3 spreads a 2x2 window over 4x4: larger than 3x3.
    Tensor x3 = floats(d, iota(9), {1, 1, 3, 3});
    Tensor w2 = floats(d, iota(4), {1, 1, 2, 2});
    expect_error(conv2d(x3, w2, b, {1, 1}, {0, 0}, {3, 3}), Code::kInvalidArgument,
                 {"does not fit"});
    // Padding makes room: a 3x3 window with padding 1 over a 1x1 input is that input (PyTorch:
    // max_pool2d gives x; avg_pool2d counts the padding, x / 9; conv2d the centre tap).
    Tensor one = floats(d, {2.0f}, {1, 1, 1, 1});
    EXPECT_EQ(host(max_pool2d(one, {3, 3}, {1, 1}, {1, 1})), std::vector<float>{2.0f});
    EXPECT_NEAR(host(avg_pool2d(one, {3, 3}, {1, 1}, {1, 1}))[0], 2.0 / 9, 1e-6);
    EXPECT_EQ(host(conv2d(one, w, b, {1, 1}, {1, 1})), std::vector<float>{2.0f * 4 + 0.5f});
  });
}

// PyTorch accepts eps < 0 and returns NaN rows where var + eps < 0; ONNX does not say. An
// error says why instead.
TEST(OpEdgeCases, LayerNormRejectsANegativeEps) {
  for_each_device("layer_norm", {DType::kF32}, [&](Device* d) {
    Tensor x = floats(d, iota(6), {2, 3});
    Tensor ones = floats(d, {1, 1, 1}, {3}), zeros = floats(d, {0, 0, 0}, {3});
    expect_error(layer_norm(x, ones, zeros, -1.0), Code::kInvalidArgument,
                 {"layer_norm: eps must be >= 0, got -1"});
    EXPECT_TRUE(layer_norm(x, ones, zeros, 0.0).ok());
  });
}

// Integer matmul is not supported (PyTorch has it): the error says which dtypes are.
TEST(OpEdgeCases, IntegerMatmulSaysWhichDtypesItTakes) {
  for_each_device("matmul", {DType::kF32}, [&](Device* d) {
    Tensor a = longs(d, {1, 2, 3, 4, 5, 6}, {2, 3});
    expect_error(matmul(a, a.transpose(0, 1).value()), Code::kInvalidArgument,
                 {"matmul: operands are f32, f16 or bf16", "[2, 3] i64"});
  });
}

// PyTorch's rules for tensors with a 0-sized dimension: empty results where the output has no
// elements, a sum over nothing is 0 and a mean NaN, the maximum over nothing an error, a product
// with K = 0 zeros (plus the bias in linear), a cross-entropy over no targets NaN (mean) or 0
// (sum).
TEST(OpEdgeCases, ZeroSizedDimensionsFollowPyTorch) {
  for_each_device("add", {DType::kF32}, [&](Device* d) {
    Tensor e = Tensor::empty({0, 3}, DType::kF32, d).value();
    Tensor row = floats(d, {1, 2, 3}, {3});
    Expected<Tensor> s = add(e, row);
    ASSERT_TRUE(s.ok()) << s.status().to_string();
    EXPECT_EQ(s->shape(), (Shape{0, 3}));
    EXPECT_EQ(relu(e).value().shape(), (Shape{0, 3}));
    EXPECT_EQ(softmax(e).value().shape(), (Shape{0, 3}));
    EXPECT_EQ(host(sum(e, {0})), std::vector<float>(3, 0.0f));
    EXPECT_EQ(host(sum(e)), std::vector<float>{0.0f});
    for (float v : host(mean(e, {0})))
      EXPECT_TRUE(std::isnan(v));
    EXPECT_TRUE(std::isnan(host(mean(e))[0]));
    expect_error(max(e, {0}), Code::kInvalidArgument, {"max: axis 0 of [0, 3] has size 0"});
    expect_error(max(e), Code::kInvalidArgument, {"has size 0"});
    EXPECT_EQ(max(e, {1}).value().shape(), (Shape{0}));

    Tensor a = Tensor::empty({2, 0}, DType::kF32, d).value();
    Tensor b = Tensor::empty({0, 3}, DType::kF32, d).value();
    EXPECT_EQ(host(matmul(a, b)), std::vector<float>(6, 0.0f));
    Tensor w = Tensor::empty({3, 0}, DType::kF32, d).value();
    EXPECT_EQ(host(linear(a, w, row)), (std::vector<float>{1, 2, 3, 1, 2, 3}));
    EXPECT_EQ(matmul(b, floats(d, iota(6), {3, 2})).value().shape(), (Shape{0, 2}));

    Tensor images = Tensor::empty({0, 1, 4, 4}, DType::kF32, d).value();
    Tensor k = floats(d, iota(18), {2, 1, 3, 3});
    EXPECT_EQ(conv2d(images, k, floats(d, {0, 0}, {2})).value().shape(), (Shape{0, 2, 2, 2}));
    EXPECT_EQ(max_pool2d(images, {2, 2}).value().shape(), (Shape{0, 1, 2, 2}));

    Tensor full = floats(d, iota(6), {2, 3});
    EXPECT_EQ(host(concat(a, full, 1)), iota(6));
    EXPECT_EQ(host(concat(full, a, -1)), iota(6));
    EXPECT_EQ(concat(b, b, 0).value().shape(), (Shape{0, 3}));

    Tensor no_logits = Tensor::empty({0, 5}, DType::kF32, d).value();
    Tensor no_targets = Tensor::empty({0}, DType::kI64, d).value();
    EXPECT_TRUE(std::isnan(host(cross_entropy(no_logits, no_targets))[0]));
    EXPECT_EQ(host(cross_entropy(no_logits, no_targets, -100, 0.0, 1)), std::vector<float>{0});
    EXPECT_EQ(embedding(full, no_targets).value().shape(), (Shape{0, 3}));
  });
}

// Backward through empty tensors: an empty input gets an empty gradient, and an input that met
// only an empty output gets zeros (PyTorch: b.grad of (empty [0, 3] + b [3]).sum() is [0, 0, 0]).
TEST(OpEdgeCases, GradientsThroughZeroSizedTensors) {
  for_each_device("add", {DType::kF32}, [&](Device* d) {
    Tensor e = Tensor::empty({0, 3}, DType::kF32, d).value();
    Tensor row = floats(d, {1, 2, 3}, {3});
    std::vector<Tensor> g =
        backward_of("add", {e, row}, Tensor::empty({0, 3}, DType::kF32, d).value());
    EXPECT_EQ(g[0].shape(), (Shape{0, 3}));
    EXPECT_EQ(host(g[1]), std::vector<float>(3, 0.0f));
    // sum over the empty axis: the input's gradient is empty.
    g = backward_of("sum", {e}, floats(d, {1, 1, 1}, {3}), Attrs().set("axes", {0}));
    EXPECT_EQ(g[0].shape(), (Shape{0, 3}));
    // linear with K = 0: x and weight have empty gradients, the bias the column sums.
    Tensor a = Tensor::empty({2, 0}, DType::kF32, d).value();
    Tensor w = Tensor::empty({3, 0}, DType::kF32, d).value();
    g = backward_of("linear", {a, w, row}, floats(d, iota(6), {2, 3}));
    EXPECT_EQ(g[0].shape(), (Shape{2, 0}));
    EXPECT_EQ(g[1].shape(), (Shape{3, 0}));
    EXPECT_EQ(host(g[2]), (std::vector<float>{3, 5, 7}));
    // cross_entropy over no targets.
    g = backward_of(
        "cross_entropy",
        {Tensor::empty({0, 5}, DType::kF32, d).value(), Tensor::empty({0}, DType::kI64, d).value()},
        floats(d, {1}, {}));
    EXPECT_EQ(g[0].shape(), (Shape{0, 5}));
  });
}

// Views that keep 5 dimensions after merging (PyTorch copies any rank): an expanded 5-d view,
// a permuted one, and an element-wise op over them (which copies such inputs first).
TEST(OpEdgeCases, ViewsOfMoreThanFourDimensionsCopy) {
  for_each_device("contiguous", {DType::kF32}, [&](Device* d) {
    Tensor x = floats(d, iota(24), {2, 1, 3, 1, 4});
    Tensor big = x.expand({2, 5, 3, 6, 4}).value();
    std::vector<float> got = host(contiguous(big));
    ASSERT_EQ(got.size(), 720u);
    for (int64_t i = 0; i < 720; ++i) {  // [n, a, c, b, w] reads x[n, 0, c, 0, w]
      const int64_t w = i % 4, c = i / 24 % 3, n = i / 360;
      ASSERT_EQ(got[i], static_cast<float>((n * 3 + c) * 4 + w)) << "element " << i;
    }
    Tensor y = floats(d, iota(2 * 3 * 4 * 5 * 6), {2, 3, 4, 5, 6});
    Tensor p = y.permute({4, 2, 0, 3, 1}).value();  // [6, 4, 2, 5, 3]
    got = host(contiguous(p));
    ASSERT_EQ(got.size(), 720u);
    for (int64_t i = 0; i < 720; ++i) {
      const int64_t i1 = i % 3, i3 = i / 3 % 5, i0 = i / 15 % 2, i2 = i / 30 % 4, i4 = i / 120;
      ASSERT_EQ(got[i], static_cast<float>((((i0 * 3 + i1) * 4 + i2) * 5 + i3) * 6 + i4))
          << "element " << i;
    }
    // p [d0, d1, d2, d3, d4] = y[d2, d4, d1, d3, d0]; q = big viewed as [6, 4, 2, 5, 3] reads
    // x[d2, 0, d4, 0, d1].
    Tensor q = big.permute({3, 4, 0, 1, 2}).value();
    got = host(add(p, q));
    ASSERT_EQ(got.size(), 720u);
    for (int64_t i = 0; i < 720; ++i) {
      const int64_t d4 = i % 3, d3 = i / 3 % 5, d2 = i / 15 % 2, d1 = i / 30 % 4, d0 = i / 120;
      const int64_t want = ((((d2 * 3 + d4) * 4 + d1) * 5 + d3) * 6 + d0) + (d2 * 3 + d4) * 4 + d1;
      ASSERT_EQ(got[i], static_cast<float>(want)) << "element " << i;
    }
  });
}

// ONNX ReduceSum/ReduceMean/ReduceMax with noop_with_empty_axes = 1 and no axes: the input
// itself; with axes, the usual reduction.
TEST(OpEdgeCases, NoopWithEmptyAxes) {
  for_each_device("sum", {DType::kF32}, [&](Device* d) {
    Tensor x = floats(d, iota(6, -2), {2, 3});
    for (const char* op : {"sum", "mean", "max"}) {
      EXPECT_EQ(host(run(op, {x}, Attrs().set("noop_with_empty_axes", 1))), iota(6, -2)) << op;
      EXPECT_EQ(
          run(op, {x}, Attrs().set("noop_with_empty_axes", 1).set("axes", {1})).value().shape(),
          (Shape{2}))
          << op;
    }
    EXPECT_EQ(host(run("sum", {x}, Attrs().set("noop_with_empty_axes", 0))),
              std::vector<float>{3.0f});
  });
}

}  // namespace
}  // namespace tessel::ops
