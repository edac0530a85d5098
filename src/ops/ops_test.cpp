// Every op on every device present (ops/testing/every_device.h: an op a device does not support
// is skipped on that device alone, with the reason logged), in the manner of ggml's
// test-backend-ops: forward against the op's plain-C++ reference in double, and backward
// against central finite differences of that reference (in double, step 1e-4), for
// L = sum(w * op(x)) with random w. Shapes include 1, primes and sizes past the kernels' tiles.
//
// Tolerances (|got - want| <= abs + rel * |want|): forward 2e-5 + 2e-5 (f32 kernels, sums over a
// few hundred terms); gradients 2e-4 + 2e-3 (f32 backward kernels, several f32 steps deep,
// against finite differences that are exact to ~1e-8).
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <random>
#include <set>

#include "ops/kernel_cache.h"
#include "ops/op.h"
#include "ops/ops.h"
#include "ops/testing/every_device.h"
#include "support/log.h"

namespace tessel::ops {
namespace {

// How a test input is made.
struct Input {
  enum Kind { kReal, kPositive, kIds, kBool } kind = kReal;
  Shape shape;
  int64_t classes = 0;         // kIds: values in [0, classes)
  int64_t ignore = INT64_MIN;  // kIds: this value appears too, at every third position
  bool transposed = false;     // passed as a transposed view of a contiguous tensor
  DType dtype = DType::kF32;   // kReal, kPositive: f32, f16 or bf16 (values rounded to it)
  int64_t low = 0;             // kIds: values in [low, classes)
};
Input real(Shape s) {
  return {Input::kReal, std::move(s)};
}
Input positive(Shape s) {
  return {Input::kPositive, std::move(s)};
}
Input ids(Shape s, int64_t classes, int64_t ignore = INT64_MIN) {
  return {Input::kIds, std::move(s), classes, ignore};
}
Input ints(Shape s, int64_t low, int64_t high) {  // i64 values in [low, high)
  Input i{Input::kIds, std::move(s), high};
  i.low = low;
  return i;
}
Input flags(Shape s) {  // bool, about half true
  return {Input::kBool, std::move(s)};
}
Input transposed(Shape s) {
  Input i = real(std::move(s));
  i.transposed = true;
  return i;
}

struct Case {
  std::string op;
  std::vector<Input> inputs;
  Attrs attrs;
  // Tolerances are multiplied by this (16-bit outputs are rounded to 8 or 11 significant bits).
  double tolerance_scale = 1;
  // The reference is piecewise constant (rounding), so the gradient is checked against the
  // straight-through one, w itself, instead of finite differences.
  bool straight_through = false;
};

std::vector<Case> all_cases() {
  std::vector<Case> c;
  for (const char* op : {"add", "sub", "mul", "div"}) {
    auto second = [&](Shape s) {
      return std::string(op) == "div" ? positive(std::move(s)) : real(std::move(s));
    };
    c.push_back({op, {real({3, 5}), second({5})}, {}});
    c.push_back({op, {real({1, 7}), second({4, 1})}, {}});
    c.push_back({op, {real({1}), second({1})}, {}});
    c.push_back(
        {op, {real({2, 3, 4, 5}), second({1, 3, 1, 5})}, {}});  // keeps 4 dims: copied first
    c.push_back({op, {transposed({3, 17}), second({3, 17})}, {}});
  }
  c.push_back({"rsqrt", {positive({3, 5})}, {}});
  c.push_back({"rsqrt", {positive({1})}, {}});
  for (const char* op : {"relu", "gelu", "tanh", "sigmoid", "silu", "gelu_erf"}) {
    c.push_back({op, {real({1})}, {}});
    c.push_back({op, {real({3, 5})}, {}});
    c.push_back({op, {real({2, 3, 263})}, {}});
    c.push_back({op, {transposed({5, 3})}, {}});
  }
  c.push_back({"scale", {real({4, 3})}, Attrs().set("factor", -0.75)});
  // 16-bit floats: casts, and element-wise ops computing in f32 and rounding their results
  // (bf16 keeps 8 significant bits: relative error 2^-9, so tolerances x 200; f16: x 30).
  auto half = [](Input in, DType t) {
    in.dtype = t;
    return in;
  };
  c.push_back({"cast", {real({3, 5})}, Attrs().set("dtype", int64_t(DType::kBF16)), 1, true});
  c.push_back({"cast", {real({2, 257})}, Attrs().set("dtype", int64_t(DType::kF16)), 1, true});
  c.push_back({"cast",
               {half(real({4, 3}), DType::kBF16)},
               Attrs().set("dtype", int64_t(DType::kF32)),
               1,
               true});
  c.push_back({"add", {half(real({3, 5}), DType::kBF16), half(real({5}), DType::kBF16)}, {}, 200});
  c.push_back({"mul", {half(real({3, 5}), DType::kF16), half(real({3, 1}), DType::kF16)}, {}, 30});
  c.push_back({"gelu", {half(real({2, 9}), DType::kBF16)}, {}, 200});
  c.push_back({"matmul", {real({1, 1}), real({1, 1})}, {}});
  c.push_back({"matmul", {real({3, 5}), real({5, 7})}, {}});
  c.push_back({"matmul", {real({2, 3, 4}), real({4, 5})}, {}});
  // A 2-d right operand shared by a batch: one product over the merged rows (3 x 5 = 15 rows,
  // past a 72-row CPU block), also with a transposed weight as the tied GPT head has.
  c.push_back({"matmul", {real({3, 25, 6}), transposed({6, 70})}, {}});
  // Batched products of small matrices (attention) and of larger ones: both CPU block shapes.
  c.push_back({"matmul", {real({2, 80, 9}), real({2, 9, 70})}, {}});
  c.push_back({"matmul", {real({2, 100, 3}), real({2, 3, 130})}, {}});
  c.push_back({"matmul", {real({1, 3, 4}), real({2, 4, 2})}, {}});
  c.push_back({"matmul", {transposed({3, 7}), transposed({7, 2})}, {}});
  c.push_back({"linear", {real({1, 1}), real({1, 1}), real({1})}, {}});
  c.push_back({"linear", {real({3, 5}), real({7, 5}), real({7})}, {}});
  c.push_back({"linear", {real({2, 3, 9}), real({4, 9}), real({4})}, {}});
  c.push_back({"linear", {transposed({3, 5}), real({2, 5}), real({2})}, {}});
  // The gemm ops in 16 bits (ops/gemm_precision.h): 16-bit operands, or f32 operands with a
  // "compute" dtype they are rounded to (the reference rounds them too; the gradient is checked
  // against the unrounded product). Results accumulate in f32; the backward gemms round the f32
  // output gradient to the compute dtype, hence the 16-bit tolerances.
  auto computing = [](DType t) { return Attrs().set("compute", static_cast<int64_t>(t)); };
  const DType bf16 = DType::kBF16, f16 = DType::kF16;
  c.push_back({"matmul", {half(real({3, 5}), bf16), half(real({5, 7}), bf16)}, {}, 200});
  c.push_back({"matmul", {half(real({2, 3, 4}), f16), half(real({4, 5}), f16)}, {}, 30});
  c.push_back({"matmul", {real({3, 5}), real({5, 7})}, computing(bf16), 200});
  c.push_back({"matmul", {transposed({3, 7}), transposed({7, 2})}, computing(bf16), 200});
  c.push_back({"matmul", {real({1, 3, 4}), real({2, 4, 2})}, computing(f16), 30});
  c.push_back({"matmul", {real({5, 520}), transposed({520, 3})}, computing(bf16), 200});
  c.push_back({"matmul", {half(real({2, 4}), bf16), real({4, 3})}, computing(bf16), 200});
  c.push_back({"linear", {real({2, 3, 9}), real({4, 9}), real({4})}, computing(bf16), 200});
  c.push_back({"linear", {transposed({3, 5}), real({2, 5}), real({2})}, computing(f16), 30});
  c.push_back({"linear", {half(real({3, 5}), bf16), half(real({7, 5}), bf16), real({7})}, {}, 200});
  c.push_back({"conv2d",
               {real({2, 3, 5, 6}), real({4, 3, 3, 3}), real({4})},
               Attrs().set("padding", {1, 1}).set("compute", static_cast<int64_t>(bf16)),
               200});
  c.push_back({"conv2d",  // a 1x1's folded operands (conv_fold) in bf16
               {real({3, 17, 5, 3}), real({16, 17, 1, 1}), real({16})},
               Attrs().set("stride", {2, 1}).set("compute", static_cast<int64_t>(bf16)),
               200});
  c.push_back({"conv2d",
               {half(real({1, 2, 7, 5}), bf16), half(real({3, 2, 3, 2}), bf16), real({3})},
               Attrs().set("stride", {2, 1}).set("padding", {1, 0}),
               200});
  c.push_back({"sum", {real({3, 5})}, {}});
  c.push_back({"sum", {real({3, 5})}, Attrs().set("axes", {0})});
  c.push_back({"sum", {real({3, 5})}, Attrs().set("axes", {1}).set("keepdim", 1)});
  c.push_back({"sum", {real({2, 3, 4})}, Attrs().set("axes", {0, 2})});
  c.push_back({"sum", {real({1, 300})}, Attrs().set("axes", {-1})});
  // Outer axes reduced, kept ones contiguous (reduce_cols): more rows than a block, more
  // columns than a block, two merged leading axes, max.
  c.push_back({"sum", {real({37, 6})}, Attrs().set("axes", {0})});
  c.push_back({"sum", {real({3, 300})}, Attrs().set("axes", {0}).set("keepdim", 1)});
  c.push_back({"sum", {real({3, 4, 5})}, Attrs().set("axes", {0, 1})});
  c.push_back({"max", {real({6, 5})}, Attrs().set("axes", {0})});
  c.push_back({"mean", {real({2, 3, 4})}, Attrs().set("axes", {-1})});
  c.push_back({"mean", {real({5})}, {}});
  c.push_back({"max", {real({3, 5})}, Attrs().set("axes", {1})});
  c.push_back({"max", {real({2, 3, 4})}, Attrs().set("axes", {0, 2}).set("keepdim", 1)});
  c.push_back({"max", {transposed({1, 7})}, {}});
  c.push_back({"concat", {real({2, 3}), real({2, 4})}, Attrs().set("dim", 1)});
  c.push_back({"concat", {real({1, 3, 2}), transposed({2, 3, 2})}, Attrs().set("dim", 0)});
  c.push_back({"concat", {real({2, 1, 3}), real({2, 2, 3})}, Attrs().set("dim", -2)});
  c.push_back({"mean", {transposed({4, 3})}, Attrs().set("axes", {1}).set("keepdim", 1)});
  for (const char* op : {"softmax", "log_softmax"}) {
    c.push_back({op, {real({1, 1})}, {}});
    c.push_back({op, {real({3, 5})}, {}});
    c.push_back({op, {real({2, 2, 300})}, {}});
    c.push_back({op, {transposed({5, 3})}, {}});
    // Rows that fill the CPU's 64- and 128-column tiles exactly, and one just past 64.
    c.push_back({op, {real({3, 64})}, {}});
    c.push_back({op, {real({2, 65})}, {}});
    c.push_back({op, {real({2, 128})}, {}});
  }
  c.push_back({"cross_entropy", {real({4, 5}), ids({4}, 5)}, {}});
  c.push_back({"cross_entropy", {real({6, 7}), ids({6}, 7, -100)}, {}});
  c.push_back({"cross_entropy",
               {real({6, 7}), ids({6}, 7, 3)},
               Attrs().set("ignore_index", 3).set("label_smoothing", 0.1)});
  c.push_back({"cross_entropy", {real({2, 3, 11}), ids({2, 3}, 11)}, Attrs().set("reduction", 1)});
  c.push_back({"cross_entropy", {real({1, 1}), ids({1}, 1)}, Attrs().set("label_smoothing", 0.2)});
  c.push_back({"cross_entropy", {real({3, 300}), ids({3}, 300)}, {}});
  c.push_back({"layer_norm", {real({1, 7}), real({7}), real({7})}, {}});
  c.push_back({"layer_norm", {real({3, 5}), real({5}), real({5})}, Attrs().set("eps", 1e-3)});
  c.push_back({"layer_norm", {real({2, 2, 300}), real({300}), real({300})}, {}});
  c.push_back({"layer_norm", {real({5, 128}), real({128}), real({128})}, {}});  // one full CPU tile
  // Past one group of the gradient's column sums (32 rows on a CPU): 70 rows (a partial third
  // group) and 33 (one row in the second).
  c.push_back({"layer_norm", {real({2, 35, 130}), real({130}), real({130})}, {}});
  c.push_back({"layer_norm", {real({33, 128}), real({128}), real({128})}, {}});
  c.push_back({"embedding", {real({7, 5}), ids({4}, 7)}, {}});
  c.push_back({"embedding", {real({5, 3}), ids({2, 3}, 5)}, {}});
  c.push_back({"embedding", {real({1, 3}), ids({2}, 1)}, {}});
  c.push_back({"reshape", {real({3, 4})}, Attrs().set("shape", {2, -1})});
  c.push_back({"reshape", {transposed({3, 4})}, Attrs().set("shape", {12})});
  c.push_back({"permute", {real({2, 3, 4})}, Attrs().set("order", {2, 0, 1})});
  c.push_back({"slice",
               {real({5, 6})},
               Attrs().set("dim", 1).set("start", 1).set("end", 6).set("step", 2)});
  c.push_back({"slice", {real({7, 3})}, Attrs().set("dim", 0).set("start", -3)});
  c.push_back({"slice",
               {transposed({3, 300})},
               Attrs().set("dim", 1).set("start", 2).set("end", 290)});  // last axis, step 1
  c.push_back({"slice", {real({2, 5, 3})}, Attrs().set("dim", 1).set("start", 1).set("end", 2)});
  // Trailing axes of size 1 (SyncBatchNorm's [1, C + 1, 1, 1] statistics): not the last axis.
  c.push_back({"slice", {real({1, 6, 1, 1})}, Attrs().set("dim", 1).set("start", 0).set("end", 5)});
  c.push_back({"slice",
               {real({2, 7, 1})},
               Attrs().set("dim", 1).set("start", 1).set("end", 7).set("step", 3)});
  c.push_back({"contiguous", {transposed({3, 5})}, {}});
  c.push_back({"causal_mask", {real({3, 3})}, Attrs().set("value", -5.0)});
  c.push_back(
      {"causal_mask", {real({2, 3, 5})}, Attrs().set("value", -5.0)});  // 3 queries over 5 keys
  c.push_back({"dropout", {real({3, 7})}, Attrs().set("p", 0.3).set("seed", 7)});
  c.push_back({"dropout", {transposed({2, 3, 5})}, Attrs().set("p", 0.5).set("seed", 123456789)});
  c.push_back({"conv2d", {real({1, 1, 1, 1}), real({1, 1, 1, 1}), real({1})}, {}});
  c.push_back({"conv2d",
               {real({2, 3, 5, 6}), real({4, 3, 3, 3}), real({4})},
               Attrs().set("padding", {1, 1})});
  c.push_back({"conv2d",
               {real({1, 2, 7, 5}), real({3, 2, 3, 2}), real({3})},
               Attrs().set("stride", {2, 1}).set("padding", {1, 0}).set("dilation", {1, 2})});
  c.push_back({"conv2d",  // groups, padding past the window's reach, a ragged 8 x 32 tile
               {real({2, 4, 9, 33}), real({6, 2, 3, 3}), real({6})},
               Attrs().set("padding", {2, 1}).set("groups", 2)});
  c.push_back({"conv2d",  // depthwise, strided and dilated
               {real({1, 3, 6, 7}), real({3, 1, 2, 3}), real({3})},
               Attrs().set("stride", {2, 2}).set("dilation", {2, 1}).set("groups", 3)});
  c.push_back({"conv2d",  // fewer column rows (4) than output channels (8): dW^T is computed
               {real({3, 1, 6, 5}), real({8, 1, 2, 2}), real({8})},
               Attrs().set("padding", {1, 0})});
  // The CPU's implicit gemm (ops/conv_ops.cpp; 16 channels or more per group, else im2col as
  // above): a 1x1 read in place over more positions than a tile; a 1x1 / stride 2 downsample; a
  // 3x3 / stride 2 layer (two stride phases; taps that skip output phases in the input
  // gradient); a 1x3 whose position grid spans tiles and images; a dilated window; two groups
  // (16 output channels per group: small images stay on the implicit grid, see below). And an
  // RGB-like 7x7 / stride 2 stem, which stays on im2col.
  c.push_back({"conv2d", {real({1, 16, 16, 17}), real({16, 16, 1, 1}), real({16})}, {}});
  c.push_back({"conv2d",
               {real({2, 16, 7, 6}), real({16, 16, 1, 1}), real({16})},
               Attrs().set("stride", {2, 2})});
  c.push_back({"conv2d",  // 1x1 / stride 2 over 3 x 4 outputs: every pass folded (conv_fold)
               {real({2, 18, 5, 7}), real({17, 18, 1, 1}), real({17})},
               Attrs().set("stride", {2, 2})});
  c.push_back({"conv2d",
               {real({2, 16, 9, 8}), real({16, 16, 3, 3}), real({16})},
               Attrs().set("stride", {2, 2}).set("padding", {1, 1})});
  c.push_back({"conv2d",
               {real({2, 16, 10, 12}), real({16, 16, 1, 3}), real({16})},
               Attrs().set("padding", {0, 1})});
  c.push_back({"conv2d",
               {real({2, 16, 7, 6}), real({16, 16, 2, 2}), real({16})},
               Attrs().set("padding", {1, 1}).set("dilation", {2, 2})});
  c.push_back({"conv2d",
               {real({1, 32, 5, 6}), real({32, 16, 3, 3}), real({32})},
               Attrs().set("padding", {1, 1}).set("groups", 2)});
  c.push_back({"conv2d",
               {real({1, 2, 11, 10}), real({3, 2, 7, 7}), real({3})},
               Attrs().set("stride", {2, 2}).set("padding", {3, 3})});
  // Small images under 32 or more output channels: columns over every image's positions and a
  // 1x1 conv_implicit over them (forward, input gradient and weight gradient; a strided layer's
  // input gradient stays on the implicit grid's phases); two groups of 32; in bf16.
  c.push_back({"conv2d",
               {real({2, 16, 4, 5}), real({32, 16, 3, 3}), real({32})},
               Attrs().set("padding", {1, 1})});
  c.push_back({"conv2d",
               {real({1, 16, 5, 6}), real({32, 16, 3, 3}), real({32})},
               Attrs().set("stride", {2, 2}).set("padding", {1, 1})});
  c.push_back({"conv2d",
               {real({1, 32, 3, 3}), real({64, 16, 3, 3}), real({64})},
               Attrs().set("padding", {1, 1}).set("groups", 2)});
  c.push_back({"conv2d",
               {real({2, 16, 4, 4}), real({32, 16, 3, 3}), real({32})},
               Attrs().set("padding", {1, 1}).set("compute", static_cast<int64_t>(bf16)),
               200});
  c.push_back({"conv2d",  // more images than im2col_rows / col2im_rows take per block (8), and a
                          // dilated window with unequal paddings, over the columns
               {real({9, 16, 5, 4}), real({32, 16, 3, 3}), real({32})},
               Attrs().set("padding", {2, 1}).set("dilation", {2, 1})});
  c.push_back({"conv2d",  // two groups of 16 at stride 2: the input gradient's transposed
                          // weight copy (conv_weight_transpose) with groups, odd sizes
               {real({2, 32, 7, 6}), real({32, 16, 3, 3}), real({32})},
               Attrs().set("stride", {2, 2}).set("padding", {1, 1}).set("groups", 2)});
  c.push_back({"conv2d",  // a dilated strided stem's input gradient (col2im_strided_rows)
               {real({1, 3, 9, 11}), real({16, 3, 3, 3}), real({16})},
               Attrs().set("stride", {2, 2}).set("padding", {2, 2}).set("dilation", {2, 2})});
  // An RGB 7x7 / stride 2 stem with C kw >= 16: unfolded into a 7x1 convolution over 21
  // channels (forward and weight gradient; the input gradient stays on im2col).
  c.push_back({"conv2d",
               {real({2, 3, 11, 10}), real({4, 3, 7, 7}), real({4})},
               Attrs().set("stride", {2, 2}).set("padding", {3, 3})});
  c.push_back({"conv2d",  // the implicit gemm computing in bf16, and on bf16 operands
               {real({1, 16, 5, 6}), real({16, 16, 3, 3}), real({16})},
               Attrs().set("padding", {1, 1}).set("compute", static_cast<int64_t>(bf16)),
               200});
  c.push_back({"conv2d",
               {half(real({1, 16, 7, 5}), bf16), half(real({16, 16, 3, 2}), bf16), real({16})},
               Attrs().set("stride", {2, 1}).set("padding", {1, 0}),
               200});
  c.push_back({"max_pool2d", {real({2, 3, 4, 6})}, Attrs().set("window", {2, 2})});
  c.push_back({"max_pool2d",  // windows that tile it, with a row and column left over
               {real({1, 2, 7, 35})},
               Attrs().set("window", {2, 2})});
  c.push_back({"max_pool2d",  // overlapping, no padding
               {real({2, 1, 6, 5})},
               Attrs().set("window", {3, 2}).set("stride", {1, 1})});
  c.push_back({"avg_pool2d", {real({1, 2, 9, 7})}, Attrs().set("window", {3, 3})});
  c.push_back({"max_pool2d",
               {real({1, 2, 5, 5})},
               Attrs().set("window", {3, 3}).set("stride", {2, 2}).set("padding", {1, 1})});
  c.push_back({"avg_pool2d", {real({2, 3, 4, 6})}, Attrs().set("window", {2, 2})});
  c.push_back({"avg_pool2d",
               {real({1, 1, 5, 7})},
               Attrs().set("window", {3, 2}).set("stride", {1, 2}).set("padding", {1, 1})});
  c.push_back({"avg_pool2d", {real({2, 3, 1, 1})}, Attrs().set("window", {1})});
  // Pooling's options (ops/pool_ops.cpp; PyTorch's values in coverage_pool_test.cpp).
  c.push_back({"max_pool2d",
               {real({1, 2, 5, 7})},
               Attrs().set("window", {3, 3}).set("stride", {2, 2}).set("ceil_mode", 1)});
  c.push_back({"max_pool2d",
               {transposed({2, 1, 6, 7})},
               Attrs()
                   .set("window", {3, 2})
                   .set("stride", {1, 2})
                   .set("padding", {1, 1})
                   .set("dilation", {2, 3})});
  c.push_back({"max_pool2d",
               {real({1, 2, 5, 6})},
               Attrs().set("window", {2, 3}).set("stride", {2, 1}).set("pads", {1, 0, 0, 2})});
  c.push_back({"avg_pool2d",
               {real({1, 2, 6, 5})},
               Attrs()
                   .set("window", {3, 3})
                   .set("stride", {2, 2})
                   .set("padding", {1, 1})
                   .set("ceil_mode", 1)
                   .set("count_include_pad", 0)});
  c.push_back({"avg_pool2d",
               {real({2, 1, 5, 6})},
               Attrs().set("window", {2, 3}).set("pads", {2, 0, 1, 3}).set("divisor_override", 4)});
  c.push_back({"avg_pool2d",
               {real({1, 1, 5, 5})},
               Attrs().set("window", {2, 2}).set("ceil_mode", 1).set("count_include_pad", 0)});
  c.push_back({"max_pool1d",
               {real({2, 3, 9})},
               Attrs()
                   .set("window", {3})
                   .set("stride", {2})
                   .set("padding", {1})
                   .set("dilation", {2})
                   .set("ceil_mode", 1)});
  c.push_back({"avg_pool1d",
               {real({2, 3, 40})},
               Attrs()
                   .set("window", {3})
                   .set("stride", {2})
                   .set("padding", {1})
                   .set("count_include_pad", 0)});
  c.push_back(
      {"max_pool3d",
       {real({1, 2, 4, 5, 6})},
       Attrs().set("window", {2, 3, 2}).set("stride", {2, 2, 1}).set("padding", {1, 1, 0})});
  c.push_back({"avg_pool3d",
               {real({1, 2, 5, 4, 5})},
               Attrs()
                   .set("window", {3, 2, 2})
                   .set("stride", {2, 2, 2})
                   .set("padding", {1, 1, 0})
                   .set("ceil_mode", 1)
                   .set("count_include_pad", 0)});
  c.push_back({"max_pool1d_indices",
               {real({2, 3, 9})},
               Attrs().set("window", {3}).set("stride", {2}).set("ceil_mode", 1)});
  c.push_back({"max_pool2d_indices",
               {real({1, 2, 5, 6})},
               Attrs().set("window", {2, 3}).set("stride", {2, 1}).set("pads", {1, 0, 0, 2})});
  c.push_back({"max_pool3d_indices",
               {real({1, 2, 4, 5, 6})},
               Attrs().set("window", {2, 3, 2}).set("dilation", {1, 2, 1})});
  // conv_transpose2d and the 1-d convolutions (ops/conv_transpose_ops.cpp; PyTorch's values in
  // coverage_conv_test.cpp).
  c.push_back({"conv_transpose2d",
               {real({2, 3, 4, 5}), real({3, 2, 3, 3}), real({2})},
               Attrs().set("stride", {2, 2}).set("padding", {1, 1}).set("output_padding", {1, 0})});
  c.push_back({"conv_transpose2d",
               {real({1, 4, 3, 3}), real({4, 3, 2, 3}), real({6})},
               Attrs()
                   .set("stride", {1, 2})
                   .set("dilation", {2, 1})
                   .set("groups", 2)
                   .set("output_padding", {1, 1})});
  c.push_back({"conv_transpose2d",
               {real({1, 16, 3, 4}), real({16, 4, 3, 3}), real({4})},
               Attrs().set("stride", {2, 2}).set("padding", {1, 0})});
  c.push_back({"conv1d",
               {real({2, 3, 11}), real({4, 3, 3}), real({4})},
               Attrs().set("stride", {2}).set("padding", {1}).set("dilation", {2})});
  c.push_back(
      {"conv_transpose1d",
       {real({2, 4, 6}), real({4, 1, 3}), real({2})},
       Attrs().set("stride", {3}).set("padding", {1}).set("output_padding", {2}).set("groups", 2)});
  // conv3d (ops/conv3d_ops.cpp; PyTorch's values in coverage_conv_test.cpp): depth padding and
  // stride, groups with dilation, one value for all three dimensions.
  c.push_back({"conv3d",
               {real({1, 2, 4, 3, 4}), real({3, 2, 2, 2, 3}), real({3})},
               Attrs().set("stride", {2, 1, 1}).set("padding", {1, 0, 1})});
  c.push_back({"conv3d",
               {real({2, 4, 3, 3, 3}), real({4, 2, 3, 1, 2}), real({4})},
               Attrs().set("groups", 2).set("dilation", {1, 1, 2}).set("padding", {1})});
  // scaled_dot_product_attention (ops/attention_ops.cpp; PyTorch's values in
  // coverage_attention_test.cpp): no mask (an unread 4th input), f32 and bool masks, causal
  // top-left and bottom-right, grouped-query heads, a scale.
  c.push_back({"scaled_dot_product_attention",
               {real({2, 3, 5, 4}), real({2, 3, 7, 4}), real({2, 3, 7, 6}), real({1})},
               Attrs().set("mask", 0)});
  c.push_back({"scaled_dot_product_attention",
               {real({2, 5, 4}), real({2, 7, 4}), real({2, 7, 3}), real({5, 7})},
               Attrs().set("mask", 2).set("scale", 0.3)});
  c.push_back({"scaled_dot_product_attention",
               {real({1, 2, 6, 4}), real({1, 2, 6, 4}), real({1, 2, 6, 4}), flags({2, 1, 6})},
               Attrs().set("mask", 1)});
  c.push_back({"scaled_dot_product_attention",
               {real({1, 2, 5, 3}), real({1, 2, 7, 3}), real({1, 2, 7, 3}), real({1})},
               Attrs().set("mask", 0).set("causal", 1)});
  c.push_back({"scaled_dot_product_attention",
               {real({1, 4, 5, 3}), real({1, 2, 7, 3}), real({1, 2, 7, 2}), real({1})},
               Attrs().set("mask", 0).set("causal", 2).set("enable_gqa", 1)});
  c.push_back({"scaled_dot_product_attention",
               {real({6, 4}), real({300, 4}), real({300, 5}), real({6, 300})},
               Attrs().set("mask", 2)});
  // Dropout (the mask reproduced by the reference) with a float mask's gradient, and GQA.
  c.push_back({"scaled_dot_product_attention",
               {real({1, 4, 5, 3}), real({1, 2, 7, 3}), real({1, 2, 7, 2}), real({4, 1, 7})},
               Attrs().set("mask", 2).set("enable_gqa", 1).set("dropout_p", 0.3).set("seed", 5)});
  // The fused kernels (ops/flash_attention.h): scaled_dot_product_attention's causal case with
  // L = S past a 64-row block, and causal_attention on a GPT's qkv [B, T, 3 C] (its second input
  // is the lse it writes): head sizes 3, 4 and 64, T = 1, a scale, a transposed qkv view.
  c.push_back({"scaled_dot_product_attention",
               {real({1, 2, 67, 4}), real({1, 2, 67, 4}), real({1, 2, 67, 4}), real({1})},
               Attrs().set("mask", 0).set("causal", 1)});
  c.push_back({"causal_attention", {real({2, 5, 18}), real({2, 2, 5})}, Attrs().set("heads", 2)});
  c.push_back({"causal_attention", {real({1, 1, 12}), real({1, 1, 1})}, Attrs().set("heads", 1)});
  c.push_back({"causal_attention",
               {real({1, 67, 24}), real({1, 2, 67})},
               Attrs().set("heads", 2).set("scale", 0.7)});
  c.push_back({"causal_attention", {real({1, 6, 192}), real({1, 1, 6})}, Attrs().set("heads", 1)});
  c.push_back(
      {"causal_attention", {transposed({2, 7, 12}), real({2, 2, 7})}, Attrs().set("heads", 2)});
  // batch_norm: x, weight, bias, running_mean, running_var (no gradients for the last two).
  c.push_back({"batch_norm",  // L = 70 spans two 64-wide lanes, N = 17 two 16-row ones
               {real({17, 3, 7, 10}), real({3}), real({3}), real({3}), positive({3})},
               Attrs().set("training", 1)});
  c.push_back({"batch_norm",
               {real({5, 4}), real({4}), real({4}), real({4}), positive({4})},
               Attrs().set("training", 1).set("eps", 1e-3)});
  c.push_back({"batch_norm",
               {real({2, 3, 4, 5}), real({3}), real({3}), real({3}), positive({3})},
               Attrs().set("training", 0)});
  c.push_back({"batch_norm",
               {transposed({2, 2, 5, 3}), real({2}), real({2}), real({2}), positive({2})},
               Attrs().set("training", 1)});
  // Element-wise math (ops/math_ops.cpp; edge cases in coverage_math_test.cpp).
  for (const char* op : {"exp", "abs", "neg", "erf"}) {
    c.push_back({op, {real({3, 5})}, {}});
    c.push_back({op, {transposed({2, 3, 7})}, {}});
  }
  for (const char* op : {"log", "sqrt"})
    c.push_back({op, {positive({4, 33})}, {}});
  c.push_back({"exp", {half(real({2, 9}), bf16)}, {}, 200});
  c.push_back({"pow", {positive({3, 5}), real({5})}, {}});
  c.push_back({"pow", {positive({2, 1, 4}), transposed({3, 4})}, {}});
  for (const char* op : {"maximum", "minimum"}) {
    c.push_back({op, {real({3, 5}), real({3, 1})}, {}});
    c.push_back({op, {real({1}), transposed({4, 3})}, {}});
  }
  c.push_back({"clamp", {real({6, 7})}, Attrs().set("min", -0.5).set("max", 1.0)});
  c.push_back({"clamp", {transposed({3, 5})}, Attrs().set("min", 0.25)});
  c.push_back({"clamp", {real({2, 3, 4})}, Attrs().set("max", -1.0)});
  c.push_back({"where", {flags({3, 5}), real({3, 5}), real({5})}, {}});
  // Integer division (ops/integer_ops.cpp), divisors without 0; the edge cases are PyTorch
  // fixtures in coverage_integer_test.cpp.
  c.push_back({"floor_divide", {ints({3, 4}, -20, 20), ints({4}, 1, 6)}, {}});
  c.push_back({"div_trunc", {ints({3, 4}, -20, 20), ints({3, 1}, -6, -1)}, {}});
  c.push_back({"remainder", {ints({3, 4}, -20, 20), ints({4}, -5, -1)}, {}});
  c.push_back({"where", {flags({4, 1}), real({1}), transposed({4, 6})}, {}});
  for (const char* op : {"eq", "ne", "lt", "le", "gt", "ge"})
    c.push_back({op, {real({3, 5}), real({5})}, {}});
  c.push_back({"eq", {real({2, 3}), real({2, 3})}, {}});
  // Indexing (ops/index_ops.cpp; edge cases in coverage_index_test.cpp): repeated ids, and -2
  // (counted from the end) at every third position.
  c.push_back({"index_select", {real({5, 4}), ids({7}, 5, -2)}, Attrs().set("dim", 0)});
  c.push_back({"index_select", {transposed({2, 6, 3}), ids({2, 2}, 6)}, Attrs().set("dim", -2)});
  c.push_back({"index_select", {real({3, 300}), ids({4}, 300, -2)}, Attrs().set("dim", 1)});
  c.push_back({"gather", {real({4, 3}), ids({6, 3}, 4, -2)}, Attrs().set("dim", 0)});
  c.push_back({"gather", {real({2, 5, 3}), ids({2, 2, 3}, 5)}, Attrs().set("dim", 1)});
  c.push_back(
      {"scatter_add", {real({4, 3}), ids({6, 3}, 4, -2), real({6, 3})}, Attrs().set("dim", 0)});
  c.push_back({"scatter_add",
               {real({2, 3, 5}), ids({2, 3, 7}, 5), real({2, 3, 7})},
               Attrs().set("dim", -1)});
  // An index smaller than x (and src) in the other dimensions.
  c.push_back({"gather", {real({4, 5}), ids({3, 2}, 4, -2)}, Attrs().set("dim", 0)});
  c.push_back({"scatter_add",
               {real({4, 5, 3}), ids({2, 3, 2}, 5, -1), real({3, 4, 2})},
               Attrs().set("dim", 1)});
  // cross_entropy's class weights, reduction "none" and probability targets (coverage_ce_test.cpp
  // has PyTorch's values).
  const std::vector<double> w7{0.5, 2.0, 1.0, 0.25, 3.0, 1.5, 0.75}, w5{1.0, 0.5, 2.0, 3.0, 0.2};
  c.push_back({"cross_entropy",
               {real({6, 7}), ids({6}, 7, -100)},
               Attrs().set_reals("weight", w7).set("label_smoothing", 0.1)});
  c.push_back({"cross_entropy",
               {real({6, 7}), ids({6}, 7)},
               Attrs().set_reals("weight", w7).set("reduction", 1)});
  c.push_back({"cross_entropy",
               {real({2, 3, 5}), ids({2, 3}, 5, 1)},
               Attrs().set("reduction", 2).set("ignore_index", 1).set_reals("weight", w5)});
  c.push_back({"cross_entropy", {real({3, 300}), ids({3}, 300)}, Attrs().set("reduction", 2)});
  c.push_back({"cross_entropy", {real({4, 5}), positive({4, 5})}, {}});
  c.push_back({"cross_entropy",
               {real({2, 3, 5}), positive({2, 3, 5})},
               Attrs().set_reals("weight", w5).set("label_smoothing", 0.2).set("reduction", 2)});
  c.push_back({"cross_entropy", {real({3, 300}), positive({3, 300})}, Attrs().set("reduction", 1)});
  // rms_norm and group_norm (ops/norm_ops.cpp; PyTorch's values in coverage_norm_test.cpp).
  c.push_back({"rms_norm", {real({3, 5}), real({5})}, {}});
  c.push_back({"rms_norm", {real({2, 2, 300}), real({300})}, Attrs().set("eps", 1e-3)});
  c.push_back({"rms_norm", {transposed({4, 7}), real({7})}, {}});
  c.push_back(
      {"group_norm", {real({2, 4, 3, 2}), real({4}), real({4})}, Attrs().set("num_groups", 2)});
  c.push_back({"group_norm",
               {real({3, 6}), real({6}), real({6})},
               Attrs().set("num_groups", 3).set("eps", 1e-3)});
  c.push_back(
      {"group_norm", {real({2, 6, 5}), real({6}), real({6})}, Attrs().set("num_groups", 1)});
  c.push_back({"global_avg_pool", {real({2, 3, 4, 5})}, {}});
  c.push_back({"global_avg_pool", {transposed({2, 3, 7})}, {}});
  c.push_back({"global_avg_pool", {real({1, 2, 2, 3, 2})}, {}});
  c.push_back({"layer_norm_stats", {real({3, 5})}, {}});
  c.push_back({"layer_norm_stats", {transposed({2, 4, 300})}, Attrs().set("eps", 1e-3)});
  c.push_back({"group_norm",
               {transposed({2, 3, 4, 5}), real({3}), real({3})},
               Attrs().set("num_groups", 3)});
  // A max over a leading axis wider than one reduce_cols block. (Cases are appended here: a case
  // inserted earlier changes the random data of every later one.)
  c.push_back({"max", {real({4, 300})}, Attrs().set("axes", {0})});
  return c;
}

std::string describe(const Case& c) {
  std::string s = c.op + "(";
  for (size_t i = 0; i < c.inputs.size(); ++i)
    s += (i ? ", " : "") + shape_string(c.inputs[i].shape) + (c.inputs[i].transposed ? "^T" : "");
  return s + ")" + (c.attrs.values().empty() ? "" : " {" + c.attrs.to_string() + "}");
}

// Test data: values exactly representable in f32, so the reference sees what the kernels see.
std::vector<RefTensor> make_inputs(const Case& c, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<RefTensor> out;
  for (const Input& in : c.inputs) {
    RefTensor t{in.shape, std::vector<double>(shape_numel(in.shape))};
    for (size_t i = 0; i < t.values.size(); ++i) {
      if (in.kind == Input::kBool) {
        t.values[i] = std::uniform_int_distribution<int>(0, 1)(rng);
      } else if (in.kind == Input::kIds) {
        t.values[i] = (in.ignore != INT64_MIN && i % 3 == 1)
                          ? in.ignore
                          : std::uniform_int_distribution<int64_t>(in.low, in.classes - 1)(rng);
      } else {
        float lo = in.kind == Input::kPositive ? 0.5f : -2.0f;
        float f = std::uniform_real_distribution<float>(lo, 2.0f)(rng);
        t.values[i] = in.dtype == DType::kBF16  ? float(BFloat16(f))
                      : in.dtype == DType::kF16 ? float(Half(f))
                                                : f;
      }
    }
    out.push_back(std::move(t));
  }
  return out;
}

// f32 values (exact in `dtype`) as a tensor of `dtype`, and back.
Expected<Tensor> from_floats(const std::vector<float>& v, const Shape& shape, DType dtype,
                             Device* device) {
  if (dtype == DType::kBF16)
    return Tensor::from_vector(std::vector<BFloat16>(v.begin(), v.end()), shape, device);
  if (dtype == DType::kF16)
    return Tensor::from_vector(std::vector<Half>(v.begin(), v.end()), shape, device);
  return Tensor::from_vector(v, shape, device);
}
Expected<std::vector<float>> to_floats(const Tensor& t) {
  if (t.dtype() == DType::kBool) {
    TESSEL_ASSIGN_OR_RETURN(std::vector<bool> v, t.to_vector<bool>());
    return std::vector<float>(v.begin(), v.end());
  }
  if (t.dtype() == DType::kI64) {  // indices (max_pool*d_indices), exact below 2^24
    TESSEL_ASSIGN_OR_RETURN(std::vector<int64_t> v, t.to_vector<int64_t>());
    return std::vector<float>(v.begin(), v.end());
  }
  if (t.dtype() == DType::kBF16) {
    TESSEL_ASSIGN_OR_RETURN(std::vector<BFloat16> v, t.to_vector<BFloat16>());
    return std::vector<float>(v.begin(), v.end());
  }
  if (t.dtype() == DType::kF16) {
    TESSEL_ASSIGN_OR_RETURN(std::vector<Half> v, t.to_vector<Half>());
    return std::vector<float>(v.begin(), v.end());
  }
  return t.to_vector<float>();
}

Expected<Tensor> to_device(const RefTensor& r, const Input& in, Device* device) {
  if (in.kind == Input::kBool) {
    std::vector<bool> v(r.values.begin(), r.values.end());
    return Tensor::from_vector(v, r.shape, device);
  }
  if (in.kind == Input::kIds) {
    std::vector<int64_t> v(r.values.begin(), r.values.end());
    return Tensor::from_vector(v, r.shape, device);
  }
  std::vector<float> v(r.values.begin(), r.values.end());
  if (in.dtype != DType::kF32) {
    TESSEL_CHECK(!in.transposed, "16-bit inputs are contiguous in these tests");
    return from_floats(v, r.shape, in.dtype, device);
  }
  if (!in.transposed) return Tensor::from_vector(v, r.shape, device);
  // Stored as the transpose of the last two dimensions, then viewed back.
  Shape stored = r.shape;
  std::swap(stored[stored.size() - 1], stored[stored.size() - 2]);
  const int64_t rows = r.shape[r.shape.size() - 2], cols = r.shape.back();
  std::vector<float> t(v.size());
  for (int64_t b = 0; b < static_cast<int64_t>(v.size()) / (rows * cols); ++b)
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j)
        t[b * rows * cols + j * rows + i] = v[b * rows * cols + i * cols + j];
  TESSEL_ASSIGN_OR_RETURN(Tensor s, Tensor::from_vector(t, stored, device));
  return s.transpose(-2, -1);
}

void expect_close(const std::vector<float>& got, const std::vector<double>& want, double abs_tol,
                  double rel_tol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int misses = 0;
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    double err = std::fabs(got[i] - want[i]);
    worst = std::max(worst, err / (abs_tol + rel_tol * std::fabs(want[i])));
    if (!(err <= abs_tol + rel_tol * std::fabs(want[i])) && ++misses <= 4)
      ADD_FAILURE() << what << ": element " << i << " is " << got[i] << ", want " << want[i];
  }
  EXPECT_EQ(misses, 0) << what << ": " << misses << " of " << got.size() << " out of tolerance";
}

