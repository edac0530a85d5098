// causal_attention: a GPT block's causal self-attention straight from its fused projection, as
// one op on the fused kernels of ops/flash_attention.h.
//
//   qkv [B, T, 3 C] (q, k, v side by side, each C = H E wide, head h at columns h E ..),
//   lse f32 [B, H, T] (written: the forward's row log-sum-exp, which backward reads)
//   -> y [B, T, C] = softmax(scale q k^T, causal) v per head, heads side by side
//
// as nanoGPT's CausalSelfAttention between c_attn and c_proj (split, view, transpose, SDPA with
// is_causal, transpose back). q, k and v are read from qkv by strides and y is written as
// [B, T, H, E], so neither side has a permute copy, and the gradient of qkv is one tensor
// whose three column blocks the two backward kernels write (no zero-padded slice gradients).
// scale defaults to 1 / sqrt(E). Where the fused kernels do not take the head size (OpenCL and
// CUDA past E = 64), the op runs scaled_dot_product_attention on views instead and leaves lse
// unwritten; its backward then runs that op's backward.
#include <cmath>

#include "ops/flash_attention.h"
#include "ops/kernel_util.h"
#include "ops/ops.h"

namespace tessel::ops {
namespace {

const char* const kName = "causal_attention";

struct QkvShape {
  int64_t b = 0, t = 0, h = 0, e = 0;
  int64_t c() const { return h * e; }
};

Expected<QkvShape> qkv_shape(const std::vector<TensorMeta>& in, const Attrs& a) {
  const Shape& x = in[0].shape;
  const int64_t h = a.get_int("heads", 0);
  if (x.size() != 3 || in[0].dtype != DType::kF32 || h < 1 || x[2] % (3 * h) != 0)
    return invalid_argument("{}: needs f32 qkv [B, T, 3 C] with C a multiple of heads ({}), got {}",
                            kName, h, shapes_string(in));
  QkvShape s{x[0], x[1], h, x[2] / (3 * h)};
  if (in[1].dtype != DType::kF32 || in[1].shape != Shape{s.b, s.h, s.t})
    return invalid_argument("{}: lse must be f32 [B, H, T] = [{}, {}, {}], got {}", kName, s.b, s.h,
                            s.t, shapes_string(in));
  if (a.has("scale") && !std::isfinite(a.get_double("scale", 0)))
    return invalid_argument("{}: scale must be finite", kName);
  return s;
}

double scale_of(const Attrs& a, const QkvShape& s) {
  return a.get_double("scale", 1.0 / std::sqrt(static_cast<double>(s.e)));
}

// Column block `part` (0 q, 1 k, 2 v) of x [B, T, 3 C] (or the whole of y [B, T, C] with
// part 0) as [B, H, T, E].
Expected<View> heads_of(const Tensor& x, const QkvShape& s, int64_t part) {
  TESSEL_ASSIGN_OR_RETURN(Tensor block, x.slice(2, part * s.c(), (part + 1) * s.c()));
  const Strides& st = x.strides();
  return View{block, {s.b, s.h, s.t, s.e}, {st[0], s.e * st[2], st[1], st[2]}};
}

Expected<AttentionHeads> qkv_heads(const Tensor& qkv, const QkvShape& s) {
  AttentionHeads out;
  TESSEL_ASSIGN_OR_RETURN(out.q, heads_of(qkv, s, 0));
  TESSEL_ASSIGN_OR_RETURN(out.k, heads_of(qkv, s, 1));
  TESSEL_ASSIGN_OR_RETURN(out.v, heads_of(qkv, s, 2));
  return out;
}

View lse_view(const Tensor& lse) {
  return View{lse, lse.shape(), lse.strides()};
}

// The fallback's operands: q, k, v as [B, H, T, E] tensors (views where reshape allows) and the
// scaled_dot_product_attention op with its attributes.
struct Fallback {
  std::vector<Tensor> inputs;  // q, k, v, an unread mask
  Attrs attrs;
  const OpDef* op = nullptr;
};

Expected<Fallback> fallback(const Tensor& qkv, const QkvShape& s, const Attrs& a) {
  Fallback f;
  for (int64_t part = 0; part < 3; ++part) {
    TESSEL_ASSIGN_OR_RETURN(Tensor block, qkv.slice(2, part * s.c(), (part + 1) * s.c()));
    TESSEL_ASSIGN_OR_RETURN(Tensor split, reshape(block, {s.b, s.t, s.h, s.e}));
    TESSEL_ASSIGN_OR_RETURN(Tensor heads, permute(split, {0, 2, 1, 3}));
    f.inputs.push_back(heads);
  }
  TESSEL_ASSIGN_OR_RETURN(Tensor mask, Tensor::zeros({1}, DType::kF32, qkv.device()));
  f.inputs.push_back(mask);
  AttentionOptions o;
  o.causal = 1;
  o.scale = scale_of(a, s);
  TESSEL_ASSIGN_OR_RETURN(f.attrs, attention_attrs(o));
  TESSEL_ASSIGN_OR_RETURN(f.op, find_op("scaled_dot_product_attention"));
  return f;
}

// [B, H, T, E] -> [B, T, C] (a copy only where it is not contiguous that way).
Expected<Tensor> merged_heads(const Tensor& y, const QkvShape& s) {
  TESSEL_ASSIGN_OR_RETURN(Tensor t, permute(y, {0, 2, 1, 3}));
  return reshape(t, {s.b, s.t, s.c()});
}

Expected<Tensor> attention_forward(const std::vector<Tensor>& in, const Attrs& a,
                                   const TensorMeta& out) {
  TESSEL_ASSIGN_OR_RETURN(
      QkvShape s, qkv_shape({{in[0].shape(), in[0].dtype()}, {in[1].shape(), in[1].dtype()}}, a));
  if (!flash_attention_supported(in[0].device(), s.e)) {
    TESSEL_ASSIGN_OR_RETURN(Fallback f, fallback(in[0], s, a));
    TESSEL_ASSIGN_OR_RETURN(Tensor y, run(*f.op, f.inputs, f.attrs));
    return merged_heads(y, s);
  }
  TESSEL_ASSIGN_OR_RETURN(Tensor y, empty_like_device(out.shape, DType::kF32, in[0]));
  TESSEL_ASSIGN_OR_RETURN(AttentionHeads heads, qkv_heads(in[0], s));
  TESSEL_ASSIGN_OR_RETURN(View o, heads_of(y, s, 0));
  TESSEL_TRY(flash_attention_forward(heads, o, lse_view(in[1]), scale_of(a, s)));
  return y;
}

Expected<std::vector<Tensor>> attention_backward(const BackwardArgs& b) {
  TESSEL_ASSIGN_OR_RETURN(QkvShape s, qkv_shape(b.input_meta, b.attrs));
  const Tensor& qkv = b.inputs[0];
  std::vector<Tensor> grads(2);
  if (!flash_attention_supported(qkv.device(), s.e)) {
    TESSEL_ASSIGN_OR_RETURN(Fallback f, fallback(qkv, s, b.attrs));
    TESSEL_ASSIGN_OR_RETURN(Tensor dy, reshape(b.grad_output, {s.b, s.t, s.h, s.e}));
    TESSEL_ASSIGN_OR_RETURN(Tensor dy_heads, permute(dy, {0, 2, 1, 3}));
    std::vector<TensorMeta> meta;
    for (const Tensor& t : f.inputs)
      meta.push_back({t.shape(), t.dtype()});
    BackwardArgs args{f.inputs, Tensor(), meta, f.attrs, dy_heads, {true, true, true, false}, {}};
    TESSEL_ASSIGN_OR_RETURN(std::vector<Tensor> parts, f.op->backward(args));
    TESSEL_ASSIGN_OR_RETURN(Tensor dq, merged_heads(parts[0], s));
    TESSEL_ASSIGN_OR_RETURN(Tensor dk, merged_heads(parts[1], s));
    TESSEL_ASSIGN_OR_RETURN(Tensor dv, merged_heads(parts[2], s));
    TESSEL_ASSIGN_OR_RETURN(Tensor dqk, concat(dq, dk, 2));
    TESSEL_ASSIGN_OR_RETURN(grads[0], concat(dqk, dv, 2));
    return grads;
  }
  TESSEL_ASSIGN_OR_RETURN(grads[0], empty_like_device(qkv.shape(), DType::kF32, qkv));
  TESSEL_ASSIGN_OR_RETURN(AttentionHeads heads, qkv_heads(qkv, s));
  TESSEL_ASSIGN_OR_RETURN(AttentionHeads d_heads, qkv_heads(grads[0], s));
  TESSEL_ASSIGN_OR_RETURN(View o, heads_of(b.output, s, 0));
  TESSEL_ASSIGN_OR_RETURN(View d_o, heads_of(b.grad_output, s, 0));
  TESSEL_TRY(flash_attention_backward(heads, o, d_o, lse_view(b.inputs[1]), d_heads,
                                      scale_of(b.attrs, s)));
  return grads;
}

// softmax(scale q k^T, causal) v per (batch, head), in double.
RefTensor attention_reference(const std::vector<RefTensor>& in, const Attrs& a) {
  const QkvShape s = qkv_shape({{in[0].shape, DType::kF32}, {in[1].shape, DType::kF32}}, a).value();
  const double scale = scale_of(a, s);
  const int64_t c = s.c(), row = 3 * c;
  RefTensor out{{s.b, s.t, c}, std::vector<double>(s.b * s.t * c, 0.0)};
  auto at = [&](int64_t b, int64_t t, int64_t part, int64_t h, int64_t e) {
    return in[0].values[(b * s.t + t) * row + part * c + h * s.e + e];
  };
  for (int64_t b = 0; b < s.b; ++b)
    for (int64_t h = 0; h < s.h; ++h)
      for (int64_t i = 0; i < s.t; ++i) {
        std::vector<double> w(i + 1);
        double top = -INFINITY, sum = 0;
        for (int64_t j = 0; j <= i; ++j) {
          double dot = 0;
          for (int64_t e = 0; e < s.e; ++e)
            dot += at(b, i, 0, h, e) * at(b, j, 1, h, e);
          w[j] = scale * dot;
          top = std::max(top, w[j]);
        }
        for (double& x : w)
          sum += x = std::exp(x - top);
        for (int64_t e = 0; e < s.e; ++e) {
          double acc = 0;
          for (int64_t j = 0; j <= i; ++j)
            acc += w[j] / sum * at(b, j, 2, h, e);
          out.values[(b * s.t + i) * c + h * s.e + e] = acc;
        }
      }
  return out;
}

OpDef causal_attention_op() {
  OpDef op;
  op.name = kName;
  op.arity = 2;
  op.attrs = {"heads", "scale"};
  op.infer = [](const std::vector<TensorMeta>& in, const Attrs& a) -> Expected<TensorMeta> {
    TESSEL_ASSIGN_OR_RETURN(QkvShape s, qkv_shape(in, a));
    return TensorMeta{{s.b, s.t, s.c()}, DType::kF32};
  };
  op.forward = attention_forward;
  op.reference = attention_reference;
  op.save_inputs = {true, true};
  op.save_output = true;
  op.differentiable = {true, false};
  op.backward = attention_backward;
  return op;
}

}  // namespace

void add_flash_attention_ops(std::vector<OpDef>& ops) {
  ops.push_back(causal_attention_op());
}

Expected<Tensor> causal_attention(const Tensor& qkv, const Tensor& lse, int64_t heads) {
  return run(kName, {qkv, lse}, Attrs().set("heads", heads));
}

}  // namespace tessel::ops
