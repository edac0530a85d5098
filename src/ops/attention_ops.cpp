// scaled_dot_product_attention as one op, with torch.nn.functional.scaled_dot_product_attention's
// semantics: q [..., Hq, L, E], k [..., Hkv, S, E], v [..., Hkv, S, Ev] -> [..., Hq, L, Ev],
// softmax(scale q k^T + mask) v with scale 1 / sqrt(E) by default. The mask is boolean (true
// keeps a key) or additive (f32), broadcast to [..., Hq, L, S]; `causal` hides the keys after
// each query aligned at the top left (1, PyTorch's is_causal) or at the bottom right (2,
// torch.nn.attention.bias.causal_lower_right). A query whose every key is hidden gets zeros, as
// in PyTorch 2, and no gradient. Grouped-query attention (enable_gqa: Hq a multiple of Hkv) runs
// without repeating k and v: q's G = Hq / Hkv heads of one k/v head are one block of G L query
// rows (a view of q), so one batched gemm per product serves the group.
// Forward: scores = q k^T (gemm), then kernels/attention.tile's attention_softmax (scale, mask,
// causal, softmax in one kernel), then P v. Backward recomputes P (nothing of size L S is kept
// between the passes) and runs dV = P^T dO, dP = dO v^T, dS = P (dP - rowsum(dP P))
// (softmax_grad), dQ = scale dS k, dK = scale dS^T q; a float mask's gradient is dS summed to
// its shape (a bool mask has none). dropout_p drops attention weights after the softmax, as
// PyTorch: the kept ones are scaled by 1 / (1 - p), p = 1 gives zeros, and the mask is the
// dropout op's hash of (seed, position in [..., Hq, L, S]), so backward makes the same mask
// again: dV = D(P)^T dO and dP = D(dO v^T).
// Causal attention without a mask or dropout, with L = S, E = Ev and one k/v head per query
// head, runs on the fused kernels instead (ops/flash_attention.h: no L x S matrix in memory;
// backward reruns the fused forward for the row log-sum-exp, since the op keeps only its inputs).
#include <cmath>

#include "ops/flash_attention.h"
#include "ops/kernel_util.h"
#include "ops/ops.h"
#include "ops/reference_util.h"