using testing::op_test_devices;
using testing::should_run;

// The dtypes of a case's inputs, as the devices are asked about them.
std::vector<DType> input_dtypes(const Case& c) {
  std::vector<DType> dtypes;
  for (const Input& in : c.inputs)
    dtypes.push_back(in.kind == Input::kIds    ? DType::kI64
                     : in.kind == Input::kBool ? DType::kBool
                                               : in.dtype);
  return dtypes;
}

// The devices every op is tried on: all of them.
const std::vector<Device*>& test_devices() {
  return op_test_devices();
}

double weighted_sum(const RefTensor& y, const std::vector<double>& w) {
  double s = 0;
  for (size_t i = 0; i < w.size(); ++i)
    s += w[i] * y.values[i];
  return s;
}

void check_case(const Case& c, Device* device, int index) {
  const std::string what = describe(c) + " on " + device->id();
  SCOPED_TRACE(what);
  const OpDef& op = *find_op(c.op).value();
  std::vector<RefTensor> ref_in = make_inputs(c, 1000 + index);
  std::vector<Tensor> in;
  for (size_t i = 0; i < ref_in.size(); ++i) {
    auto t = to_device(ref_in[i], c.inputs[i], device);
    ASSERT_TRUE(t.ok()) << t.status().to_string();
    in.push_back(*t);
  }
  Expected<Tensor> out = run(op, in, c.attrs);
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  RefTensor want = op.reference(ref_in, c.attrs);
  ASSERT_EQ(out->shape(), want.shape);
  auto got = to_floats(*out);
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  expect_close(*got, want.values, 2e-5 * c.tolerance_scale, 2e-5 * c.tolerance_scale, "forward");

  if (!op.backward) return;
  std::mt19937 rng(77 + index);
  std::vector<double> w(want.values.size());
  std::vector<float> wf(w.size());
  for (size_t i = 0; i < w.size(); ++i)
    w[i] = wf[i] = std::uniform_real_distribution<float>(-1.0f, 1.0f)(rng);
  if (out->dtype() != DType::kF32) {  // w exact in the output's dtype
    std::vector<float> rounded =
        to_floats(
            from_floats(wf, {static_cast<int64_t>(wf.size())}, out->dtype(), cpu_device()).value())
            .value();
    for (size_t i = 0; i < w.size(); ++i)
      w[i] = wf[i] = rounded[i];
  }
  auto grad_output = from_floats(wf, out->shape(), out->dtype(), device);
  ASSERT_TRUE(grad_output.ok());
  BackwardArgs args{{}, {}, {}, c.attrs, *grad_output, {}, {}};
  for (size_t i = 0; i < in.size(); ++i) {
    args.inputs.push_back(op.save_inputs[i] ? in[i] : Tensor());
    args.input_meta.push_back({in[i].shape(), in[i].dtype()});
    args.needs_grad.push_back(op.differentiable[i] && c.inputs[i].kind != Input::kIds &&
                              c.inputs[i].kind != Input::kBool);
  }
  if (op.save_output) args.output = *out;
  auto grads = op.backward(args);
  ASSERT_TRUE(grads.ok()) << grads.status().to_string();
  ASSERT_EQ(grads->size(), in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    if (!op.differentiable[i] || c.inputs[i].kind == Input::kIds ||
        c.inputs[i].kind == Input::kBool)
      continue;  // ids and bool masks: none
    const Tensor& g = (*grads)[i];
    ASSERT_TRUE(g.defined()) << "no gradient for input " << i;
    ASSERT_EQ(g.shape(), in[i].shape()) << "gradient shape of input " << i;
    std::vector<double> numeric(ref_in[i].values.size());
    const double h = 1e-4;
    // Rounding to a compute dtype is piecewise constant: differentiate the unrounded op.
    Attrs smooth;
    for (const auto& [name, value] : c.attrs.values())
      if (name != "compute")
        std::visit(
            [&, n = name](const auto& v) {
              if constexpr (std::is_same_v<std::decay_t<decltype(v)>, std::vector<double>>)
                smooth.set_reals(n, v);
              else
                smooth.set(n, v);
            },
            value);
    if (c.straight_through) numeric = w;
    for (size_t j = 0; j < numeric.size() && !c.straight_through; ++j) {
      std::vector<RefTensor> x = ref_in;
      x[i].values[j] += h;
      double up = weighted_sum(op.reference(x, smooth), w);
      x[i].values[j] -= 2 * h;
      double down = weighted_sum(op.reference(x, smooth), w);
      numeric[j] = (up - down) / (2 * h);
    }
    ASSERT_EQ(g.dtype(), in[i].dtype()) << "gradient dtype of input " << i;
    auto got_grad = to_floats(g);
    ASSERT_TRUE(got_grad.ok()) << got_grad.status().to_string();
    expect_close(*got_grad, numeric, 2e-4 * c.tolerance_scale, 2e-3 * c.tolerance_scale,
                 "gradient of input " + std::to_string(i));
  }
}

