// Ops over the last axis and lookups: softmax, log_softmax, cross_entropy (fused with
// log-softmax), layer_norm, embedding. Rows are [M, N] views of [..., N] tensors.
// Kernels: softmax.tile, softmax_grad.tile, cross_entropy.tile, layernorm.tile,
// layernorm_grad.tile, embedding.tile.
#include <cmath>

#include "ops/kernel_util.h"
#include "ops/ops.h"
#include "ops/reference_util.h"

namespace tessel::ops {
namespace {

Expected<TensorMeta> infer_rows(const std::string& op, const std::vector<TensorMeta>& in) {
  if (in[0].shape.empty() || in[0].dtype != DType::kF32)
    return invalid_argument("{}: needs an f32 tensor of rank >= 1, got {}", op, shapes_string(in));
  return in[0];
}

// Runs a row kernel from x ([..., N]) to a fresh output of the same shape.
// Column tiles for row kernels on the CPU: rows of at most 64 or 128 elements (attention over
// T = 64, GPT widths) in tiles of that width, since the kernels' 256-column tiles would spend most
// of their work (exp of padding, masked sums) on columns past the row. Other devices keep theirs.
KernelParams row_tile_params(const Tensor& x, int64_t n, KernelParams params = {}) {
  if (x.device()->kind() != DeviceKind::kCpu) return params;
  if (n <= 64) {
    params["BC"] = "64";
  } else if (n <= 128) {
    params["BC"] = "128";
  }
  return params;
}

Expected<Tensor> row_kernel(const std::string& kernel, KernelParams params,
                            std::vector<Tensor> inputs) {
  const Tensor& x = inputs.back();
  TESSEL_ASSIGN_OR_RETURN(Tensor y, empty_like_device(x.shape(), x.dtype(), x));
  if (y.numel() == 0) return y;
  std::vector<KernelArg> args;
  for (const Tensor& t : inputs) {
    TESSEL_ASSIGN_OR_RETURN(View v, rows_view(t));
    args.push_back(v);
  }
  TESSEL_ASSIGN_OR_RETURN(View yv, rows_view(y));
  args.push_back(yv);
  TESSEL_TRY(launch_kernel(kernel, row_tile_params(x, yv.shape[1], std::move(params)), args));
  return y;
}

RefTensor softmax_reference(const RefTensor& x, bool log) {
  RefTensor out = x;
  const int64_t n = x.shape.back(), m = n == 0 ? 0 : reference::numel(x.shape) / n;
  for (int64_t r = 0; r < m; ++r) {
    const double* row = &x.values[r * n];
    double mx = -INFINITY, s = 0;
    for (int64_t c = 0; c < n; ++c)
      mx = std::max(mx, row[c]);
    for (int64_t c = 0; c < n; ++c)
      s += std::exp(row[c] - mx);
    for (int64_t c = 0; c < n; ++c)
      out.values[r * n + c] = log ? row[c] - mx - std::log(s) : std::exp(row[c] - mx) / s;
  }
  return out;
}

OpDef softmax_op(const std::string& name, bool log) {
  OpDef op;
  op.name = name;
  op.infer = [name](const std::vector<TensorMeta>& in, const Attrs&) {
    return infer_rows(name, in);
  };
  op.forward = [log](const std::vector<Tensor>& in, const Attrs&, const TensorMeta&) {
    return row_kernel(log ? "log_softmax" : "softmax", {}, {in[0]});
  };
  op.reference = [log](const std::vector<RefTensor>& in, const Attrs&) {
    return softmax_reference(in[0], log);
  };
  op.save_output = true;
  op.backward = [log](const BackwardArgs& b) -> Expected<std::vector<Tensor>> {
    TESSEL_ASSIGN_OR_RETURN(Tensor dx, row_kernel("softmax_grad", {{"LOG", log ? "1" : "0"}},
                                                  {b.output, b.grad_output}));
    return std::vector<Tensor>{dx};
  };
  return op;
}

// ---- cross_entropy ----

struct CrossEntropyAttrs {
  int64_t ignore_index;
  double smoothing;
  bool sum;
};
CrossEntropyAttrs ce_attrs(const Attrs& a) {
  return {a.get_int("ignore_index", -100), a.get_double("label_smoothing", 0.0),
          a.get_int("reduction", 0) == 1};
}

Expected<TensorMeta> infer_cross_entropy(const std::vector<TensorMeta>& in, const Attrs& a) {
  const Shape &x = in[0].shape, &t = in[1].shape;
  bool leading = !x.empty() && t == Shape(x.begin(), x.end() - 1);
  if (!leading || in[0].dtype != DType::kF32 || in[1].dtype != DType::kI64)
    return invalid_argument(
        "cross_entropy: needs f32 logits [..., C] and i64 targets [...], got {}",
        shapes_string(in));
  double eps = a.get_double("label_smoothing", 0.0);
  if (eps < 0 || eps > 1)
    return invalid_argument("cross_entropy: label_smoothing {} is outside [0, 1]", eps);
  int64_t r = a.get_int("reduction", 0);
  if (r != 0 && r != 1)
    return invalid_argument("cross_entropy: reduction {} is neither 0 (mean) nor 1 (sum)", r);
  return TensorMeta{{}, DType::kF32};
}

// The column block of the cross-entropy kernels for `n` classes: the smallest power of two that
// holds a row, from 16 to the kernels' default 256, so 10 classes do not pay for 256 exp()s.
KernelParams cross_entropy_params(int64_t n) {
  int64_t bc = 16;
  while (bc < n && bc < 256)
    bc *= 2;
  return {{"T", "f32"}, {"BC", std::to_string(bc)}};
}

// Per-row losses and kept-row flags, each summed: {total loss, rows kept}, each of shape [].
Expected<std::pair<Tensor, Tensor>> cross_entropy_totals(const Tensor& logits, const Tensor& target,
                                                         const CrossEntropyAttrs& a) {
  TESSEL_ASSIGN_OR_RETURN(View x, rows_view(logits));
  const int64_t m = x.shape[0];
  TESSEL_ASSIGN_OR_RETURN(Tensor loss, empty_like_device({m}, DType::kF32, logits));
  TESSEL_ASSIGN_OR_RETURN(Tensor weight, empty_like_device({m}, DType::kF32, logits));
  TESSEL_ASSIGN_OR_RETURN(Tensor t, contiguous_on_device(target));
  TESSEL_TRY(launch_kernel("cross_entropy_rows", cross_entropy_params(x.shape[1]),
                           {x, View{t, {m}, {1}}, loss, weight, a.ignore_index, a.smoothing}));
  TESSEL_ASSIGN_OR_RETURN(Tensor total, empty_like_device({}, DType::kF32, logits));
  TESSEL_ASSIGN_OR_RETURN(Tensor kept, empty_like_device({}, DType::kF32, logits));
  TESSEL_TRY(launch_kernel("reduce_rows", {{"OP", "0"}},
                           {View{loss, {1, m}, {m, 1}}, View{total, {1}, {1}}}));
  TESSEL_TRY(launch_kernel("reduce_rows", {{"OP", "0"}},
                           {View{weight, {1, m}, {m, 1}}, View{kept, {1}, {1}}}));
  return std::make_pair(total, kept);
}

Expected<Tensor> cross_entropy_forward(const std::vector<Tensor>& in, const Attrs& attrs) {
  CrossEntropyAttrs a = ce_attrs(attrs);
  TESSEL_ASSIGN_OR_RETURN(auto totals, cross_entropy_totals(in[0], in[1], a));
  if (a.sum) return totals.first;
  return div(totals.first, totals.second);
}

Expected<std::vector<Tensor>> cross_entropy_backward(const BackwardArgs& b) {
  CrossEntropyAttrs a = ce_attrs(b.attrs);
  const Tensor &logits = b.inputs[0], &target = b.inputs[1];
  // scale = upstream gradient, divided by the rows kept for the mean (counted again here rather
  // than kept from forward: a pass over the targets is cheaper than a tape entry for it).
  Tensor factor = b.grad_output;
  if (!a.sum) {
    TESSEL_ASSIGN_OR_RETURN(auto totals, cross_entropy_totals(logits, target, a));
    TESSEL_ASSIGN_OR_RETURN(factor, div(b.grad_output, totals.second));
  }
  TESSEL_ASSIGN_OR_RETURN(View x, rows_view(logits));
  const int64_t m = x.shape[0], n = x.shape[1];
  TESSEL_ASSIGN_OR_RETURN(Tensor dx, empty_like_device(logits.shape(), DType::kF32, logits));
  TESSEL_ASSIGN_OR_RETURN(Tensor t, contiguous_on_device(target));
  TESSEL_TRY(launch_kernel("cross_entropy_grad", cross_entropy_params(n),
                           {x, View{t, {m}, {1}}, View{factor, {1}, {1}}, View{dx, {m, n}, {n, 1}},
                            a.ignore_index, a.smoothing}));
  return std::vector<Tensor>{dx, Tensor()};
}

RefTensor cross_entropy_reference(const std::vector<RefTensor>& in, const Attrs& attrs) {
  CrossEntropyAttrs a = ce_attrs(attrs);
  const int64_t n = in[0].shape.back(), m = reference::numel(in[1].shape);
  double total = 0, kept = 0;
  for (int64_t r = 0; r < m; ++r) {
    int64_t t = static_cast<int64_t>(in[1].values[r]);
    if (t == a.ignore_index) continue;
    const double* row = &in[0].values[r * n];
    double mx = -INFINITY, s = 0, mean_x = 0;
    for (int64_t c = 0; c < n; ++c)
      mx = std::max(mx, row[c]);
    for (int64_t c = 0; c < n; ++c)
      s += std::exp(row[c] - mx), mean_x += row[c] / n;
    double lse = mx + std::log(s);
    total += (1 - a.smoothing) * (lse - row[t]) + a.smoothing * (lse - mean_x);
    kept += 1;
  }
  return RefTensor{{}, {a.sum ? total : total / kept}};
}

OpDef cross_entropy_op() {
  OpDef op;
  op.name = "cross_entropy";
  op.arity = 2;
  op.attrs = {"ignore_index", "label_smoothing", "reduction"};
  op.infer = [](const std::vector<TensorMeta>& in, const Attrs& a) {
    return infer_cross_entropy(in, a);
  };
  op.forward = [](const std::vector<Tensor>& in, const Attrs& a, const TensorMeta&) {
    return cross_entropy_forward(in, a);
  };
  op.reference = cross_entropy_reference;
  op.save_inputs = {true, true};
  op.differentiable = {true, false};
  op.backward = cross_entropy_backward;
  return op;
}

// ---- layer_norm ----

Expected<TensorMeta> infer_layer_norm(const std::vector<TensorMeta>& in) {
  const Shape& x = in[0].shape;
  bool ok = !x.empty() && in[1].shape == Shape{x.back()} && in[2].shape == Shape{x.back()};
  for (const TensorMeta& m : in)
    ok = ok && m.dtype == DType::kF32;
  if (!ok)
    return invalid_argument("layer_norm: needs f32 x [..., C], weight [C], bias [C], got {}",
                            shapes_string(in));
  return in[0];
}

Expected<Tensor> layer_norm_forward(const std::vector<Tensor>& in, const Attrs& a) {
  TESSEL_ASSIGN_OR_RETURN(Tensor y, empty_like_device(in[0].shape(), in[0].dtype(), in[0]));
  if (y.numel() == 0) return y;
  TESSEL_ASSIGN_OR_RETURN(View x, rows_view(in[0]));
  TESSEL_ASSIGN_OR_RETURN(View yv, rows_view(y));
  TESSEL_TRY(launch_kernel("layernorm", row_tile_params(in[0], x.shape[1]),
                           {x, in[1], in[2], yv, a.get_double("eps", 1e-5)}));
  return y;
}

Expected<std::vector<Tensor>> layer_norm_backward(const BackwardArgs& b) {
  const Tensor &x = b.inputs[0], &gamma = b.inputs[1];
  TESSEL_ASSIGN_OR_RETURN(View xv, rows_view(x));
  TESSEL_ASSIGN_OR_RETURN(View gv, rows_view(b.grad_output));
  const int64_t m = xv.shape[0], n = xv.shape[1];
  TESSEL_ASSIGN_OR_RETURN(Tensor dx, empty_like_device(x.shape(), x.dtype(), x));
  TESSEL_ASSIGN_OR_RETURN(Tensor dy_xhat, empty_like_device({m, n}, DType::kF32, x));
  TESSEL_TRY(launch_kernel(
      "layernorm_grad", row_tile_params(x, n),
      {xv, gamma, gv, View{dx, {m, n}, {n, 1}}, dy_xhat, b.attrs.get_double("eps", 1e-5)}));
  std::vector<Tensor> grads{dx, Tensor(), Tensor()};
  if (b.needs_grad[1]) {
    TESSEL_ASSIGN_OR_RETURN(grads[1], sum(dy_xhat, {0}));
  }
  if (b.needs_grad[2]) {
    TESSEL_ASSIGN_OR_RETURN(Tensor g2, reshape(b.grad_output, {m, n}));
    TESSEL_ASSIGN_OR_RETURN(grads[2], sum(g2, {0}));
  }
  return grads;
}

RefTensor layer_norm_reference(const std::vector<RefTensor>& in, const Attrs& a) {
  const double eps = a.get_double("eps", 1e-5);
  RefTensor out = in[0];
  const int64_t n = in[0].shape.back(), m = n == 0 ? 0 : reference::numel(in[0].shape) / n;
  for (int64_t r = 0; r < m; ++r) {
    const double* row = &in[0].values[r * n];
    double mean = 0, var = 0;
    for (int64_t c = 0; c < n; ++c)
      mean += row[c] / n;
    for (int64_t c = 0; c < n; ++c)
      var += (row[c] - mean) * (row[c] - mean) / n;
    for (int64_t c = 0; c < n; ++c)
      out.values[r * n + c] =
          (row[c] - mean) / std::sqrt(var + eps) * in[1].values[c] + in[2].values[c];
  }
  return out;
}

OpDef layer_norm_op() {
  OpDef op;
  op.name = "layer_norm";
  op.arity = 3;
  op.attrs = {"eps"};
  op.infer = [](const std::vector<TensorMeta>& in, const Attrs&) { return infer_layer_norm(in); };
  op.forward = [](const std::vector<Tensor>& in, const Attrs& a, const TensorMeta&) {
    return layer_norm_forward(in, a);
  };
  op.reference = layer_norm_reference;
  op.save_inputs = {true, true, false};
  op.backward = layer_norm_backward;
  return op;
}

// ---- embedding ----

Expected<TensorMeta> infer_embedding(const std::vector<TensorMeta>& in) {
  if (in[0].shape.size() != 2 || in[0].dtype != DType::kF32 || in[1].dtype != DType::kI64)
    return invalid_argument("embedding: needs an f32 weight [V, C] and i64 ids, got {}",
                            shapes_string(in));
  Shape out = in[1].shape;
  out.push_back(in[0].shape[1]);
  return TensorMeta{out, DType::kF32};
}

// Ids outside the table are a user error on every device: on one the host cannot address, the
// ids are read back first (kernels would read past the table there, not fail).
Status check_ids(const Tensor& ids, int64_t vocabulary) {
  TESSEL_ASSIGN_OR_RETURN(std::vector<int64_t> values, ids.to_vector<int64_t>());
  for (size_t i = 0; i < values.size(); ++i)
    if (values[i] < 0 || values[i] >= vocabulary)
      return out_of_range("embedding: id {} at position {} is outside the table of {} rows",
                          values[i], i, vocabulary);
  return ok_status();
}

Expected<Tensor> embedding_forward(const std::vector<Tensor>& in, const TensorMeta& out) {
  const Tensor& w = in[0];
  TESSEL_TRY(check_ids(in[1], w.size(0)));
  TESSEL_ASSIGN_OR_RETURN(Tensor y, empty_like_device(out.shape, out.dtype, w));
  if (y.numel() == 0) return y;
  TESSEL_ASSIGN_OR_RETURN(Tensor ids, contiguous_on_device(in[1]));
  const int64_t r = ids.numel(), c = w.size(1);
  TESSEL_TRY(launch_kernel("embedding", {}, {w, View{ids, {r}, {1}}, View{y, {r, c}, {c, 1}}}));
  return y;
}

Expected<std::vector<Tensor>> embedding_backward(const BackwardArgs& b) {
  const Shape& ws = b.input_meta[0].shape;
  TESSEL_ASSIGN_OR_RETURN(Tensor ids, contiguous_on_device(b.inputs[1]));
  TESSEL_ASSIGN_OR_RETURN(View g, rows_view(b.grad_output));
  TESSEL_ASSIGN_OR_RETURN(Tensor dw, empty_like_device(ws, DType::kF32, b.grad_output));
  TESSEL_TRY(
      launch_kernel("embedding_grad", {{"T", "f32"}}, {View{ids, {ids.numel()}, {1}}, g, dw}));
  return std::vector<Tensor>{dw, Tensor()};
}

RefTensor embedding_reference(const std::vector<RefTensor>& in, const Attrs&) {
  const int64_t c = in[0].shape[1];
  RefTensor out{in[1].shape, {}};
  out.shape.push_back(c);
  for (double id : in[1].values)
    for (int64_t j = 0; j < c; ++j)
      out.values.push_back(in[0].values[static_cast<int64_t>(id) * c + j]);
  return out;
}

OpDef embedding_op() {
  OpDef op;
  op.name = "embedding";
  op.arity = 2;
  op.infer = [](const std::vector<TensorMeta>& in, const Attrs&) { return infer_embedding(in); };
  op.forward = [](const std::vector<Tensor>& in, const Attrs&, const TensorMeta& out) {
    return embedding_forward(in, out);
  };
  op.reference = embedding_reference;
  op.save_inputs = {false, true};
  op.differentiable = {true, false};
  op.backward = embedding_backward;
  return op;
}

}  // namespace

void add_nn_ops(std::vector<OpDef>& ops) {
  ops.push_back(softmax_op("softmax", false));
  ops.push_back(softmax_op("log_softmax", true));
  ops.push_back(cross_entropy_op());
  ops.push_back(layer_norm_op());
  ops.push_back(embedding_op());
}

Expected<Tensor> softmax(const Tensor& x) {
  return run("softmax", {x});
}
Expected<Tensor> log_softmax(const Tensor& x) {
  return run("log_softmax", {x});
}
Expected<Tensor> cross_entropy(const Tensor& logits, const Tensor& target, int64_t ignore_index,
                               double label_smoothing, int reduction) {
  return run("cross_entropy", {logits, target},
             Attrs()
                 .set("ignore_index", ignore_index)
                 .set("label_smoothing", label_smoothing)
                 .set("reduction", reduction));
}
Expected<Tensor> layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  return run("layer_norm", {x, weight, bias}, Attrs().set("eps", eps));
}
Expected<Tensor> embedding(const Tensor& weight, const Tensor& ids) {
  return run("embedding", {weight, ids});
}

}  // namespace tessel::ops
