// Element-wise math with PyTorch's semantics: exp, log, sqrt, abs, neg, erf (the `unary` kernel
// of kernels/elementwise.tile forward, math_grad backward); pow, maximum, minimum (broadcasting,
// NaN-propagating, binary_math); clamp (min and max attrs, either optional); where (a bool
// condition, broadcasting); eq, ne, lt, le, gt, ge (bool results, not differentiable). Floats of
// any width (f32, f16, bf16) compute in f32; mixed floats promote as PyTorch's (bf16 with f16:
// f32), each gradient cast back to its input's dtype. Kernels: kernels/math.tile. Integer tensors
// follow PyTorch (ops/integer_ops.h): exact integer kernels where PyTorch keeps an integer result
// (pow included), conversion to f32 where it does not (exp, log, sqrt, erf).
#include <cmath>

#include "ops/integer_ops.h"
#include "ops/kernel_util.h"
#include "ops/ops.h"
#include "ops/reference_util.h"

namespace tessel::ops {
namespace {

// The OP numbers of elementwise.tile's `unary` kernel, which math_grad shares.
enum MathKind { kExp = 5, kLog = 6, kSqrt = 7, kAbs = 9, kNeg = 10, kErf = 11 };

double math_value(MathKind kind, double x) {
  switch (kind) {
    case kExp:
      return std::exp(x);
    case kLog:
      return std::log(x);
    case kSqrt:
      return std::sqrt(x);
    case kAbs:
      return std::fabs(x);
    case kNeg:
      return -x;
    case kErf:
      return std::erf(x);
  }
  return x;
}

Expected<TensorMeta> infer_float(const std::string& name, const std::vector<TensorMeta>& in) {
  for (const TensorMeta& m : in)
    if (m.dtype != in[0].dtype || !is_floating_point(m.dtype))
      return invalid_argument("{}: needs floating-point inputs of one dtype, got {}", name,
                              shapes_string(in));
  Shape shape = in[0].shape;
  for (size_t i = 1; i < in.size(); ++i) {
    Expected<Shape> s = broadcast_shapes(shape, in[i].shape);
    if (!s.ok()) return invalid_argument("{}: shapes {} do not broadcast", name, shapes_string(in));
    shape = *s;
  }
  return TensorMeta{shape, in[0].dtype};
}

// The inputs expanded to `shape`, and a fresh output of that shape.
Expected<std::vector<Tensor>> expanded(const std::vector<Tensor>& in, const Shape& shape,
                                       DType out_dtype) {
  std::vector<Tensor> t;
  for (const Tensor& x : in) {
    TESSEL_ASSIGN_OR_RETURN(Tensor e, x.expand(shape));
    t.push_back(e);
  }
  TESSEL_ASSIGN_OR_RETURN(Tensor y, empty_like_device(shape, out_dtype, in[0]));
  t.push_back(y);
  return t;
}

// Each input converted to `dtype` (integers to the float result of a mixed op).
Expected<std::vector<Tensor>> converted_all(const std::vector<Tensor>& in, DType dtype) {
  std::vector<Tensor> out;
  for (const Tensor& x : in) {
    TESSEL_ASSIGN_OR_RETURN(Tensor c, convert(x, dtype));
    out.push_back(c);
  }
  return out;
}

// The reference of an element-wise op over broadcast inputs.
template <typename F>
RefTensor broadcast_reference(const std::vector<RefTensor>& in, F f) {
  Shape shape = in[0].shape;
  for (size_t i = 1; i < in.size(); ++i)
    shape = reference::broadcast(shape, in[i].shape);
  RefTensor out{shape, std::vector<double>(reference::numel(shape))};
  std::vector<double> args(in.size());
  for (int64_t e = 0; e < static_cast<int64_t>(out.values.size()); ++e) {
    auto index = reference::unravel(e, shape);
    for (size_t i = 0; i < in.size(); ++i)
      args[i] = in[i].values[reference::broadcast_source(index, in[i].shape)];
    out.values[e] = f(args);
  }
  return out;
}

OpDef math_op(const std::string& name, MathKind kind) {
  OpDef op;
  op.name = name;
  // abs and neg keep an integer type; the others make integers f32.
  const bool keeps_integers = kind == kAbs || kind == kNeg;
  op.infer = [name, keeps_integers](const std::vector<TensorMeta>& in,
                                    const Attrs&) -> Expected<TensorMeta> {
    if (is_integer(in[0].dtype))
      return TensorMeta{in[0].shape, keeps_integers ? in[0].dtype : DType::kF32};
    return infer_float(name, in);
  };
  op.forward = [kind](const std::vector<Tensor>& in, const Attrs&,
                      const TensorMeta& out) -> Expected<Tensor> {
    if (is_integer(out.dtype)) return int_unary(kind == kAbs ? 0 : 1, in[0]);
    TESSEL_ASSIGN_OR_RETURN(Tensor x, convert(in[0], out.dtype));
    TESSEL_ASSIGN_OR_RETURN(Tensor y, empty_like_device(out.shape, out.dtype, in[0]));
    TESSEL_TRY(launch_elementwise("unary", {{"OP", std::to_string(kind)}}, {x, y}, {1.0}));
    return y;
  };
  op.reference = [kind](const std::vector<RefTensor>& in, const Attrs&) {
    RefTensor out = in[0];
    for (double& v : out.values)
      v = math_value(kind, v);
    return out;
  };
  // exp and sqrt differentiate through their output, the others through the input.
  const bool from_output = kind == kExp || kind == kSqrt;
  op.save_inputs = {!from_output && kind != kNeg};
  op.save_output = from_output;
  op.backward = [kind, from_output](const BackwardArgs& b) -> Expected<std::vector<Tensor>> {
    const Tensor& g = b.grad_output;
    if (kind == kNeg) {
      TESSEL_ASSIGN_OR_RETURN(Tensor dx, scale(g, -1.0));
      return std::vector<Tensor>{dx};
    }
    const Tensor& v = from_output ? b.output : b.inputs[0];
    TESSEL_ASSIGN_OR_RETURN(Tensor dx, empty_like_device(v.shape(), v.dtype(), v));
    TESSEL_TRY(launch_elementwise("math_grad", {{"OP", std::to_string(kind)}}, {v, v, g, dx}, {}));
    return std::vector<Tensor>{dx};
  };
  return op;
}

// ---- pow, maximum, minimum ----

enum BinaryMath { kPow = 0, kMaximum = 1, kMinimum = 2 };

double binary_math_value(BinaryMath kind, double x, double y) {
  if (kind == kPow) return std::pow(x, y);
  if (std::isnan(x) || std::isnan(y)) return NAN;
  return kind == kMaximum ? std::max(x, y) : std::min(x, y);
}

OpDef binary_math_op(const std::string& name, BinaryMath kind) {
  OpDef op;
  op.name = name;
  op.arity = 2;
  op.infer = [name](const std::vector<TensorMeta>& in, const Attrs&) {
    return infer_promoted(name, in);
  };
  op.forward = [name, kind](const std::vector<Tensor>& in, const Attrs&,
                            const TensorMeta& out) -> Expected<Tensor> {
    if (is_integer(out.dtype)) {
      const IntBinary k = kind == kPow       ? IntBinary::kPow
                          : kind == kMaximum ? IntBinary::kMaximum
                                             : IntBinary::kMinimum;
      return int_binary(name, k, in[0], in[1], out);
    }
    TESSEL_ASSIGN_OR_RETURN(std::vector<Tensor> converted, converted_all(in, out.dtype));
    TESSEL_ASSIGN_OR_RETURN(std::vector<Tensor> t, expanded(converted, out.shape, out.dtype));
    TESSEL_TRY(launch_elementwise("binary_math", {{"OP", std::to_string(kind)}}, t, {}));
    return t.back();
  };
  op.reference = [kind](const std::vector<RefTensor>& in, const Attrs&) {
    return broadcast_reference(
        in, [kind](const std::vector<double>& v) { return binary_math_value(kind, v[0], v[1]); });
  };
  op.save_inputs = {true, true};
  op.backward = [kind](const BackwardArgs& b) -> Expected<std::vector<Tensor>> {
    const Shape& shape = b.grad_output.shape();
    std::vector<Tensor> grads(2);
    for (int i = 0; i < 2; ++i) {
      if (!b.needs_grad[i]) continue;
      // A mixed integer and float call differentiates in the float (the output's) dtype.
      TESSEL_ASSIGN_OR_RETURN(std::vector<Tensor> x,
                              converted_all({b.inputs[0], b.inputs[1]}, b.grad_output.dtype()));
      TESSEL_ASSIGN_OR_RETURN(std::vector<Tensor> t,
                              expanded({x[0], x[1], b.grad_output}, shape, b.grad_output.dtype()));
      TESSEL_TRY(launch_elementwise(
          "binary_math_grad", {{"OP", std::to_string(kind)}, {"WRT", std::to_string(i)}}, t, {}));
      TESSEL_ASSIGN_OR_RETURN(Tensor summed, sum_to(t.back(), b.input_meta[i].shape));
      TESSEL_ASSIGN_OR_RETURN(grads[i], cast(summed, b.input_meta[i].dtype));
    }
    return grads;
  };
  return op;
}

// ---- clamp ----

std::pair<double, double> clamp_bounds(const Attrs& a) {
  return {a.get_double("min", -INFINITY), a.get_double("max", INFINITY)};
}

bool integral_bounds(const Attrs& a) {
  auto [lo, hi] = clamp_bounds(a);
  auto integral = [](double v) { return std::isinf(v) || v == std::trunc(v); };
  return integral(lo) && integral(hi);
}

OpDef clamp_op() {
  OpDef op;
  op.name = "clamp";
  op.attrs = {"min", "max"};
  // An integer tensor stays one with integral (or infinite) bounds; a fractional bound makes the
  // result f32, as PyTorch's promotion with a float scalar does.
  op.infer = [](const std::vector<TensorMeta>& in, const Attrs& a) -> Expected<TensorMeta> {
    if (is_integer(in[0].dtype))
      return TensorMeta{in[0].shape, integral_bounds(a) ? in[0].dtype : DType::kF32};
    return infer_float("clamp", in);
  };
  op.forward = [](const std::vector<Tensor>& in, const Attrs& a,
                  const TensorMeta& out) -> Expected<Tensor> {
    auto [lo, hi] = clamp_bounds(a);
    if (is_integer(out.dtype)) {
      auto bound = [](double v) {
        return v <= -0x1p63 ? INT64_MIN : v >= 0x1p63 ? INT64_MAX : static_cast<int64_t>(v);
      };
      return int_clamp(in[0], bound(lo), bound(hi));
    }
    TESSEL_ASSIGN_OR_RETURN(Tensor x, convert(in[0], out.dtype));
    TESSEL_ASSIGN_OR_RETURN(Tensor y, empty_like_device(out.shape, out.dtype, in[0]));
    TESSEL_TRY(launch_elementwise("clamp", {{"GRAD", "0"}}, {x, x, y}, {lo, hi}));
    return y;
  };
  op.reference = [](const std::vector<RefTensor>& in, const Attrs& a) {
    auto [lo, hi] = clamp_bounds(a);
    RefTensor out = in[0];
    for (double& v : out.values)
      if (!std::isnan(v)) v = std::min(std::max(v, lo), hi);
    return out;
  };
  op.save_inputs = {true};
  op.backward = [](const BackwardArgs& b) -> Expected<std::vector<Tensor>> {
    auto [lo, hi] = clamp_bounds(b.attrs);
    const Tensor& x = b.inputs[0];
    TESSEL_ASSIGN_OR_RETURN(Tensor dx, empty_like_device(x.shape(), x.dtype(), x));
    TESSEL_TRY(launch_elementwise("clamp", {{"GRAD", "1"}}, {x, b.grad_output, dx}, {lo, hi}));
    return std::vector<Tensor>{dx};
  };
  return op;
}

// ---- where ----

Expected<TensorMeta> infer_where(const std::vector<TensorMeta>& in) {
  if (in[0].dtype != DType::kBool)
    return invalid_argument("where: the condition is bool, got {}", shapes_string(in));
  TESSEL_ASSIGN_OR_RETURN(TensorMeta values, infer_promoted("where", {in[1], in[2]}));
  Expected<Shape> shape = broadcast_shapes(in[0].shape, values.shape);
  if (!shape.ok()) return invalid_argument("where: shapes {} do not broadcast", shapes_string(in));
  return TensorMeta{*shape, values.dtype};
}

OpDef where_op() {
  OpDef op;
  op.name = "where";
  op.arity = 3;
  op.infer = [](const std::vector<TensorMeta>& in, const Attrs&) { return infer_where(in); };
  op.forward = [](const std::vector<Tensor>& in, const Attrs&,
                  const TensorMeta& out) -> Expected<Tensor> {
    if (is_integer(out.dtype)) return int_where(in[0], in[1], in[2], out);
    TESSEL_ASSIGN_OR_RETURN(Tensor a, convert(in[1], out.dtype));
    TESSEL_ASSIGN_OR_RETURN(Tensor b, convert(in[2], out.dtype));
    TESSEL_ASSIGN_OR_RETURN(std::vector<Tensor> t, expanded({in[0], a, b}, out.shape, out.dtype));
    TESSEL_TRY(launch_elementwise("where", {{"T", dtype_name(out.dtype)}}, t, {}));
    return t.back();
  };
  op.reference = [](const std::vector<RefTensor>& in, const Attrs&) {
    return broadcast_reference(
        in, [](const std::vector<double>& v) { return v[0] != 0 ? v[1] : v[2]; });
  };
  op.save_inputs = {true, false, false};
  op.differentiable = {false, true, true};
  // d/da = where(c, g, 0), d/db = where(c, 0, g), each summed to its input's shape.
  op.backward = [](const BackwardArgs& b) -> Expected<std::vector<Tensor>> {
    const Tensor& g = b.grad_output;
    TESSEL_ASSIGN_OR_RETURN(Tensor zero, Tensor::zeros({}, g.dtype(), g.device()));
    std::vector<Tensor> grads(3);
    for (int i = 1; i < 3; ++i) {
      if (!b.needs_grad[i]) continue;
      TESSEL_ASSIGN_OR_RETURN(Tensor full,
                              run("where", {b.inputs[0], i == 1 ? g : zero, i == 1 ? zero : g}));
      TESSEL_ASSIGN_OR_RETURN(Tensor summed, sum_to(full, b.input_meta[i].shape));
      TESSEL_ASSIGN_OR_RETURN(grads[i], cast(summed, b.input_meta[i].dtype));
    }
    return grads;
  };
  return op;
}

// ---- comparisons ----

enum CompareKind { kEq = 0, kNe = 1, kLt = 2, kLe = 3, kGt = 4, kGe = 5 };

bool compare_value(CompareKind kind, double x, double y) {
  switch (kind) {
    case kEq:
      return x == y;
    case kNe:
      return x != y;
    case kLt:
      return x < y;
    case kLe:
      return x <= y;
    case kGt:
      return x > y;
    case kGe:
      return x >= y;
  }
  return false;
}

OpDef compare_op(const std::string& name, CompareKind kind) {
  OpDef op;
  op.name = name;
  op.arity = 2;
  op.infer = [name](const std::vector<TensorMeta>& in, const Attrs&) -> Expected<TensorMeta> {
    // Two integer types compare exactly in i64 whatever they promote to (u8 with i8 too).
    std::vector<TensorMeta> m = in;
    if (is_integer(in[0].dtype) && is_integer(in[1].dtype)) m[1].dtype = m[0].dtype;
    TESSEL_ASSIGN_OR_RETURN(TensorMeta joined, infer_promoted(name, m));
    return TensorMeta{joined.shape, DType::kBool};
  };
  op.forward = [name, kind](const std::vector<Tensor>& in, const Attrs&,
                            const TensorMeta& out) -> Expected<Tensor> {
    if (is_integer(in[0].dtype()) && is_integer(in[1].dtype()))
      return int_compare(kind, in[0], in[1], out);
    TESSEL_ASSIGN_OR_RETURN(DType common, result_type(name, {{in[0].shape(), in[0].dtype()},
                                                             {in[1].shape(), in[1].dtype()}}));
    TESSEL_ASSIGN_OR_RETURN(std::vector<Tensor> converted, converted_all(in, common));
    TESSEL_ASSIGN_OR_RETURN(std::vector<Tensor> t, expanded(converted, out.shape, out.dtype));
    TESSEL_TRY(launch_elementwise("compare", {{"OP", std::to_string(kind)}}, t, {}));
    return t.back();
  };
  op.reference = [kind](const std::vector<RefTensor>& in, const Attrs&) {
    return broadcast_reference(in, [kind](const std::vector<double>& v) {
      return compare_value(kind, v[0], v[1]) ? 1.0 : 0.0;
    });
  };
  return op;
}

}  // namespace

void add_math_ops(std::vector<OpDef>& ops) {
  ops.push_back(math_op("exp", kExp));
  ops.push_back(math_op("log", kLog));
  ops.push_back(math_op("sqrt", kSqrt));
  ops.push_back(math_op("abs", kAbs));
  ops.push_back(math_op("neg", kNeg));
  ops.push_back(math_op("erf", kErf));
  ops.push_back(binary_math_op("pow", kPow));
  ops.push_back(binary_math_op("maximum", kMaximum));
  ops.push_back(binary_math_op("minimum", kMinimum));
  ops.push_back(clamp_op());
  ops.push_back(where_op());
  ops.push_back(compare_op("eq", kEq));
  ops.push_back(compare_op("ne", kNe));
  ops.push_back(compare_op("lt", kLt));
  ops.push_back(compare_op("le", kLe));
  ops.push_back(compare_op("gt", kGt));
  ops.push_back(compare_op("ge", kGe));
}

Expected<Tensor> exp(const Tensor& x) {
  return run("exp", {x});
}
Expected<Tensor> log(const Tensor& x) {
  return run("log", {x});
}
Expected<Tensor> sqrt(const Tensor& x) {
  return run("sqrt", {x});
}
Expected<Tensor> abs(const Tensor& x) {
  return run("abs", {x});
}
Expected<Tensor> neg(const Tensor& x) {
  return run("neg", {x});
}
Expected<Tensor> erf(const Tensor& x) {
  return run("erf", {x});
}
Expected<Tensor> pow(const Tensor& x, const Tensor& exponent) {
  return run("pow", {x, exponent});
}
Expected<Tensor> maximum(const Tensor& a, const Tensor& b) {
  return run("maximum", {a, b});
}
Expected<Tensor> minimum(const Tensor& a, const Tensor& b) {
  return run("minimum", {a, b});
}
Expected<Tensor> compare(const std::string& op, const Tensor& a, const Tensor& b) {
  return run(op, {a, b});
}
Expected<Tensor> clamp(const Tensor& x, std::optional<double> min, std::optional<double> max) {
  Attrs a;
  if (min) a.set("min", *min);
  if (max) a.set("max", *max);
  return run("clamp", {x}, a);
}
Expected<Tensor> where(const Tensor& condition, const Tensor& a, const Tensor& b) {
  return run("where", {condition, a, b});
}

}  // namespace tessel::ops