TEST(BackendOps, EveryOpForwardAndGradientOnEveryBackend) {
  auto start = std::chrono::steady_clock::now();
  std::vector<Case> cases = all_cases();
  std::set<std::string> covered;
  for (Device* device : test_devices()) {
    int index = 0;
    for (const Case& c : cases) {
      covered.insert(c.op);
      if (should_run(device, c.op, input_dtypes(c))) check_case(c, device, index);
      ++index;
    }
  }
  // Every registered op has at least one case.
  for (const OpDef& op : all_ops())
    EXPECT_TRUE(covered.count(op.name)) << "no test case for op " << op.name;
  KernelCacheStats stats = kernel_cache_stats();
  log_info(
      "ops tests: {} cases per backend, {} kernels compiled or loaded in {:.1f} s, {} launches, "
      "{:.1f} s in all",
      cases.size(), stats.compiled, stats.compile_seconds, stats.launches,
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
}

// The dropout mask: the kept fraction is 1 - p within 4 standard deviations, a seed gives the
// same mask on every backend, and another seed another mask.
TEST(BackendOps, DropoutMaskIsSeededAndHasTheRightRate) {
  const int64_t n = 20000;
  std::vector<float> ones(n, 1.0f);
  std::vector<std::vector<float>> masks;
  for (Device* device : test_devices()) {
    if (!should_run(device, "dropout")) continue;
    Tensor x = Tensor::from_vector(ones, {n}, device).value();
    for (int64_t seed : {1, 2})
      masks.push_back(dropout(x, 0.25, seed).value().to_vector<float>().value());
  }
  int64_t kept = 0;
  for (float v : masks[0]) {
    ASSERT_TRUE(v == 0.0f || std::fabs(v - 1 / 0.75f) < 1e-6) << v;
    kept += v != 0.0f;
  }
  const double sigma = std::sqrt(n * 0.25 * 0.75);
  EXPECT_NEAR(static_cast<double>(kept), 0.75 * n, 4 * sigma);
  EXPECT_NE(masks[0], masks[1]) << "two seeds, one mask";
  for (size_t i = 2; i < masks.size(); ++i)
    EXPECT_EQ(masks[i], masks[i % 2]) << "a seed's mask differs between backends";
}

TEST(BackendOps, ShapeErrorsNameTheOpAndTheShapes) {
  auto a = Tensor::zeros({2, 3}, DType::kF32).value();
  auto b = Tensor::zeros({4, 5}, DType::kF32).value();
  Expected<Tensor> r = matmul(a, b);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_NE(r.status().message().find("matmul"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find(shape_string({2, 3})), std::string::npos)
      << r.status().message();
  EXPECT_NE(r.status().message().find(shape_string({4, 5})), std::string::npos)
      << r.status().message();

  Expected<Tensor> s = add(a, b);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("add"), std::string::npos) << s.status().message();

  Expected<Tensor> t = run("sum", {a}, Attrs().set("axis", 1));
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("unknown attribute 'axis'"), std::string::npos)
      << t.status().message();
  EXPECT_NE(t.status().message().find("axes, keepdim"), std::string::npos) << t.status().message();

  Expected<Tensor> u = run("no_such_op", {a});
  EXPECT_EQ(u.status().code(), Code::kNotFound);

  auto ids = Tensor::from_vector<int64_t>({0, 9}, {2}).value();
  Expected<Tensor> e = embedding(a, ids);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), Code::kOutOfRange);
  EXPECT_NE(e.status().message().find("id 9 at position 1"), std::string::npos)
      << e.status().message();
}