namespace tessel::ops {
namespace {

const char* const kName = "scaled_dot_product_attention";

// Mask kinds (the "mask" attribute): the mask input is unread without one.
enum MaskKind : int64_t { kNoMask = 0, kBoolMask = 1, kFloatMask = 2 };

struct AttentionShape {
  Shape batch;  // q's dimensions before [L, E], its head dimension (Hq) last when rank >= 3
  int64_t l = 0, s = 0, e = 0, ev = 0, hq = 1, hkv = 1;
  int64_t groups() const { return hq / hkv; }
  // Shapes of the grouped problem: [..., Hkv, G L, *].
  Shape grouped(int64_t rows, int64_t cols) const {
    Shape out = batch;
    if (!out.empty()) out.back() = hkv;
    out.push_back(rows);
    out.push_back(cols);
    return out;
  }
  Shape full_scores() const {
    Shape out = batch;
    out.push_back(l);
    out.push_back(s);
    return out;
  }
};

bool broadcasts_to(const Shape& from, const Shape& to) {
  if (from.size() > to.size()) return false;
  for (size_t i = 0; i < from.size(); ++i) {
    const int64_t f = from[from.size() - 1 - i], t = to[to.size() - 1 - i];
    if (f != t && f != 1) return false;
  }
  return true;
}

Expected<AttentionShape> attention_shape(const std::vector<TensorMeta>& in, const Attrs& a) {
  const Shape &q = in[0].shape, &k = in[1].shape, &v = in[2].shape;
  const bool gqa = a.get_int("enable_gqa", 0) != 0;
  auto bad = [&](const std::string& why) {
    return invalid_argument(
        "{}: {}; needs f32 q [..., L, E], k [..., S, E], v [..., S, Ev], got {}", kName, why,
        shapes_string(in));
  };
  if (q.size() < 2 || k.size() != q.size() || v.size() != q.size()) return bad("ranks differ");
  for (int i = 0; i < 3; ++i)
    if (in[i].dtype != DType::kF32) return bad("q, k and v must be f32");
  const size_t r = q.size();
  AttentionShape s;
  s.batch.assign(q.begin(), q.end() - 2);
  s.l = q[r - 2];
  s.e = q[r - 1];
  s.s = k[r - 2];
  s.ev = v[r - 1];
  if (k[r - 1] != s.e) return bad("q and k have different E");
  if (v[r - 2] != s.s) return bad("k and v have different S");
  for (size_t i = 0; i + 2 < r; ++i) {
    const bool head = i + 3 == r;
    if (k[i] != v[i]) return bad("k and v have different batch dimensions");
    if (k[i] == q[i]) continue;
    if (!(head && gqa && k[i] > 0 && q[i] % k[i] == 0))
      return bad(gqa ? "q's heads must be a multiple of k's, other dimensions equal"
                     : "q, k, v batch dimensions differ (enable_gqa allows fewer k/v heads)");
  }
  if (r >= 3) {
    s.hq = q[r - 3];
    s.hkv = k[r - 3];
  }
  const int64_t mask = a.get_int("mask", kNoMask), causal = a.get_int("causal", 0);
  if (causal < 0 || causal > 2)
    return invalid_argument("{}: causal must be 0 (none), 1 (top left) or 2 (bottom right), got {}",
                            kName, causal);
  if (causal != 0 && mask != kNoMask)
    return invalid_argument("{}: takes an attn_mask or is_causal, not both (as PyTorch)", kName);
  const DType want = mask == kBoolMask ? DType::kBool : DType::kF32;
  if (mask != kNoMask && (in[3].dtype != want || !broadcasts_to(in[3].shape, s.full_scores())))
    return invalid_argument("{}: attn_mask must be {} and broadcast to {}, got {}", kName,
                            dtype_name(want), shape_string(s.full_scores()), shapes_string(in));
  if (a.has("scale") && !std::isfinite(a.get_double("scale", 0)))
    return invalid_argument("{}: scale must be finite", kName);
  const double p = a.get_double("dropout_p", 0);
  if (!(p >= 0 && p <= 1))
    return invalid_argument("{}: dropout probability has to be between 0 and 1, but got {}", kName,
                            p);
  if (a.get_int("seed", 0) < 0)
    return invalid_argument("{}: seed {} is negative", kName, a.get_int("seed", 0));
  return s;
}

double scale_of(const Attrs& a, const AttentionShape& s) {
  return a.get_double("scale", 1.0 / std::sqrt(static_cast<double>(s.e)));
}

// x [..., H, rows, cols] as [..., Hkv, G rows, cols] (a view when x is contiguous there).
Expected<Tensor> grouped(const Tensor& x, const AttentionShape& s) {
  if (s.groups() == 1) return x;
  return reshape(x, s.grouped(s.groups() * x.size(-2), x.size(-1)));
}

Expected<Tensor> transposed(const Tensor& x) {
  std::vector<int64_t> order(x.rank());
  for (size_t i = 0; i < order.size(); ++i)
    order[i] = static_cast<int64_t>(i);
  std::swap(order[order.size() - 1], order[order.size() - 2]);
  return permute(x, order);
}

// A tensor of the grouped scores' shape [..., Hkv, G L, S] as the kernels' [Z, M, N] (its batch
// dimensions merged, else copied contiguous first).
Expected<View> as_blocks(const Tensor& t) {
  Tensor c = t;
  const size_t r = t.rank();
  bool merges = true;
  for (size_t i = 0; i + 3 < r; ++i)
    merges = merges && (t.size(i) == 1 || t.strides()[i] == t.strides()[i + 1] * t.size(i + 1));
  if (!merges) {
    TESSEL_ASSIGN_OR_RETURN(c, contiguous_on_device(t));
  }
  const int64_t z = r == 2 ? 1 : c.numel() / (c.size(-1) * c.size(-2));
  const int64_t zs = r == 2 ? 0 : c.strides()[r - 3];
  return View{c, {z, c.size(-2), c.size(-1)}, {zs, c.strides()[r - 2], c.strides()[r - 1]}};
}

// The additive mask over the grouped scores, as [Z, M, N]: 0 / -inf for a boolean mask, the
// mask itself broadcast, or a stride-0 zero without one.
Expected<View> additive_mask(const Tensor& mask, int64_t kind, const AttentionShape& s,
                             const Tensor& like) {
  const Shape scores = s.grouped(s.groups() * s.l, s.s);
  if (kind == kNoMask) {
    TESSEL_ASSIGN_OR_RETURN(Tensor zero, Tensor::zeros({1}, DType::kF32, like.device()));
    const int64_t z = reference::numel(scores) / (s.groups() * s.l * s.s);
    return View{zero, {z, s.groups() * s.l, s.s}, {0, 0, 0}};
  }
  Tensor m = mask;
  if (kind == kBoolMask) {
    TESSEL_ASSIGN_OR_RETURN(Tensor zero, Tensor::zeros({1}, DType::kF32, like.device()));
    TESSEL_ASSIGN_OR_RETURN(Tensor hidden,
                            Tensor::full({1}, -INFINITY, DType::kF32, like.device()));
    TESSEL_ASSIGN_OR_RETURN(m, where(mask, zero, hidden));
  }
  TESSEL_ASSIGN_OR_RETURN(Tensor full, m.expand(s.full_scores()));
  TESSEL_ASSIGN_OR_RETURN(Tensor g, grouped(full, s));
  return as_blocks(g);
}

// P [..., Hkv, G L, S]: the attention weights.
Expected<Tensor> attention_weights(const Tensor& q, const Tensor& k, const Tensor& mask,
                                   const Attrs& a, const AttentionShape& s) {
  TESSEL_ASSIGN_OR_RETURN(Tensor qg, grouped(q, s));
  TESSEL_ASSIGN_OR_RETURN(Tensor kt, transposed(k));
  TESSEL_ASSIGN_OR_RETURN(Tensor scores, matmul(qg, kt));
  TESSEL_ASSIGN_OR_RETURN(View x, as_blocks(scores));
  TESSEL_ASSIGN_OR_RETURN(View am, additive_mask(mask, a.get_int("mask", kNoMask), s, q));
  TESSEL_ASSIGN_OR_RETURN(Tensor p, empty_like_device(scores.shape(), DType::kF32, q));
  TESSEL_ASSIGN_OR_RETURN(View pv, as_blocks(p));
  const int64_t causal = a.get_int("causal", 0);
  const int64_t offset = causal == 2 ? s.s - s.l : 0;
  if (p.numel() == 0) return p;
  TESSEL_TRY(launch_kernel("attention_softmax", {{"CAUSAL", causal != 0 ? "1" : "0"}},
                           {x, am, pv, scale_of(a, s), std::max<int64_t>(s.l, 1), offset}));
  return p;
}

// x (attention weights or their gradient, contiguous [..., Hkv, G L, S], which is [..., Hq, L, S]
// in memory) with the attention dropout applied: the dropout op's mask for the call's seed.
Expected<Tensor> dropped(const Tensor& x, const Attrs& a) {
  const double p = a.get_double("dropout_p", 0);
  if (p == 0) return x;
  if (p >= 1) return Tensor::zeros(x.shape(), x.dtype(), x.device());
  return dropout(x, p, a.get_int("seed", 0));
}

Expected<Tensor> ungrouped(const Tensor& x, const AttentionShape& s, int64_t cols) {
  if (s.groups() == 1) return x;
  Shape out = s.batch;
  out.push_back(s.l);
  out.push_back(cols);
  return reshape(x, out);
}

// Causal attention without a mask, one k/v head per query head and L = S = the fused kernels'
// case (ops/flash_attention.h): q, k, v as [B, H, L, E] views, or nullopt.
std::optional<AttentionHeads> fused_case(const Tensor& q, const Tensor& k, const Tensor& v,
                                         const Attrs& a, const AttentionShape& s) {
  const int64_t causal = a.get_int("causal", 0);
  if (a.get_int("mask", kNoMask) != kNoMask || causal == 0 || s.l != s.s || s.e != s.ev ||
      s.groups() != 1 || a.get_double("dropout_p", 0) != 0 ||
      !flash_attention_supported(q.device(), s.e))
    return std::nullopt;
  std::optional<View> qv = heads_view(q), kv = heads_view(k), vv = heads_view(v);
  if (!qv || !kv || !vv) return std::nullopt;
  return AttentionHeads{*qv, *kv, *vv};
}

// The fused forward: the output [..., L, E] and the rows' log-sum-exp [B, H, L].
Expected<std::pair<Tensor, Tensor>> fused_forward(const AttentionHeads& heads, const Tensor& q,
                                                  double scale) {
  TESSEL_ASSIGN_OR_RETURN(Tensor o, empty_like_device(q.shape(), DType::kF32, q));
  const Shape& hs = heads.q.shape;
  TESSEL_ASSIGN_OR_RETURN(Tensor lse, empty_like_device({hs[0], hs[1], hs[2]}, DType::kF32, q));
  const View lv{lse, lse.shape(), lse.strides()};
  TESSEL_TRY(flash_attention_forward(heads, *heads_view(o), lv, scale));
  return std::pair<Tensor, Tensor>{o, lse};
}

Expected<std::vector<Tensor>> fused_backward(const AttentionHeads& heads, const BackwardArgs& b,
                                             double scale) {
  const Tensor &q = b.inputs[0], &k = b.inputs[1], &v = b.inputs[2];
  TESSEL_ASSIGN_OR_RETURN(auto forward, fused_forward(heads, q, scale));
  Tensor d_out = b.grad_output;
  if (!heads_view(d_out)) {
    TESSEL_ASSIGN_OR_RETURN(d_out, contiguous_on_device(d_out));
  }
  std::vector<Tensor> grads(4);
  TESSEL_ASSIGN_OR_RETURN(grads[0], empty_like_device(q.shape(), DType::kF32, q));
  TESSEL_ASSIGN_OR_RETURN(grads[1], empty_like_device(k.shape(), DType::kF32, k));
  TESSEL_ASSIGN_OR_RETURN(grads[2], empty_like_device(v.shape(), DType::kF32, v));
  const Tensor& lse = forward.second;
  TESSEL_TRY(flash_attention_backward(
      heads, *heads_view(forward.first), *heads_view(d_out), View{lse, lse.shape(), lse.strides()},
      {*heads_view(grads[0]), *heads_view(grads[1]), *heads_view(grads[2])}, scale));
  if (b.needs_grad[3]) {  // the unread stand-in for a mask: its gradient is 0
    TESSEL_ASSIGN_OR_RETURN(
        grads[3], Tensor::zeros(b.input_meta[3].shape, b.input_meta[3].dtype, q.device()));
  }
  return grads;
}

Expected<std::vector<Tensor>> attention_backward(const BackwardArgs& b) {
  std::vector<TensorMeta> meta = b.input_meta;
  TESSEL_ASSIGN_OR_RETURN(AttentionShape s, attention_shape(meta, b.attrs));
  const Tensor &q = b.inputs[0], &k = b.inputs[1], &v = b.inputs[2];
  const double scale = scale_of(b.attrs, s);
  if (auto heads = fused_case(q, k, v, b.attrs, s)) return fused_backward(*heads, b, scale);
  TESSEL_ASSIGN_OR_RETURN(Tensor p, attention_weights(q, k, b.inputs[3], b.attrs, s));
  TESSEL_ASSIGN_OR_RETURN(Tensor dout, grouped(b.grad_output, s));
  const int64_t mask_kind = b.attrs.get_int("mask", kNoMask);
  std::vector<Tensor> grads(4);
  if (b.needs_grad[3] && mask_kind == kNoMask) {  // the unread stand-in: its gradient is 0
    TESSEL_ASSIGN_OR_RETURN(grads[3], Tensor::zeros(meta[3].shape, meta[3].dtype, q.device()));
  }
  if (b.needs_grad[2]) {
    TESSEL_ASSIGN_OR_RETURN(Tensor pd, dropped(p, b.attrs));
    TESSEL_ASSIGN_OR_RETURN(Tensor pt, transposed(pd));
    TESSEL_ASSIGN_OR_RETURN(grads[2], matmul(pt, dout));
  }
  const bool mask_grad = b.needs_grad[3] && mask_kind == kFloatMask;
  if (!b.needs_grad[0] && !b.needs_grad[1] && !mask_grad) return grads;
  TESSEL_ASSIGN_OR_RETURN(Tensor vt, transposed(v));
  TESSEL_ASSIGN_OR_RETURN(Tensor dpd, matmul(dout, vt));
  TESSEL_ASSIGN_OR_RETURN(Tensor dp, dropped(dpd, b.attrs));
  TESSEL_ASSIGN_OR_RETURN(Tensor ds, empty_like_device(p.shape(), DType::kF32, p));
  if (ds.numel() > 0) {
    const int64_t n = s.s, rows = ds.numel() / std::max<int64_t>(n, 1);
    auto rows_of = [&](const Tensor& t) { return View{t, {rows, n}, {n, 1}}; };
    TESSEL_TRY(
        launch_kernel("softmax_grad", {{"LOG", "0"}}, {rows_of(p), rows_of(dp), rows_of(ds)}));
  }
  if (mask_grad) {  // d(scores + mask) / d mask = 1: dS over [..., Hq, L, S], summed to the mask
    TESSEL_ASSIGN_OR_RETURN(Tensor full, ungrouped(ds, s, s.s));
    TESSEL_ASSIGN_OR_RETURN(grads[3], sum_to(full, meta[3].shape));
  }
  if (b.needs_grad[0]) {
    TESSEL_ASSIGN_OR_RETURN(Tensor dq, matmul(ds, k));
    TESSEL_ASSIGN_OR_RETURN(Tensor dq_scaled, ops::scale(dq, scale));
    TESSEL_ASSIGN_OR_RETURN(grads[0], ungrouped(dq_scaled, s, s.e));
  }
  if (b.needs_grad[1]) {
    TESSEL_ASSIGN_OR_RETURN(Tensor qg, grouped(q, s));
    TESSEL_ASSIGN_OR_RETURN(Tensor dst, transposed(ds));
    TESSEL_ASSIGN_OR_RETURN(Tensor dk, matmul(dst, qg));
    TESSEL_ASSIGN_OR_RETURN(grads[1], ops::scale(dk, scale));
  }
  return grads;
}

// softmax(scale q k^T + mask) v in double, one (batch, head, query) row at a time.
RefTensor attention_reference(const std::vector<RefTensor>& in, const Attrs& a) {
  std::vector<TensorMeta> meta;
  for (const RefTensor& t : in)
    meta.push_back({t.shape, DType::kF32});
  const int64_t kind = a.get_int("mask", kNoMask), causal = a.get_int("causal", 0);
  if (kind == kBoolMask) meta[3].dtype = DType::kBool;
  const AttentionShape s = attention_shape(meta, a).value();
  const double scale = scale_of(a, s);
  const double p = a.get_double("dropout_p", 0);
  const int64_t seed = a.get_int("seed", 0);
  const auto threshold = static_cast<int64_t>(std::ceil(p * 2147483647.0));
  const int64_t outer = reference::numel(s.batch) / s.hq, g = s.groups();
  Shape out_shape = s.batch;
  out_shape.push_back(s.l);
  out_shape.push_back(s.ev);
  RefTensor out{out_shape, {}};
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t h = 0; h < s.hq; ++h) {
      const int64_t qb = o * s.hq + h, kb = o * s.hkv + h / g;
      for (int64_t i = 0; i < s.l; ++i) {
        std::vector<double> w(s.s, -INFINITY);
        double mx = -INFINITY;
        for (int64_t j = 0; j < s.s; ++j) {
          const int64_t limit = causal == 2 ? i + s.s - s.l : i;
          if (causal != 0 && j > limit) continue;
          double dot = 0;
          for (int64_t e = 0; e < s.e; ++e)
            dot += in[0].values[(qb * s.l + i) * s.e + e] * in[1].values[(kb * s.s + j) * s.e + e];
          double add = 0;
          if (kind != kNoMask) {
            std::vector<int64_t> index = reference::unravel(qb, s.batch);
            index.push_back(i);
            index.push_back(j);
            const double m = in[3].values[reference::broadcast_source(index, in[3].shape)];
            add = kind == kBoolMask ? (m != 0 ? 0.0 : -INFINITY) : m;
          }
          w[j] = scale * dot + add;
          mx = std::max(mx, w[j]);
        }
        double sum = 0;
        for (double& x : w) {
          x = x == -INFINITY ? 0.0 : std::exp(x - mx);
          sum += x;
        }
        for (int64_t j = 0; j < s.s && p > 0; ++j) {
          const bool keep =
              p < 1 && reference::dropout_keeps((qb * s.l + i) * s.s + j, seed, threshold);
          w[j] = keep ? w[j] / (1 - p) : 0.0;
        }
        for (int64_t c = 0; c < s.ev; ++c) {
          double acc = 0;
          for (int64_t j = 0; j < s.s && sum > 0; ++j)
            acc += w[j] / sum * in[2].values[(kb * s.s + j) * s.ev + c];
          out.values.push_back(acc);
        }
      }
    }
  return out;
}

OpDef attention_op() {
  OpDef op;
  op.name = kName;
  op.arity = 4;
  op.attrs = {"mask", "causal", "scale", "enable_gqa", "dropout_p", "seed"};
  op.infer = [](const std::vector<TensorMeta>& in, const Attrs& a) -> Expected<TensorMeta> {
    TESSEL_ASSIGN_OR_RETURN(AttentionShape s, attention_shape(in, a));
    Shape out = s.batch;
    out.push_back(s.l);
    out.push_back(s.ev);
    return TensorMeta{out, DType::kF32};
  };
  op.forward = [](const std::vector<Tensor>& in, const Attrs& a,
                  const TensorMeta& out) -> Expected<Tensor> {
    std::vector<TensorMeta> meta;
    for (const Tensor& t : in)
      meta.push_back({t.shape(), t.dtype()});
    TESSEL_ASSIGN_OR_RETURN(AttentionShape s, attention_shape(meta, a));
    if (auto heads = fused_case(in[0], in[1], in[2], a, s)) {
      TESSEL_ASSIGN_OR_RETURN(auto fused, fused_forward(*heads, in[0], scale_of(a, s)));
      return fused.first;
    }
    TESSEL_ASSIGN_OR_RETURN(Tensor p, attention_weights(in[0], in[1], in[3], a, s));
    TESSEL_ASSIGN_OR_RETURN(Tensor pd, dropped(p, a));
    TESSEL_ASSIGN_OR_RETURN(Tensor y, matmul(pd, in[2]));
    TESSEL_ASSIGN_OR_RETURN(Tensor r, ungrouped(y, s, s.ev));
    if (r.shape() != out.shape) return internal_error("{}: output shape", kName);
    return r;
  };
  op.reference = attention_reference;
  op.save_inputs = {true, true, true, true};
  op.differentiable = {true, true, true, true};  // the mask when it is f32
  op.backward = attention_backward;
  return op;
}

}  // namespace

