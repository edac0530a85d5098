// Element-wise ops: add, sub, mul, div (broadcasting), relu, gelu, gelu_erf, silu, tanh, sigmoid,
// rsqrt, scale. Forward runs the `unary` / `binary` kernels of kernels/elementwise.tile, or
// `activation` (kernels/activation.tile) for what unary lacks, on [D0, D1, D2] views; activation
// gradients run `unary_grad` (kernels/activation.tile).
#include <cmath>

#include "ops/integer_ops.h"
#include "ops/kernel_util.h"
#include "ops/ops.h"
#include "ops/reference_util.h"

namespace tessel::ops {
namespace {

enum BinaryKind { kAdd = 0, kSub = 1, kMul = 2, kDiv = 3 };
// The OP numbers of the `unary` kernel.
// The OP numbers of the `unary` kernel, continued by `activation` (12, 13).
enum UnaryKind {
  kIdentity = 0,
  kRelu = 1,
  kGelu = 2,
  kSigmoid = 3,
  kTanh = 4,
  kRsqrt = 8,
  kSilu = 12,
  kGeluErf = 13
};

// PyTorch's promotion (integer_ops.h); true division of integers gives f32.
Expected<TensorMeta> infer_binary(const std::string& name, BinaryKind kind,
                                  const std::vector<TensorMeta>& in) {
  // True division of two integer types is f32 division, whatever they promote to (u8 with i8).
  std::vector<TensorMeta> m = in;
  const bool integers = is_integer(in[0].dtype) && is_integer(in[1].dtype);
  if (kind == kDiv && integers) m[0].dtype = m[1].dtype = DType::kF32;
  TESSEL_ASSIGN_OR_RETURN(TensorMeta out, infer_promoted(name, m));
  if (kind == kDiv && is_integer(out.dtype)) out.dtype = DType::kF32;
  return out;
}

Expected<Tensor> binary_forward(const std::string& name, BinaryKind kind,
                                const std::vector<Tensor>& in, const TensorMeta& out) {
  if (is_integer(out.dtype)) {
    const IntBinary k = kind == kAdd   ? IntBinary::kAdd
                        : kind == kSub ? IntBinary::kSub
                                       : IntBinary::kMul;
    return int_binary(name, k, in[0], in[1], out);
  }
  TESSEL_ASSIGN_OR_RETURN(Tensor a0, convert(in[0], out.dtype));
  TESSEL_ASSIGN_OR_RETURN(Tensor b0, convert(in[1], out.dtype));
  TESSEL_ASSIGN_OR_RETURN(Tensor a, a0.expand(out.shape));
  TESSEL_ASSIGN_OR_RETURN(Tensor b, b0.expand(out.shape));
  TESSEL_ASSIGN_OR_RETURN(Tensor z, empty_like_device(out.shape, out.dtype, in[0]));
  TESSEL_TRY(launch_elementwise("binary", {{"OP", std::to_string(kind)}}, {a, b, z}, {}));
  return z;
}

RefTensor binary_reference(BinaryKind kind, const std::vector<RefTensor>& in) {
  RefTensor out{reference::broadcast(in[0].shape, in[1].shape), {}};
  out.values.resize(reference::numel(out.shape));
  for (int64_t i = 0; i < static_cast<int64_t>(out.values.size()); ++i) {
    auto index = reference::unravel(i, out.shape);
    double a = in[0].values[reference::broadcast_source(index, in[0].shape)];
    double b = in[1].values[reference::broadcast_source(index, in[1].shape)];
    out.values[i] = kind == kAdd ? a + b : kind == kSub ? a - b : kind == kMul ? a * b : a / b;
  }
  return out;
}

OpDef binary_op(const std::string& name, BinaryKind kind) {
  OpDef op;
  op.name = name;
  op.arity = 2;
  op.infer = [name, kind](const std::vector<TensorMeta>& in, const Attrs&) {
    return infer_binary(name, kind, in);
  };
  op.forward = [name, kind](const std::vector<Tensor>& in, const Attrs&, const TensorMeta& out) {
    return binary_forward(name, kind, in, out);
  };
  op.reference = [kind](const std::vector<RefTensor>& in, const Attrs&) {
    return binary_reference(kind, in);
  };
  op.save_inputs = {kind == kMul || kind == kDiv, kind == kMul || kind == kDiv};
  op.backward = [kind](const BackwardArgs& b) -> Expected<std::vector<Tensor>> {
    const Tensor& g = b.grad_output;
    std::vector<Tensor> grads(2);
    for (int i = 0; i < 2; ++i) {
      if (!b.needs_grad[i]) continue;
      Tensor full = g;
      if (kind == kSub && i == 1) {
        TESSEL_ASSIGN_OR_RETURN(full, scale(g, -1.0));
      } else if (kind == kMul) {
        TESSEL_ASSIGN_OR_RETURN(full, mul(g, b.inputs[1 - i]));
      } else if (kind == kDiv) {
        // d(a/b)/da = 1/b, d(a/b)/db = -a/b^2
        TESSEL_ASSIGN_OR_RETURN(full, div(g, b.inputs[1]));
        if (i == 1) {
          TESSEL_ASSIGN_OR_RETURN(Tensor qa, mul(full, b.inputs[0]));
          TESSEL_ASSIGN_OR_RETURN(Tensor qab, div(qa, b.inputs[1]));
          TESSEL_ASSIGN_OR_RETURN(full, scale(qab, -1.0));
        }
      }
      // Promoted operands (bf16 with f32) differentiate in the result's dtype; each gradient
      // goes back to its input's.
      TESSEL_ASSIGN_OR_RETURN(Tensor summed, sum_to(full, b.input_meta[i].shape));
      TESSEL_ASSIGN_OR_RETURN(grads[i], cast(summed, b.input_meta[i].dtype));
    }
    return grads;
  };
  return op;
}

double unary_reference_value(UnaryKind kind, double x) {
  switch (kind) {
    case kRelu:
      return x > 0 ? x : 0;
    case kGelu:
      return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
    case kSigmoid:
      return 1 / (1 + std::exp(-x));
    case kTanh:
      return std::tanh(x);
    case kRsqrt:
      return 1 / std::sqrt(x);
    case kSilu:
      return x / (1 + std::exp(-x));
    case kGeluErf:
      return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
    case kIdentity:
      return x;
  }
  return x;
}

Expected<TensorMeta> infer_float_unary(const std::string& name, const std::vector<TensorMeta>& in) {
  if (!is_floating_point(in[0].dtype))
    return invalid_argument("{}: needs a floating-point input, got {}", name, shapes_string(in));
  return in[0];
}

Expected<Tensor> unary_forward(UnaryKind kind, const Tensor& x, double factor) {
  TESSEL_ASSIGN_OR_RETURN(Tensor y, empty_like_device(x.shape(), x.dtype(), x));
  if (kind == kSilu || kind == kGeluErf) {
    TESSEL_TRY(launch_elementwise("activation", {{"OP", std::to_string(kind)}}, {x, y}, {}));
  } else {
    TESSEL_TRY(launch_elementwise("unary", {{"OP", std::to_string(kind)}}, {x, y}, {factor}));
  }
  return y;
}

// The activations: the gradient is computed from the input (gelu, silu) or the output
// (relu, sigmoid, tanh, rsqrt), whichever the derivative needs; only that one is saved. relu's
// derivative is as well the output's sign (y > 0 exactly where x > 0), and the output is what the
// next layer keeps anyway, so its input (a gemm's or batch norm's output) is freed after the
// forward, and graph fusion can make relu that producer's epilogue (graph/fusion.h).
OpDef activation_op(const std::string& name, UnaryKind kind) {
  OpDef op;
  op.name = name;
  op.infer = [name](const std::vector<TensorMeta>& in, const Attrs&) {
    return infer_float_unary(name, in);
  };
  op.forward = [kind](const std::vector<Tensor>& in, const Attrs&, const TensorMeta&) {
    return unary_forward(kind, in[0], 1.0);
  };
  op.reference = [kind](const std::vector<RefTensor>& in, const Attrs&) {
    RefTensor out = in[0];
    for (double& v : out.values)
      v = unary_reference_value(kind, v);
    return out;
  };
  const bool from_output = kind == kRelu || kind == kSigmoid || kind == kTanh || kind == kRsqrt;
  op.save_inputs = {!from_output};
  op.save_output = from_output;
  op.backward = [kind, from_output](const BackwardArgs& b) -> Expected<std::vector<Tensor>> {
    const Tensor& v = from_output ? b.output : b.inputs[0];
    TESSEL_ASSIGN_OR_RETURN(Tensor dx, empty_like_device(v.shape(), v.dtype(), v));
    TESSEL_TRY(launch_elementwise("unary_grad", {{"OP", std::to_string(kind)}},
                                  {v, b.grad_output, dx}, {}));
    return std::vector<Tensor>{dx};
  };
  return op;
}

OpDef scale_op() {
  OpDef op;
  op.name = "scale";
  op.attrs = {"factor"};
  op.infer = [](const std::vector<TensorMeta>& in, const Attrs&) {
    return infer_float_unary("scale", in);
  };
  op.forward = [](const std::vector<Tensor>& in, const Attrs& a, const TensorMeta&) {
    return unary_forward(kIdentity, in[0], a.get_double("factor", 1.0));
  };
  op.reference = [](const std::vector<RefTensor>& in, const Attrs& a) {
    RefTensor out = in[0];
    for (double& v : out.values)
      v *= a.get_double("factor", 1.0);
    return out;
  };
  op.backward = [](const BackwardArgs& b) -> Expected<std::vector<Tensor>> {
    TESSEL_ASSIGN_OR_RETURN(Tensor dx, scale(b.grad_output, b.attrs.get_double("factor", 1.0)));
    return std::vector<Tensor>{dx};
  };
  return op;
}

// cast among f32, f16 and bf16 (round to nearest even; the `cast` kernel) and integers
// (kernels/integer.tile: int_cast keeps the low bits, int_to_float rounds to nearest,
// float_to_int rounds toward zero). The gradient is cast back to the input's dtype.
bool is_castable(DType t) {
  return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16 || is_integer(t);
}

Expected<Tensor> cast_forward(const Tensor& x, DType to) {
  if (x.dtype() == to) return x;
  // Integers reach floats through i64, so that int_to_float has one specialisation per float
  // type (the value is exact in i64 either way).
  if (is_integer(x.dtype()) && !is_integer(to) && x.dtype() != DType::kI64) {
    TESSEL_ASSIGN_OR_RETURN(Tensor wide, cast_forward(x, DType::kI64));
    return cast_forward(wide, to);
  }
  TESSEL_ASSIGN_OR_RETURN(Tensor y, empty_like_device(x.shape(), to, x));
  const bool from_int = is_integer(x.dtype()), to_int = is_integer(to);
  const char* kernel = from_int && to_int ? "int_cast"
                       : from_int         ? "int_to_float"
                       : to_int           ? "float_to_int"
                                          : "cast";
  TESSEL_TRY(launch_elementwise(kernel, {{"U", dtype_name(to)}}, {x, y}, {}));
  return y;
}

OpDef cast_op() {
  OpDef op;
  op.name = "cast";
  op.attrs = {"dtype"};
  op.infer = [](const std::vector<TensorMeta>& in, const Attrs& a) -> Expected<TensorMeta> {
    int64_t code = a.get_int("dtype", static_cast<int64_t>(DType::kF32));
    bool valid = code >= 0 && code < kDTypeCount && is_castable(static_cast<DType>(code));
    if (!valid || !is_castable(in[0].dtype))
      return invalid_argument(
          "cast: converts among f32, f16, bf16 and the integer types; got {} to dtype code {}",
          shapes_string(in), code);
    return TensorMeta{in[0].shape, static_cast<DType>(code)};
  };
  op.forward = [](const std::vector<Tensor>& in, const Attrs&, const TensorMeta& out) {
    return cast_forward(in[0], out.dtype);
  };
  op.reference = [](const std::vector<RefTensor>& in, const Attrs& a) {
    DType to = static_cast<DType>(a.get_int("dtype", static_cast<int64_t>(DType::kF32)));
    RefTensor out = in[0];
    for (double& v : out.values) {
      float f = static_cast<float>(v);
      v = to == DType::kBF16  ? static_cast<float>(BFloat16(f))
          : to == DType::kF16 ? static_cast<float>(Half(f))
          : is_integer(to)    ? std::trunc(v)
                              : f;
    }
    return out;
  };
  op.backward = [](const BackwardArgs& b) -> Expected<std::vector<Tensor>> {
    TESSEL_ASSIGN_OR_RETURN(Tensor dx, cast_forward(b.grad_output, b.input_meta[0].dtype));
    return std::vector<Tensor>{dx};
  };
  return op;
}

}  // namespace

void add_elementwise_ops(std::vector<OpDef>& ops) {
  ops.push_back(cast_op());
  ops.push_back(binary_op("add", kAdd));
  ops.push_back(binary_op("sub", kSub));
  ops.push_back(binary_op("mul", kMul));
  ops.push_back(binary_op("div", kDiv));
  ops.push_back(activation_op("relu", kRelu));
  ops.push_back(activation_op("gelu", kGelu));
  ops.push_back(activation_op("tanh", kTanh));
  ops.push_back(activation_op("sigmoid", kSigmoid));
  ops.push_back(activation_op("silu", kSilu));
  ops.push_back(activation_op("gelu_erf", kGeluErf));
  ops.push_back(activation_op("rsqrt", kRsqrt));
  ops.push_back(scale_op());
}

Expected<Tensor> cast(const Tensor& x, DType dtype) {
  if (x.dtype() == dtype) return x;
  return run("cast", {x}, Attrs().set("dtype", static_cast<int64_t>(dtype)));
}
Expected<Tensor> add(const Tensor& a, const Tensor& b) {
  return run("add", {a, b});
}
Expected<Tensor> sub(const Tensor& a, const Tensor& b) {
  return run("sub", {a, b});
}
Expected<Tensor> mul(const Tensor& a, const Tensor& b) {
  return run("mul", {a, b});
}
Expected<Tensor> div(const Tensor& a, const Tensor& b) {
  return run("div", {a, b});
}
Expected<Tensor> relu(const Tensor& x) {
  return run("relu", {x});
}
Expected<Tensor> gelu(const Tensor& x) {
  return run("gelu", {x});
}
Expected<Tensor> tanh(const Tensor& x) {
  return run("tanh", {x});
}
Expected<Tensor> sigmoid(const Tensor& x) {
  return run("sigmoid", {x});
}
Expected<Tensor> silu(const Tensor& x) {
  return run("silu", {x});
}
Expected<Tensor> gelu_erf(const Tensor& x) {
  return run("gelu_erf", {x});
}
Expected<Tensor> rsqrt(const Tensor& x) {
  return run("rsqrt", {x});
}
Expected<Tensor> scale(const Tensor& x, double factor) {
  return run("scale", {x}, Attrs().set("factor", factor));
}

Status add_into(const Tensor& dst, const Tensor& src) {
  if (!dst.defined() || !src.defined() || dst.shape() != src.shape() ||
      dst.dtype() != src.dtype() || !is_floating_point(dst.dtype()) || !dst.is_contiguous() ||
      dst.device() != src.device() || !kernel_writable_in_place(dst))
    return invalid_argument(
        "add_into: needs a contiguous destination and a source of its shape, "
        "dtype and device, got {} and {}",
        tensor_summary(dst), tensor_summary(src));
  if (dst.numel() == 0) return ok_status();
  // Element i reads dst[i] and src[i] and writes dst[i] only, so the output may alias an input.
  return launch_elementwise("binary", {{"OP", std::to_string(kAdd)}}, {dst, src, dst}, {});
}

}  // namespace tessel::ops