// The typed functions of ops.h that had no definition (a C++ user got a link error): each is its
// op, checked against closed forms.
TEST(BackendOps, TypedFunctionsMatchClosedForms) {
  const std::vector<float> x = {-2.0f, -0.5f, 0.0f, 1.0f, 3.0f};
  for (const char* op : {"silu", "gelu_erf"}) {
    testing::for_each_device(op, {DType::kF32}, [&](Device* device) {
      Tensor t = Tensor::from_vector(x, {5}, device).value();
      std::vector<float> got =
          (std::string(op) == "silu" ? silu(t) : gelu_erf(t)).value().to_vector<float>().value();
      for (size_t i = 0; i < x.size(); ++i) {
        const double v = x[i];
        const double want = std::string(op) == "silu"
                                ? v / (1 + std::exp(-v))
                                : 0.5 * v * (1 + std::erf(v / std::sqrt(2.0)));
        EXPECT_NEAR(got[i], want, 1e-6) << op << "(" << v << ")";
      }
    });
  }
  testing::for_each_device("rsqrt", {DType::kF32}, [&](Device* device) {
    Tensor t = Tensor::from_vector<float>({0.25f, 4.0f, 16.0f}, {3}, device).value();
    EXPECT_EQ(rsqrt(t).value().to_vector<float>().value(), (std::vector<float>{2.0f, 0.5f, 0.25f}));
  });
  testing::for_each_device("concat", {DType::kF32, DType::kF32}, [&](Device* device) {
    Tensor a = Tensor::from_vector<float>({1, 2, 3, 4}, {2, 2}, device).value();
    Tensor b = Tensor::from_vector<float>({5, 6}, {2, 1}, device).value();
    Tensor c = concat(a, b, 1).value();
    EXPECT_EQ(c.shape(), (Shape{2, 3}));
    EXPECT_EQ(c.to_vector<float>().value(), (std::vector<float>{1, 2, 5, 3, 4, 6}));
  });
}

