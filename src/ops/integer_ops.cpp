// Integer tensors in the element-wise ops (see integer_ops.h): type promotion, the integer
// kernels of kernels/integer.tile, the zero-divisor check, and the ops floor_divide, div_trunc
// and remainder on integers (integer kernels) and floats (float_division of kernels/math.tile).
#include "ops/integer_ops.h"

#include <cmath>

#include "ops/kernel_util.h"
#include "ops/ops.h"
#include "ops/reference_util.h"

namespace tessel::ops {
namespace {

// bool 0, integers 1, floats 2: the kinds PyTorch's promotion ranks.
int kind_of(DType t) {
  return t == DType::kBool ? 0 : is_integer(t) ? 1 : 2;
}

int bits_of(DType t) {
  return static_cast<int>(dtype_size(t)) * 8;
}

// Two dtypes promoted (nullopt: f64 with another float, which the op library's float kernels do
// not take).
std::optional<DType> promote_pair(DType a, DType b) {
  if (a == b) return a;
  if (kind_of(a) != kind_of(b)) return kind_of(a) > kind_of(b) ? a : b;
  if (!is_integer(a)) {
    if (a == DType::kF64 || b == DType::kF64) return std::nullopt;
    return DType::kF32;  // f32 holds f16 and bf16; f16 with bf16 is f32 too (torch.promote_types)
  }
  if (a == DType::kU8 || b == DType::kU8) {
    DType other = a == DType::kU8 ? b : a;
    if (other == DType::kI8) return DType::kI16;
    return other;  // u8 with a wider signed type: that one
  }
  return bits_of(a) >= bits_of(b) ? a : b;
}

Expected<std::optional<DType>> promote_all(const std::string& op, const std::vector<TensorMeta>& in,
                                           bool zero_dim) {
  std::optional<DType> out;
  for (const TensorMeta& m : in) {
    if ((m.shape.empty()) != zero_dim) continue;
    if (!out) {
      out = m.dtype;
      continue;
    }
    std::optional<DType> p = promote_pair(*out, m.dtype);
    if (!p)
      return invalid_argument("{}: f64 takes no other float dtype here, got {}", op,
                              shapes_string(in));
    out = p;
  }
  return out;
}

// The C++ reference of int_binary and the division ops, PyTorch's algorithms in double: Python's
// floor division and remainder from the exact fmod (exact for integers too), C's truncation,
// integer pow with PyTorch's rule for negative exponents.
double int_binary_value(IntBinary kind, double x, double y) {
  const double m = std::fmod(x, y);
  const bool signs_differ = (m < 0 && y > 0) || (m > 0 && y < 0);
  switch (kind) {
    case IntBinary::kAdd:
      return x + y;
    case IntBinary::kSub:
      return x - y;
    case IntBinary::kMul:
      return x * y;
    case IntBinary::kFloorDiv: {
      if (y == 0) return x / y;
      const double d = (x - m) / y - (signs_differ ? 1 : 0);
      if (d == 0) return std::copysign(0.0, x / y);
      const double f = std::floor(d);
      return d - f > 0.5 ? f + 1 : f;
    }
    case IntBinary::kTruncDiv:
      return std::trunc(x / y);
    case IntBinary::kRemainder:
      return signs_differ ? m + y : m;
    case IntBinary::kMaximum:
      return std::max(x, y);
    case IntBinary::kMinimum:
      return std::min(x, y);
    case IntBinary::kPow:
      if (y >= 0) return std::pow(x, y);
      return x == 1 ? 1 : x == -1 ? (std::fmod(y, 2) != 0 ? -1 : 1) : 0;
  }
  return 0;
}

bool divides(IntBinary kind) {
  return kind == IntBinary::kFloorDiv || kind == IntBinary::kTruncDiv ||
         kind == IntBinary::kRemainder;
}

// PyTorch raises ZeroDivisionError for an integer division by zero; so do we, before the kernel
// runs: int_zero_flags marks the zeros on the divisor's device and one reduced value comes back
// (the divisor itself is never copied to the host).
Status check_divisor(const std::string& op, const Tensor& divisor) {
  if (divisor.numel() == 0) return ok_status();
  const int64_t n = divisor.numel();
  TESSEL_ASSIGN_OR_RETURN(Tensor flags, empty_like_device(divisor.shape(), DType::kF32, divisor));
  TESSEL_TRY(launch_elementwise("int_zero_flags", {}, {divisor, flags}, {}));
  TESSEL_ASSIGN_OR_RETURN(Tensor any, empty_like_device({1}, DType::kF32, divisor));
  TESSEL_TRY(launch_kernel("reduce_rows", {{"OP", "1"}}, {View{flags, {1, n}, {n, 1}}, any}));
  TESSEL_ASSIGN_OR_RETURN(std::vector<float> max, any.to_vector<float>());
  if (max[0] != 0.0f)
    return invalid_argument("{}: integer division by zero (ZeroDivisionError)", op);
  return ok_status();
}

// float_division's op numbers (kernels/math.tile).
int float_division_kind(IntBinary kind) {
  return kind == IntBinary::kFloorDiv ? 0 : kind == IntBinary::kRemainder ? 1 : 2;
}

// floor_divide, div_trunc, remainder: integer kernels on integers, float_division on floats
// (f32, f16, bf16, computed in f32). Only remainder is differentiable, as in PyTorch:
// d/da = g, d/db = -g floor(a / b).
OpDef integer_division_op(const std::string& name, IntBinary kind) {
  OpDef op;
  op.name = name;
  op.arity = 2;
  op.infer = [name](const std::vector<TensorMeta>& in, const Attrs&) -> Expected<TensorMeta> {
    TESSEL_ASSIGN_OR_RETURN(TensorMeta out, infer_promoted(name, in));
    if (out.dtype == DType::kF64)
      return invalid_argument("{}: takes integers, f32, f16 and bf16, got {}", name,
                              shapes_string(in));
    return out;
  };
  op.forward = [name, kind](const std::vector<Tensor>& in, const Attrs&,
                            const TensorMeta& out) -> Expected<Tensor> {
    if (is_integer(out.dtype)) return int_binary(name, kind, in[0], in[1], out);
    TESSEL_ASSIGN_OR_RETURN(Tensor a0, convert(in[0], out.dtype));
    TESSEL_ASSIGN_OR_RETURN(Tensor b0, convert(in[1], out.dtype));
    TESSEL_ASSIGN_OR_RETURN(Tensor a, a0.expand(out.shape));
    TESSEL_ASSIGN_OR_RETURN(Tensor b, b0.expand(out.shape));
    TESSEL_ASSIGN_OR_RETURN(Tensor z, empty_like_device(out.shape, out.dtype, in[0]));
    TESSEL_TRY(
        launch_elementwise("float_division", {}, {a, b, z}, {int64_t{float_division_kind(kind)}}));
    return z;
  };
  op.reference = [kind](const std::vector<RefTensor>& in, const Attrs&) {
    RefTensor out{reference::broadcast(in[0].shape, in[1].shape), {}};
    out.values.resize(reference::numel(out.shape));
    for (int64_t i = 0; i < static_cast<int64_t>(out.values.size()); ++i) {
      auto index = reference::unravel(i, out.shape);
      out.values[i] =
          int_binary_value(kind, in[0].values[reference::broadcast_source(index, in[0].shape)],
                           in[1].values[reference::broadcast_source(index, in[1].shape)]);
    }
    return out;
  };
  if (kind != IntBinary::kRemainder) {
    op.differentiable = {false, false};
    return op;
  }
  op.save_inputs = {true, true};
  op.backward = [](const BackwardArgs& b) -> Expected<std::vector<Tensor>> {
    std::vector<Tensor> grads(2);
    const Tensor& g = b.grad_output;
    if (b.needs_grad[0]) {
      TESSEL_ASSIGN_OR_RETURN(Tensor da, sum_to(g, b.input_meta[0].shape));
      TESSEL_ASSIGN_OR_RETURN(grads[0], cast(da, b.input_meta[0].dtype));
    }
    if (b.needs_grad[1]) {
      TESSEL_ASSIGN_OR_RETURN(Tensor q, floor_divide(b.inputs[0], b.inputs[1]));
      TESSEL_ASSIGN_OR_RETURN(Tensor gq, mul(g, q));
      TESSEL_ASSIGN_OR_RETURN(Tensor neg_gq, scale(gq, -1.0));
      TESSEL_ASSIGN_OR_RETURN(Tensor db, sum_to(neg_gq, b.input_meta[1].shape));
      TESSEL_ASSIGN_OR_RETURN(grads[1], cast(db, b.input_meta[1].dtype));
    }
    return grads;
  };
  return op;
}

}  // namespace

bool is_integer(DType t) {
  return t == DType::kI8 || t == DType::kU8 || t == DType::kI16 || t == DType::kI32 ||
         t == DType::kI64;
}

Expected<DType> result_type(const std::string& op, const std::vector<TensorMeta>& in) {
  for (const TensorMeta& m : in)
    if (m.dtype == DType::kBool)
      return invalid_argument("{}: takes numbers, not bool tensors; got {}", op, shapes_string(in));
  TESSEL_ASSIGN_OR_RETURN(std::optional<DType> dimensioned, promote_all(op, in, false));
  TESSEL_ASSIGN_OR_RETURN(std::optional<DType> zero_dim, promote_all(op, in, true));
  if (!dimensioned) return *zero_dim;
  if (!zero_dim || kind_of(*zero_dim) <= kind_of(*dimensioned)) return *dimensioned;
  return *zero_dim;
}

Expected<TensorMeta> infer_promoted(const std::string& op, const std::vector<TensorMeta>& in) {
  TESSEL_ASSIGN_OR_RETURN(DType dtype, result_type(op, in));
  Shape shape = in[0].shape;
  for (size_t i = 1; i < in.size(); ++i) {
    Expected<Shape> s = broadcast_shapes(shape, in[i].shape);
    if (!s.ok()) return invalid_argument("{}: shapes {} do not broadcast", op, shapes_string(in));
    shape = *s;
  }
  return TensorMeta{shape, dtype};
}

Expected<Tensor> convert(const Tensor& t, DType to) {
  return cast(t, to);
}

// The op library launches the integer kernels on i64 operands only, converting narrower ones
// first (int_cast) and the result back: values are the same (the kernels compute in i64 and
// narrow at the store either way), and each kernel is compiled once per device instead of once
// per dtype combination, which dominated the ops' test time.
Expected<Tensor> widened(const Tensor& t, const Shape& shape) {
  TESSEL_ASSIGN_OR_RETURN(Tensor w, convert(t, DType::kI64));
  return w.expand(shape);
}

Expected<Tensor> int_binary(const std::string& op, IntBinary kind, const Tensor& a, const Tensor& b,
                            const TensorMeta& out) {
  TESSEL_ASSIGN_OR_RETURN(Tensor x, widened(a, out.shape));
  TESSEL_ASSIGN_OR_RETURN(Tensor y, widened(b, out.shape));
  if (divides(kind)) TESSEL_TRY(check_divisor(op, y));
  TESSEL_ASSIGN_OR_RETURN(Tensor z, empty_like_device(out.shape, DType::kI64, a));
  if (kind == IntBinary::kPow) {
    TESSEL_TRY(launch_elementwise("int_pow", {}, {x, y, z}, {}));
  } else {
    TESSEL_TRY(launch_elementwise("int_binary", {{"U", "i64"}, {"V", "i64"}}, {x, y, z},
                                  {static_cast<int64_t>(kind)}));
  }
  return convert(z, out.dtype);
}

Expected<Tensor> int_unary(int kind, const Tensor& x) {
  TESSEL_ASSIGN_OR_RETURN(Tensor w, widened(x, x.shape()));
  TESSEL_ASSIGN_OR_RETURN(Tensor y, empty_like_device(x.shape(), DType::kI64, x));
  TESSEL_TRY(launch_elementwise("int_unary", {}, {w, y}, {int64_t{kind}}));
  return convert(y, x.dtype());
}

Expected<Tensor> int_clamp(const Tensor& x, int64_t lo, int64_t hi) {
  TESSEL_ASSIGN_OR_RETURN(Tensor w, widened(x, x.shape()));
  TESSEL_ASSIGN_OR_RETURN(Tensor y, empty_like_device(x.shape(), DType::kI64, x));
  TESSEL_TRY(launch_elementwise("int_clamp", {}, {w, y}, {lo, hi}));
  return convert(y, x.dtype());
}

Expected<Tensor> int_compare(int kind, const Tensor& a, const Tensor& b, const TensorMeta& out) {
  TESSEL_ASSIGN_OR_RETURN(Tensor x, widened(a, out.shape));
  TESSEL_ASSIGN_OR_RETURN(Tensor y, widened(b, out.shape));
  TESSEL_ASSIGN_OR_RETURN(Tensor z, empty_like_device(out.shape, DType::kBool, a));
  TESSEL_TRY(launch_elementwise("int_compare", {{"U", "i64"}}, {x, y, z}, {int64_t{kind}}));
  return z;
}

Expected<Tensor> int_where(const Tensor& c, const Tensor& a, const Tensor& b,
                           const TensorMeta& out) {
  TESSEL_ASSIGN_OR_RETURN(Tensor cond, c.expand(out.shape));
  TESSEL_ASSIGN_OR_RETURN(Tensor x, widened(a, out.shape));
  TESSEL_ASSIGN_OR_RETURN(Tensor y, widened(b, out.shape));
  TESSEL_ASSIGN_OR_RETURN(Tensor z, empty_like_device(out.shape, DType::kI64, a));
  TESSEL_TRY(launch_elementwise("int_where", {{"T", "i64"}, {"U", "i64"}, {"V", "i64"}},
                                {cond, x, y, z}, {}));
  return convert(z, out.dtype);
}

void add_integer_ops(std::vector<OpDef>& ops) {
  ops.push_back(integer_division_op("floor_divide", IntBinary::kFloorDiv));
  ops.push_back(integer_division_op("div_trunc", IntBinary::kTruncDiv));
  ops.push_back(integer_division_op("remainder", IntBinary::kRemainder));
}

Expected<Tensor> floor_divide(const Tensor& a, const Tensor& b) {
  return run("floor_divide", {a, b});
}
Expected<Tensor> remainder(const Tensor& a, const Tensor& b) {
  return run("remainder", {a, b});
}
Expected<Tensor> div(const Tensor& a, const Tensor& b, const std::string& rounding_mode) {
  if (rounding_mode.empty()) return div(a, b);
  if (rounding_mode == "floor") return floor_divide(a, b);
  if (rounding_mode == "trunc") return run("div_trunc", {a, b});
  return invalid_argument(
      "div expected rounding_mode to be one of None, 'trunc', or 'floor' but found '{}'",
      rounding_mode);
}

}  // namespace tessel::ops