void add_attention_ops(std::vector<OpDef>& ops) {
  ops.push_back(attention_op());
  add_flash_attention_ops(ops);
}

Expected<Attrs> attention_attrs(const AttentionOptions& o) {
  if (o.dropout_p != 0.0)
    return invalid_argument("{}: dropout_p = {} needs a seed (the overloads with one)", kName,
                            o.dropout_p);
  return attention_attrs(o, 0);
}

Expected<Attrs> attention_attrs(const AttentionOptions& o, int64_t seed) {
  Attrs a = Attrs().set("causal", o.causal).set("enable_gqa", o.enable_gqa ? 1 : 0);
  if (o.dropout_p != 0.0) a.set("dropout_p", o.dropout_p).set("seed", seed);
  if (o.scale) a.set("scale", *o.scale);
  const Tensor& m = o.attn_mask;
  a.set("mask", !m.defined() ? kNoMask : m.dtype() == DType::kBool ? kBoolMask : kFloatMask);
  return a;
}

Expected<Tensor> scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                              const AttentionOptions& o) {
  if (o.dropout_p != 0.0) return attention_attrs(o).status();
  return scaled_dot_product_attention(q, k, v, o, 0);
}

Expected<Tensor> scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                              const AttentionOptions& o, int64_t seed) {
  TESSEL_ASSIGN_OR_RETURN(Attrs a, attention_attrs(o, seed));
  Tensor mask = o.attn_mask;
  if (!mask.defined()) {
    TESSEL_ASSIGN_OR_RETURN(mask, Tensor::zeros({1}, DType::kF32, q.device()));
  }
  return run(kName, {q, k, v, mask}, a);
}

}  // namespace tessel::ops