// Convolutions too large for the finite differences above (a strided 1x1's forward reaches the
// CPU's conv_subsample path only over 196 or more output positions, conv_implicit's row stores
// only over images of 256 or more grid positions), checked against plain loops: the forward against
// conv2d's reference, the gradients against the convolution's adjoint written out (dx and dW sum dy
// times the weight and the input over the same index map, db sums dy). Each case: x [N, C, H, W], O
// output channels, a kh x kw window, strides, paddings, groups, whether the bias is zero.
struct LoopConv {
  Shape x;
  int64_t o, kh, kw, sh, sw, ph, pw, groups;
  bool zero_bias;
};

void check_conv_against_loops(const LoopConv& c, Device* device) {
  const int64_t n = c.x[0], ch = c.x[1], h = c.x[2], wd = c.x[3], cg = ch / c.groups,
                og = c.o / c.groups;
  const int64_t oh = (h + 2 * c.ph - c.kh) / c.sh + 1, ow = (wd + 2 * c.pw - c.kw) / c.sw + 1;
  SCOPED_TRACE(fmt::format("x {} o {} window {}x{} stride {}x{} padding {}x{} groups {} bias {}",
                           shape_string(c.x), c.o, c.kh, c.kw, c.sh, c.sw, c.ph, c.pw, c.groups,
                           c.zero_bias ? "zero" : "random"));
  std::mt19937 rng(static_cast<uint32_t>(n * 131 + ch * 17 + h * 7 + c.sh));
  auto uniform = [&](int64_t count) {
    std::vector<float> v(static_cast<size_t>(count));
    for (float& f : v)
      f = std::uniform_real_distribution<float>(-1.0f, 1.0f)(rng);
    return v;
  };
  const std::vector<float> xv = uniform(n * ch * h * wd), wv = uniform(c.o * cg * c.kh * c.kw),
                           dyv = uniform(n * c.o * oh * ow);
  const std::vector<float> bv = c.zero_bias ? std::vector<float>(c.o, 0.0f) : uniform(c.o);
  const Attrs attrs = conv_attrs({c.sh, c.sw}, {c.ph, c.pw}, {1, 1}, c.groups);
  Tensor x = Tensor::from_vector(xv, c.x, device).value();
  Tensor w = Tensor::from_vector(wv, {c.o, cg, c.kh, c.kw}, device).value();
  Tensor b = Tensor::from_vector(bv, {c.o}, device).value();
  Tensor dy = Tensor::from_vector(dyv, {n, c.o, oh, ow}, device).value();
  const OpDef& op = *find_op("conv2d").value();

  Expected<Tensor> y = run(op, {x, w, b}, attrs);
  ASSERT_TRUE(y.ok()) << y.status().to_string();
  auto as_ref = [](const std::vector<float>& v, Shape shape) {
    return RefTensor{std::move(shape), std::vector<double>(v.begin(), v.end())};
  };
  const RefTensor want =
      op.reference({as_ref(xv, c.x), as_ref(wv, {c.o, cg, c.kh, c.kw}), as_ref(bv, {c.o})}, attrs);
  expect_close(y->to_vector<float>().value(), want.values, 1e-4, 1e-4, "forward");

  std::vector<double> dx(xv.size()), dw(wv.size()), db(bv.size());
  for (int64_t bi = 0; bi < n; ++bi)
    for (int64_t f = 0; f < c.o; ++f)
      for (int64_t yy = 0; yy < oh; ++yy)
        for (int64_t xx = 0; xx < ow; ++xx) {
          const double g = dyv[((bi * c.o + f) * oh + yy) * ow + xx];
          db[f] += g;
          for (int64_t cl = 0; cl < cg; ++cl)
            for (int64_t i = 0; i < c.kh; ++i)
              for (int64_t j = 0; j < c.kw; ++j) {
                const int64_t iy = yy * c.sh - c.ph + i, ix = xx * c.sw - c.pw + j;
                if (iy < 0 || iy >= h || ix < 0 || ix >= wd) continue;
                const int64_t xi = ((bi * ch + f / og * cg + cl) * h + iy) * wd + ix;
                const int64_t wi = ((f * cg + cl) * c.kh + i) * c.kw + j;
                dx[xi] += g * wv[wi];
                dw[wi] += g * xv[xi];
              }
        }
  const std::vector<TensorMeta> meta{
      {x.shape(), x.dtype()}, {w.shape(), w.dtype()}, {b.shape(), b.dtype()}};
  BackwardArgs args{{x, w, b}, Tensor(), meta, attrs, dy, {true, true, true}, {}};
  auto grads = op.backward(args);
  ASSERT_TRUE(grads.ok()) << grads.status().to_string();
  expect_close((*grads)[0].to_vector<float>().value(), dx, 1e-4, 1e-4, "input gradient");
  expect_close((*grads)[1].to_vector<float>().value(), dw, 1e-3, 1e-4, "weight gradient");
  expect_close((*grads)[2].to_vector<float>().value(), db, 1e-3, 1e-4, "bias gradient");
}

