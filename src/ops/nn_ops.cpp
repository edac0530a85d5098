// Ops over the last axis and lookups: softmax, log_softmax, cross_entropy (fused with
// log-softmax), layer_norm, embedding. Rows are [M, N] views of [..., N] tensors.
// Kernels: softmax.tile, softmax_grad.tile, cross_entropy.tile, layernorm.tile,
// layernorm_grad.tile, embedding.tile.
#include <cmath>

#include "ops/index_check.h"
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
  // A row that 128 divides but 256 does not (gpt_mini's 384) takes 128-wide tiles: under the
  // default 256 its last tile ran half masked, in every pass of layernorm and its gradient.
  if (n <= 64) {
    params["BC"] = "64";
  } else if (n <= 128 || (n % 256 != 0 && n % 128 == 0)) {
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
//
// torch.nn.functional.cross_entropy over logits [..., C]: targets are i64 class ids [...]
// (ignore_index, label smoothing, class weights) or class probabilities [..., C] of the logits'
// dtype (soft labels: label smoothing and weights, no ignore_index); reduction 0 mean (over the
// kept targets' weights, or the rows for probabilities), 1 sum, 2 none (a loss per target).
// Probability targets get their gradient, as PyTorch gives them one.

struct CrossEntropyAttrs {
  int64_t ignore_index;
  double smoothing;
  int64_t reduction;           // 0 mean, 1 sum, 2 none
  std::vector<double> weight;  // empty: every class weighs 1
};
CrossEntropyAttrs ce_attrs(const Attrs& a) {
  return {a.get_int("ignore_index", -100), a.get_double("label_smoothing", 0.0),
          a.get_int("reduction", 0), a.get_doubles("weight")};
}

bool probability_targets(const TensorMeta& target) {
  return is_floating_point(target.dtype);
}

Expected<TensorMeta> infer_cross_entropy(const std::vector<TensorMeta>& in, const Attrs& a) {
  const Shape &x = in[0].shape, &t = in[1].shape;
  const bool probs = probability_targets(in[1]);
  bool ok = !x.empty() && in[0].dtype == DType::kF32;
  if (probs)
    ok = ok && t == x && in[1].dtype == DType::kF32;
  else
    ok = ok && t == Shape(x.begin(), x.end() - 1) && in[1].dtype == DType::kI64;
  if (!ok)
    return invalid_argument(
        "cross_entropy: needs f32 logits [..., C] and i64 class ids [...] or f32 class "
        "probabilities [..., C], got {}",
        shapes_string(in));
  if (x.back() == 0 && shape_numel(t) > 0)
    return invalid_argument("cross_entropy: logits {} have no classes", shape_string(x));
  const CrossEntropyAttrs c = ce_attrs(a);
  if (c.smoothing < 0 || c.smoothing > 1)
    return invalid_argument("cross_entropy: label_smoothing {} is outside [0, 1]", c.smoothing);
  if (c.reduction < 0 || c.reduction > 2)
    return invalid_argument("cross_entropy: reduction {} is none of 0 (mean), 1 (sum), 2 (none)",
                            c.reduction);
  if (!c.weight.empty() && static_cast<int64_t>(c.weight.size()) != x.back())
    return invalid_argument("cross_entropy: {} class weights for {} classes", c.weight.size(),
                            x.back());
  if (c.reduction == 2) return TensorMeta{Shape(x.begin(), x.end() - 1), DType::kF32};
  return TensorMeta{{}, DType::kF32};
}

// The column block of the cross-entropy kernels for `n` classes: the smallest power of two that
// holds a row, from 16 to the kernels' default 256, so 10 classes do not pay for 256 exp()s.
KernelParams cross_entropy_params(int64_t n, bool weighted) {
  int64_t bc = 16;
  while (bc < n && bc < 256)
    bc *= 2;
  return {{"T", "f32"}, {"BC", std::to_string(bc)}, {"WEIGHTED", weighted ? "1" : "0"}};
}

// The class weights on the logits' device, or a stride-0 stand-in the kernels do not read.
struct ClassWeights {
  View view;
  double sum;
};
Expected<ClassWeights> class_weights(const CrossEntropyAttrs& a, const Tensor& logits) {
  const int64_t n = logits.shape().back();
  if (a.weight.empty()) return ClassWeights{View{logits, {n}, {0}}, static_cast<double>(n)};
  std::vector<float> w(a.weight.begin(), a.weight.end());
  TESSEL_ASSIGN_OR_RETURN(Tensor t, Tensor::from_vector(w, {n}, logits.device()));
  double sum = 0;
  for (double v : a.weight)
    sum += v;
  return ClassWeights{View{t, {n}, {1}}, sum};
}

// Per-row losses [m] and, for class ids, each row's weight (0 where ignored).
Expected<std::pair<Tensor, Tensor>> cross_entropy_rows(const Tensor& logits, const Tensor& target,
                                                       const CrossEntropyAttrs& a) {
  TESSEL_ASSIGN_OR_RETURN(View x, rows_view(logits));
  const int64_t m = x.shape[0], n = x.shape[1];
  TESSEL_ASSIGN_OR_RETURN(ClassWeights w, class_weights(a, logits));
  const KernelParams params = cross_entropy_params(n, !a.weight.empty());
  TESSEL_ASSIGN_OR_RETURN(Tensor loss, empty_like_device({m}, DType::kF32, logits));
  if (target.dtype() != DType::kI64) {
    TESSEL_ASSIGN_OR_RETURN(View p, rows_view(target));
    TESSEL_TRY(launch_kernel("cross_entropy_prob_rows", params, {x, p, w.view, loss, a.smoothing}));
    return std::make_pair(loss, Tensor());
  }
  TESSEL_ASSIGN_OR_RETURN(Tensor weight, empty_like_device({m}, DType::kF32, logits));
  TESSEL_ASSIGN_OR_RETURN(Tensor t, contiguous_on_device(target));
  TESSEL_TRY(launch_kernel(
      "cross_entropy_rows", params,
      {x, View{t, {m}, {1}}, w.view, loss, weight, a.ignore_index, a.smoothing, w.sum}));
  return std::make_pair(loss, weight);
}

Expected<Tensor> total(const Tensor& rows) {
  const int64_t m = rows.numel();
  TESSEL_ASSIGN_OR_RETURN(Tensor out, empty_like_device({}, DType::kF32, rows));
  TESSEL_TRY(launch_kernel("reduce_rows", {{"OP", "0"}},
                           {View{rows, {1, m}, {m, 1}}, View{out, {1}, {1}}}));
  return out;
}

// What the mean divides by: the kept targets' weights, or the number of rows for probabilities.
Expected<Tensor> mean_divisor(const std::pair<Tensor, Tensor>& rows) {
  if (rows.second.defined()) return total(rows.second);
  return Tensor::full({}, static_cast<double>(rows.first.numel()), DType::kF32,
                      rows.first.device());
}

Expected<Tensor> cross_entropy_forward(const std::vector<Tensor>& in, const Attrs& attrs,
                                       const TensorMeta& out) {
  CrossEntropyAttrs a = ce_attrs(attrs);
  if (in[1].dtype() == DType::kI64) {
    TESSEL_TRY(
        check_indices("cross_entropy", "target", in[1], 0, in[0].shape().back(), a.ignore_index));
  }
  if (in[0].numel() == 0)  // PyTorch: the mean over no targets is NaN, their sum 0
    return Tensor::full({}, a.reduction == 1 ? 0.0 : NAN, DType::kF32, in[0].device());
  TESSEL_ASSIGN_OR_RETURN(auto rows, cross_entropy_rows(in[0], in[1], a));
  if (a.reduction == 2) return reshape(rows.first, out.shape);
  TESSEL_ASSIGN_OR_RETURN(Tensor sum, total(rows.first));
  if (a.reduction == 1) return sum;
  TESSEL_ASSIGN_OR_RETURN(Tensor divisor, mean_divisor(rows));
  return div(sum, divisor);
}

// The gradient of the loss with respect to probability targets t [..., C], as PyTorch gives it:
// the loss of a row is sum_c w_c ((1 - eps) t_c + eps / C) (-log_softmax(x)_c), so
// dt[r, c] = -(1 - eps) w_c log_softmax(x)[r, c] scale[r] (scale: the upstream gradient per row,
// divided for the mean).
Expected<Tensor> probability_target_grad(const Tensor& logits, const View& scale,
                                         const CrossEntropyAttrs& a) {
  const int64_t n = logits.shape().back(), m = scale.shape[0];
  TESSEL_ASSIGN_OR_RETURN(Tensor ls, log_softmax(logits));
  TESSEL_ASSIGN_OR_RETURN(Tensor rows, reshape(ls, {m, n}));
  Tensor per_row = scale.tensor;  // [m] (none) or one value for all rows
  TESSEL_ASSIGN_OR_RETURN(per_row, reshape(per_row, {scale.strides[0] == 0 ? 1 : m, 1}));
  TESSEL_ASSIGN_OR_RETURN(Tensor dt, mul(rows, per_row));
  if (!a.weight.empty()) {
    std::vector<float> w(a.weight.begin(), a.weight.end());
    TESSEL_ASSIGN_OR_RETURN(Tensor wt, Tensor::from_vector(w, {n}, logits.device()));
    TESSEL_ASSIGN_OR_RETURN(dt, mul(dt, wt));
  }
  TESSEL_ASSIGN_OR_RETURN(dt, ops::scale(dt, -(1 - a.smoothing)));
  return reshape(dt, logits.shape());
}

Expected<std::vector<Tensor>> cross_entropy_backward(const BackwardArgs& b) {
  CrossEntropyAttrs a = ce_attrs(b.attrs);
  const Tensor &logits = b.inputs[0], &target = b.inputs[1];
  TESSEL_ASSIGN_OR_RETURN(View x, rows_view(logits));
  const int64_t m = x.shape[0], n = x.shape[1];
  // scale[r]: the upstream gradient, per row (none) or one for all (sum), divided for the mean
  // by what forward divided by (recounted here rather than kept from forward: a pass over the
  // targets is cheaper than a tape entry for it).
  View scale;
  if (a.reduction == 2) {
    TESSEL_ASSIGN_OR_RETURN(Tensor g, contiguous_on_device(b.grad_output));
    scale = View{g, {m}, {1}};
  } else {
    Tensor factor = b.grad_output;
    if (a.reduction == 0) {
      TESSEL_ASSIGN_OR_RETURN(auto rows, cross_entropy_rows(logits, target, a));
      TESSEL_ASSIGN_OR_RETURN(Tensor divisor, mean_divisor(rows));
      TESSEL_ASSIGN_OR_RETURN(factor, div(b.grad_output, divisor));
    }
    scale = View{factor, {m}, {0}};
  }
  TESSEL_ASSIGN_OR_RETURN(ClassWeights w, class_weights(a, logits));
  const KernelParams params = cross_entropy_params(n, !a.weight.empty());
  TESSEL_ASSIGN_OR_RETURN(Tensor dx, empty_like_device(logits.shape(), DType::kF32, logits));
  const View dxv{dx, {m, n}, {n, 1}};
  if (target.dtype() != DType::kI64) {
    TESSEL_ASSIGN_OR_RETURN(View p, rows_view(target));
    TESSEL_TRY(
        launch_kernel("cross_entropy_prob_grad", params, {x, p, w.view, scale, dxv, a.smoothing}));
    std::vector<Tensor> grads{dx, Tensor()};
    if (b.needs_grad[1]) {
      TESSEL_ASSIGN_OR_RETURN(grads[1], probability_target_grad(logits, scale, a));
    }
    return grads;
  } else {
    TESSEL_ASSIGN_OR_RETURN(Tensor t, contiguous_on_device(target));
    TESSEL_TRY(launch_kernel(
        "cross_entropy_grad", params,
        {x, View{t, {m}, {1}}, w.view, scale, dxv, a.ignore_index, a.smoothing, w.sum}));
  }
  return std::vector<Tensor>{dx, Tensor()};
}

RefTensor cross_entropy_reference(const std::vector<RefTensor>& in, const Attrs& attrs) {
  CrossEntropyAttrs a = ce_attrs(attrs);
  const int64_t n = in[0].shape.back(), m = n == 0 ? 0 : reference::numel(in[0].shape) / n;
  const bool probs = in[1].shape == in[0].shape;
  auto w = [&](int64_t c) { return a.weight.empty() ? 1.0 : a.weight[c]; };
  std::vector<double> losses(m, 0.0);
  double total = 0, divisor = probs ? static_cast<double>(m) : 0.0;
  for (int64_t r = 0; r < m; ++r) {
    const double* row = &in[0].values[r * n];
    double mx = -INFINITY, s = 0;
    for (int64_t c = 0; c < n; ++c)
      mx = std::max(mx, row[c]);
    for (int64_t c = 0; c < n; ++c)
      s += std::exp(row[c] - mx);
    const double lse = mx + std::log(s);
    double loss = 0;
    if (probs) {
      for (int64_t c = 0; c < n; ++c)
        loss +=
            w(c) * ((1 - a.smoothing) * in[1].values[r * n + c] + a.smoothing / n) * (lse - row[c]);
    } else {
      const int64_t t = static_cast<int64_t>(in[1].values[r]);
      if (t == a.ignore_index) continue;
      double smooth = 0;
      for (int64_t c = 0; c < n; ++c)
        smooth += w(c) * (lse - row[c]) / n;
      loss = (1 - a.smoothing) * w(t) * (lse - row[t]) + a.smoothing * smooth;
      divisor += w(t);
    }
    losses[r] = loss;
    total += loss;
  }
  if (a.reduction == 2) return RefTensor{Shape(in[0].shape.begin(), in[0].shape.end() - 1), losses};
  return RefTensor{{}, {a.reduction == 1 ? total : total / divisor}};
}

OpDef cross_entropy_op() {
  OpDef op;
  op.name = "cross_entropy";
  op.arity = 2;
  op.attrs = {"ignore_index", "label_smoothing", "reduction", "weight"};
  op.infer = [](const std::vector<TensorMeta>& in, const Attrs& a) {
    return infer_cross_entropy(in, a);
  };
  op.forward = [](const std::vector<Tensor>& in, const Attrs& a, const TensorMeta& out) {
    return cross_entropy_forward(in, a, out);
  };
  op.reference = cross_entropy_reference;
  op.save_inputs = {true, true};
  op.differentiable = {true, true};  // class ids never ask; probabilities get a gradient
  op.backward = cross_entropy_backward;
  return op;
}

// ---- layer_norm ----

Expected<TensorMeta> infer_layer_norm(const std::vector<TensorMeta>& in, const Attrs& a) {
  const Shape& x = in[0].shape;
  bool ok = !x.empty() && in[1].shape == Shape{x.back()} && in[2].shape == Shape{x.back()};
  for (const TensorMeta& m : in)
    ok = ok && m.dtype == DType::kF32;
  if (!ok)
    return invalid_argument("layer_norm: needs f32 x [..., C], weight [C], bias [C], got {}",
                            shapes_string(in));
  // A negative eps can make var + eps negative: NaN rows instead of an error.
  const double eps = a.get_double("eps", 1e-5);
  if (!(eps >= 0)) return invalid_argument("layer_norm: eps must be >= 0, got {}", eps);
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
  const Tensor& x = b.inputs[0];
  const int64_t n = x.shape().back(), m = n == 0 ? 0 : x.numel() / n;
  TESSEL_ASSIGN_OR_RETURN(
      auto d, row_norm_grad("layernorm_grad", row_tile_params(x, n), x, b.inputs[1], b.grad_output,
                            b.attrs.get_double("eps", 1e-5)));
  std::vector<Tensor> grads{d.first, Tensor(), Tensor()};
  if (b.needs_grad[1]) {
    TESSEL_ASSIGN_OR_RETURN(grads[1], sum(d.second, {0}));
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
  op.infer = [](const std::vector<TensorMeta>& in, const Attrs& a) {
    return infer_layer_norm(in, a);
  };
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

Expected<Tensor> embedding_forward(const std::vector<Tensor>& in, const TensorMeta& out) {
  const Tensor& w = in[0];
  TESSEL_TRY(check_indices("embedding", "id", in[1], 0, w.size(0)));
  TESSEL_ASSIGN_OR_RETURN(Tensor y, empty_like_device(out.shape, out.dtype, w));
  if (y.numel() == 0) return y;
  TESSEL_ASSIGN_OR_RETURN(Tensor ids, contiguous_on_device(in[1]));
  const int64_t r = ids.numel(), c = w.size(1);
  TESSEL_TRY(launch_kernel("embedding", {}, {w, View{ids, {r}, {1}}, View{y, {r, c}, {c, 1}}}));
  return y;
}

// dW = the sum of dY's rows per id: the positions grouped by id on the host (a counting sort),
// then kernel embedding_grad adds each distinct id's sum into its row. Where the weight's
// gradient already exists (a flat parameter's, zeroed by zero_grad), it adds there in place
// (grad_into) and returns no tensor; else into zeros. O(V) on the host for the counts, O(R C)
// on the device: rows no id names are not touched.
Expected<std::vector<Tensor>> embedding_backward(const BackwardArgs& b) {
  const Shape& ws = b.input_meta[0].shape;
  TESSEL_ASSIGN_OR_RETURN(std::vector<int64_t> ids, b.inputs[1].to_vector<int64_t>());
  std::vector<int64_t> indptr(static_cast<size_t>(ws[0] + 1), 0), positions(ids.size());
  for (int64_t id : ids)
    indptr[id + 1] += 1;
  for (size_t v = 1; v < indptr.size(); ++v)
    indptr[v] += indptr[v - 1];
  std::vector<int64_t> next(indptr.begin(), indptr.end() - 1), distinct, starts;
  for (size_t r = 0; r < ids.size(); ++r)
    positions[next[ids[r]]++] = static_cast<int64_t>(r);
  for (int64_t v = 0; v < ws[0]; ++v)
    if (indptr[v + 1] > indptr[v]) {
      distinct.push_back(v);
      starts.push_back(indptr[v]);
    }
  starts.push_back(static_cast<int64_t>(ids.size()));
  const Tensor& into = b.grad_into.empty() ? Tensor() : b.grad_into[0];
  Tensor dw = into;
  if (!dw.defined()) {
    TESSEL_ASSIGN_OR_RETURN(dw, Tensor::zeros(ws, DType::kF32, b.grad_output.device()));
  }
  if (!distinct.empty()) {
    Device* device = b.grad_output.device();
    const int64_t n = static_cast<int64_t>(ids.size()), u = static_cast<int64_t>(distinct.size());
    TESSEL_ASSIGN_OR_RETURN(Tensor idx, Tensor::from_vector(distinct, {u}, device));
    TESSEL_ASSIGN_OR_RETURN(Tensor st, Tensor::from_vector(starts, {u + 1}, device));
    TESSEL_ASSIGN_OR_RETURN(Tensor pos, Tensor::from_vector(positions, {n}, device));
    TESSEL_ASSIGN_OR_RETURN(View g, rows_view(b.grad_output));
    TESSEL_TRY(
        launch_kernel("embedding_grad", {{"W", std::to_string(ws[1])}}, {g, idx, st, pos, dw}));
  }
  return std::vector<Tensor>{into.defined() ? Tensor() : dw, Tensor()};
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
                               double label_smoothing, int reduction,
                               std::vector<double> class_weight) {
  Attrs a = Attrs()
                .set("ignore_index", ignore_index)
                .set("label_smoothing", label_smoothing)
                .set("reduction", reduction);
  if (!class_weight.empty()) a.set_reals("weight", std::move(class_weight));
  return run("cross_entropy", {logits, target}, a);
}
Expected<Tensor> layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  return run("layer_norm", {x, weight, bias}, Attrs().set("eps", eps));
}
Expected<Tensor> embedding(const Tensor& weight, const Tensor& ids) {
  return run("embedding", {weight, ids});
}

}  // namespace tessel::ops