TEST(BackendOps, LargerConvolutionsMatchPlainLoops) {
  const std::vector<LoopConv> cases = {
      // 1x1 / stride 2, 3, 4 without padding over 196 or more output positions (conv_subsample
      // on the CPU, forward and weight gradient): odd sizes, rectangular strides, batch 1 and 2,
      // groups, zero and random bias.
      {{1, 16, 33, 35}, 16, 1, 1, 2, 2, 0, 0, 1, false},
      {{2, 16, 28, 28}, 24, 1, 1, 2, 2, 0, 0, 1, true},
      {{1, 16, 47, 50}, 16, 1, 1, 3, 3, 0, 0, 1, false},
      {{2, 32, 64, 67}, 32, 1, 1, 4, 4, 0, 0, 2, false},
      {{1, 16, 33, 52}, 16, 1, 1, 2, 3, 0, 0, 1, true},
      // and over fewer (8 x 7, 5 x 5): the forward on the implicit grid, the weight gradient
      // still subsampled.
      {{3, 16, 15, 13}, 16, 1, 1, 2, 2, 0, 0, 1, false},
      {{2, 32, 17, 19}, 32, 1, 1, 4, 4, 0, 0, 2, true},
      // conv_implicit's stores of whole output rows (grids of 256 or more positions per image,
      // forward and unit-stride input gradient): grid rows wider than the output, rows and
      // images across 256-position blocks, a last partial row, odd sizes, a 1x3 window.
      {{2, 16, 16, 17}, 16, 3, 3, 1, 1, 1, 1, 1, false},
      {{3, 16, 15, 17}, 24, 3, 3, 1, 1, 1, 1, 1, true},
      {{1, 32, 15, 31}, 16, 1, 3, 1, 1, 0, 1, 2, false},
      // 1x1 / stride 1 over images of fewer than 256 positions: one gemm per image read in
      // place over 196 or more positions (the weight gradient over 32 or more), else folded
      // with the images along the positions (conv_fold), batch 1 to 3, odd sizes, groups, zero
      // and random bias, 520 output or input channels.
      {{2, 16, 7, 7}, 24, 1, 1, 1, 1, 0, 0, 1, false},
      {{3, 16, 14, 14}, 16, 1, 1, 1, 1, 0, 0, 1, true},
      {{1, 32, 5, 3}, 32, 1, 1, 1, 1, 0, 0, 2, false},
      {{2, 24, 13, 11}, 40, 1, 1, 1, 1, 0, 0, 1, true},
      {{2, 16, 7, 5}, 520, 1, 1, 1, 1, 0, 0, 1, false},
      {{2, 520, 3, 5}, 16, 1, 1, 1, 1, 0, 0, 1, false},
      // A strided 1x1's input gradient: one gemm per image over the output gradient read in
      // place (the cases above), and over fewer than 196 outputs on the implicit grid's one
      // output phase.
      {{2, 520, 5, 7}, 16, 1, 1, 2, 2, 0, 0, 1, false},
      // 1x1 layers over images of 1 to 20 positions, every pass on the implicit grid with the
      // images folded into the positions (conv_fold; the weight gradient too, under 32
      // positions): stride 1 and 2, (2, 3), odd sizes, batch 1 to 3, channels that are not
      // multiples of 8, groups, zero and random bias.
      {{2, 20, 5, 7}, 18, 1, 1, 1, 1, 0, 0, 1, false},
      {{1, 17, 3, 3}, 24, 1, 1, 1, 1, 0, 0, 1, true},
      {{3, 16, 1, 1}, 16, 1, 1, 1, 1, 0, 0, 1, false},
      {{2, 16, 1, 17}, 20, 1, 1, 1, 1, 0, 0, 1, true},
      {{1, 20, 7, 9}, 18, 1, 1, 2, 2, 0, 0, 1, false},
      {{3, 24, 9, 5}, 17, 1, 1, 2, 2, 0, 0, 1, true},
      {{2, 16, 8, 13}, 16, 1, 1, 2, 3, 0, 0, 1, false},
      {{2, 32, 4, 3}, 32, 1, 1, 2, 2, 0, 0, 2, false},
      // Input gradients of fewer than 16 input channels per group (stems) over columns: dY
      // read in place, col2im_strided_rows at strides 2, (2, 3) and (1, 2) (odd sizes, more
      // images than a block's 8, groups, zero bias), col2im_rows at unit strides.
      {{2, 3, 23, 21}, 16, 7, 7, 2, 2, 3, 3, 1, false},
      {{9, 3, 9, 10}, 16, 3, 3, 1, 1, 1, 1, 1, false},
      {{1, 4, 13, 17}, 32, 3, 3, 2, 3, 1, 2, 2, true},
      {{3, 3, 12, 11}, 16, 5, 5, 1, 2, 2, 0, 1, false},
      // conv_implicit's block rows fitted to the gemm's rows per group (64 or 128 where one
      // block holds them): 72 rows in one 128-row block, 200 in two of 192 (the second
      // ragged); forward over a 1x1 read in place (dense stores) and a 3x3 (row stores, groups),
      // input gradients of a 1x1 read in place (groups, batch 1) and of a strided 3x3 (phase
      // planes, indexed stores), odd sizes, zero and random bias.
      {{2, 16, 15, 14}, 200, 1, 1, 1, 1, 0, 0, 1, false},
      {{1, 32, 20, 21}, 144, 3, 3, 1, 1, 1, 1, 2, false},
      {{1, 400, 14, 15}, 32, 1, 1, 1, 1, 0, 0, 2, true},
      {{2, 200, 9, 11}, 16, 3, 3, 2, 2, 1, 1, 1, true},
      // 1x1 passes of more than 192 gemm rows, one group, f32 (conv_pointwise on the CPU, one
      // gemm per image read in place): forward (output channels) and input gradient (input
      // channels) at stride 1 over 196 or more positions, the forward at strides 2 and (2, 3)
      // over the subsampled input; odd sizes, channels not multiples of 8, depths over two
      // 256-deep K steps, batch 1 to 3, zero and random bias; under 196 positions over the
      // images folded (conv_fold), the result unfolded by conv_fold: 1 to 20 positions, stride 1,
      // 2 and (2, 3), the input gradient at stride 1. Two groups keep conv_implicit.
      {{2, 201, 13, 17}, 203, 1, 1, 1, 1, 0, 0, 1, false},
      {{1, 300, 14, 14}, 260, 1, 1, 1, 1, 0, 0, 1, true},
      {{3, 200, 15, 14}, 24, 1, 1, 1, 1, 0, 0, 1, false},
      {{1, 20, 29, 31}, 200, 1, 1, 2, 2, 0, 0, 1, false},
      {{2, 17, 28, 45}, 210, 1, 1, 2, 3, 0, 0, 1, true},
      {{1, 32, 14, 14}, 400, 1, 1, 1, 1, 0, 0, 2, false},
      {{2, 200, 3, 5}, 200, 1, 1, 1, 1, 0, 0, 1, false},
      {{3, 197, 7, 7}, 205, 1, 1, 1, 1, 0, 0, 1, true},
      {{1, 210, 1, 1}, 17, 1, 1, 1, 1, 0, 0, 1, false},
      {{2, 16, 1, 17}, 220, 1, 1, 1, 1, 0, 0, 1, false},
      {{1, 24, 7, 9}, 200, 1, 1, 2, 2, 0, 0, 1, false},
      {{3, 20, 9, 8}, 199, 1, 1, 2, 3, 0, 0, 1, true},
      // Images in groups whose packed tiles fit kPointwiseWorkspaceBytes (11 tiles of 256 x 256
      // floats an image over 52 x 53: groups of 2, the last of 1), forward and input gradient.
      {{3, 16, 52, 53}, 200, 1, 1, 1, 1, 0, 0, 1, false},
      {{3, 200, 53, 52}, 16, 1, 1, 1, 1, 0, 0, 1, true},
      // conv_relayout_unit (unit strides): rows wider than 64 (32-column blocks, the last
      // ragged), padding wider than the window's reach (pad 2 under a 3x3), batch 1 and 2.
      {{1, 16, 5, 70}, 16, 3, 3, 1, 1, 1, 1, 1, false},
      {{2, 16, 9, 12}, 24, 3, 3, 1, 1, 2, 2, 1, true},
      // The weight gradient over columns of 1,024 or more positions, transposed
      // (conv_implicit_weight_grad_t with one tap): 6 images of 14 x 13, groups.
      {{6, 32, 14, 13}, 64, 3, 3, 1, 1, 1, 1, 2, false},
  };
  for (const LoopConv& c : cases)
    testing::for_each_device("conv2d", {DType::kF32, DType::kF32, DType::kF32},
                             [&](Device* device) { check_conv_against_loops(c, device); });
}

// A mistake in the input is the same error on every device: the op checks its input where it
// lies (reading it back from a device the host cannot address), not only on the CPU.
TEST(BackendOps, BadInputIsTheSameErrorOnEveryDevice) {
  for (Device* device : test_devices()) {
    if (!should_run(device, "embedding", {DType::kF32, DType::kI64})) continue;
    SCOPED_TRACE(device->id());
    auto table = Tensor::zeros({2, 3}, DType::kF32, device).value();
    auto ids = Tensor::from_vector<int64_t>({0, 9}, {2}, device).value();
    Expected<Tensor> e = embedding(table, ids);
    ASSERT_FALSE(e.ok());
    EXPECT_EQ(e.status().code(), Code::kOutOfRange);
    EXPECT_EQ(e.status().message(), "embedding: id 9 at position 1 is outside [0, 2)");
    // A view of the ids at an offset is read where it starts.
    auto more = Tensor::from_vector<int64_t>({5, 1, -1}, {3}, device).value();
    Expected<Tensor> v = embedding(table, more.slice(0, 1, 3).value());
    ASSERT_FALSE(v.ok());
    EXPECT_EQ(v.status().message(), "embedding: id -1 at position 1 is outside [0, 2)");
  }
}

TEST(BackendOps, InputsOnTwoDevicesAreAnError) {
  const std::vector<Device*>& devices = test_devices();
  if (devices.size() < 2) GTEST_SKIP() << "one device here";
  auto a = Tensor::zeros({2, 3}, DType::kF32, devices[0]).value();
  auto b = Tensor::zeros({2, 3}, DType::kF32, devices[1]).value();
  Expected<Tensor> r = add(a, b);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find(devices[1]->id()), std::string::npos) << r.status().message();
}

}  // namespace
}  // namespace tessel::ops
