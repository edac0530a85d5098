// matmul (batched, broadcasting batch dimensions) and linear (x @ weight^T + bias), on the gemm and
// batched_gemm kernels. Transposed operands are strided views; nothing is transposed in memory.
#include <optional>

#include "ops/kernel_util.h"
#include "ops/ops.h"
#include "ops/reference_util.h"

namespace tessel::ops {
namespace {

// Block sizes per device kind: the CPU keeps the kernels' defaults (tuned for its caches); a
// GPU takes blocks that fit a work-group's registers and local memory.
KernelParams gemm_params(const Tensor& t) {
  if (t.device()->kind() == DeviceKind::kCpu) return {};
  return {{"BM", "32"}, {"BN", "32"}, {"BK", "8"}};
}

// Batched products of small matrices (attention: [T, D] @ [D, T] per head) get small CPU blocks:
// a block clears and writes back its whole [BM, BN] accumulator, and the default 192 x 256 one
// is 12 times a 64 x 64 product. 72 x 64 is a multiple of every CPU micro-tile (12 x 32, 6 x 16,
// 4 x 16) and holds T = 64 in one block.
KernelParams batched_gemm_params(const Tensor& c, int64_t m, int64_t n) {
  if (c.device()->kind() == DeviceKind::kCpu && m <= 96 && n <= 128)
    return {{"BM", "72"}, {"BN", "64"}};
  return gemm_params(c);
}

// The [M, N] matrix `m` of a tensor [..., M, N] as a 3-d view [Z, M, N] over `batch` (the
// broadcast batch shape): expanded, then merged when the batch strides allow, else copied.
Expected<View> batched_view(const Tensor& t, const Shape& batch) {
  Shape full = batch;
  full.push_back(t.size(-2));
  full.push_back(t.size(-1));
  TESSEL_ASSIGN_OR_RETURN(Tensor e, t.expand(full));
  int64_t z = shape_numel(batch);
  // The batch dimensions merge when each steps over the next non-trivial one exactly.
  int64_t batch_stride = 0, span = -1;
  bool mergeable = true;
  for (int64_t d = static_cast<int64_t>(batch.size()) - 1; d >= 0; --d) {
    if (batch[d] == 1) continue;
    if (span < 0)
      batch_stride = e.strides()[d];
    else if (e.strides()[d] != span)
      mergeable = false;
    span = e.strides()[d] * batch[d];
  }
  if (!mergeable) {
    TESSEL_ASSIGN_OR_RETURN(e, contiguous_on_device(e));
    batch_stride = e.size(-1) * e.size(-2);
  }
  return View{e,
              {z, e.size(-2), e.size(-1)},
              {batch_stride, e.strides()[e.rank() - 2], e.strides()[e.rank() - 1]}};
}

// [..., M, K] as the [rows, K] matrix it is when its leading dimensions merge (a view), so that
// a product with a 2-d operand shared by the batch is one gemm: the tied GPT head's
// x [B, T, C] @ wte^T, whose weight gradient is then X^T dY with K = B T, not B products summed.
std::optional<Tensor> rows_matrix(const Tensor& t) {
  Expected<Tensor> m = t.reshape({t.numel() / t.size(-1), t.size(-1)});
  if (!m.ok()) return std::nullopt;
  return *m;
}

Expected<TensorMeta> infer_matmul(const std::vector<TensorMeta>& in) {
  const Shape& a = in[0].shape;
  const Shape& b = in[1].shape;
  if (a.size() < 2 || b.size() < 2 || a.back() != b[b.size() - 2] || in[0].dtype != in[1].dtype ||
      in[0].dtype != DType::kF32)
    return invalid_argument("matmul: needs f32 [..., M, K] and [..., K, N], got {}",
                            shapes_string(in));
  Shape batch_a(a.begin(), a.end() - 2), batch_b(b.begin(), b.end() - 2);
  Expected<Shape> batch = broadcast_shapes(batch_a, batch_b);
  if (!batch.ok())
    return invalid_argument("matmul: batch dimensions of {} do not broadcast", shapes_string(in));
  Shape out = *batch;
  out.push_back(a[a.size() - 2]);
  out.push_back(b.back());
  return TensorMeta{out, in[0].dtype};
}

Expected<Tensor> matmul_forward(const std::vector<Tensor>& in, const TensorMeta& out) {
  Shape batch(out.shape.begin(), out.shape.end() - 2);
  TESSEL_ASSIGN_OR_RETURN(Tensor c, empty_like_device(out.shape, out.dtype, in[0]));
  if (c.numel() == 0) return c;
  const int64_t m = out.shape[out.shape.size() - 2], n = out.shape.back();
  if (in[0].rank() > 2 && in[1].rank() == 2) {
    if (std::optional<Tensor> a2 = rows_matrix(in[0])) {  // one [rows, K] @ [K, N] product
      const int64_t rows = a2->size(0), k = a2->size(1);
      View av{*a2, {1, rows, k}, {0, a2->strides()[0], a2->strides()[1]}};
      View bv{in[1], {1, k, n}, {0, in[1].strides()[0], in[1].strides()[1]}};
      View cv{c, {1, rows, n}, {0, n, 1}};
      TESSEL_TRY(
          launch_kernel("batched_gemm", batched_gemm_params(c, rows, n), {av, bv, cv, 1.0, 0.0}));
      return c;
    }
  }
  TESSEL_ASSIGN_OR_RETURN(View a, batched_view(in[0], batch));
  TESSEL_ASSIGN_OR_RETURN(View b, batched_view(in[1], batch));
  View cv{c, {shape_numel(batch), m, n}, {m * n, n, 1}};
  TESSEL_TRY(launch_kernel("batched_gemm", batched_gemm_params(c, m, n), {a, b, cv, 1.0, 0.0}));
  return c;
}

RefTensor matmul_reference(const std::vector<RefTensor>& in) {
  const Shape &as = in[0].shape, &bs = in[1].shape;
  const int64_t m = as[as.size() - 2], k = as.back(), n = bs.back();
  Shape batch_a(as.begin(), as.end() - 2), batch_b(bs.begin(), bs.end() - 2);
  Shape batch = reference::broadcast(batch_a, batch_b);
  RefTensor out{batch, {}};
  out.shape.push_back(m);
  out.shape.push_back(n);
  out.values.assign(reference::numel(out.shape), 0.0);
  for (int64_t z = 0; z < reference::numel(batch); ++z) {
    auto index = reference::unravel(z, batch);
    int64_t za = reference::broadcast_source(index, batch_a),
            zb = reference::broadcast_source(index, batch_b);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t p = 0; p < k; ++p)
          s += in[0].values[(za * m + i) * k + p] * in[1].values[(zb * k + p) * n + j];
        out.values[(z * m + i) * n + j] = s;
      }
  }
  return out;
}

Expected<Tensor> transposed(const Tensor& t) {
  return t.transpose(-2, -1);
}

OpDef matmul_op() {
  OpDef op;
  op.name = "matmul";
  op.arity = 2;
  op.infer = [](const std::vector<TensorMeta>& in, const Attrs&) { return infer_matmul(in); };
  op.forward = [](const std::vector<Tensor>& in, const Attrs&, const TensorMeta& out) {
    return matmul_forward(in, out);
  };
  op.reference = [](const std::vector<RefTensor>& in, const Attrs&) {
    return matmul_reference(in);
  };
  op.save_inputs = {true, true};
  op.backward = [](const BackwardArgs& b) -> Expected<std::vector<Tensor>> {
    std::vector<Tensor> grads(2);
    if (b.needs_grad[0]) {  // dA = dC @ B^T, summed over the batch dimensions A was broadcast in
      TESSEL_ASSIGN_OR_RETURN(Tensor bt, transposed(b.inputs[1]));
      TESSEL_ASSIGN_OR_RETURN(Tensor full, matmul(b.grad_output, bt));
      TESSEL_ASSIGN_OR_RETURN(grads[0], sum_to(full, b.input_meta[0].shape));
    }
    if (b.needs_grad[1]) {  // dB = A^T @ dC
      if (b.inputs[0].rank() > 2 && b.inputs[1].rank() == 2) {
        std::optional<Tensor> a2 = rows_matrix(b.inputs[0]), g2 = rows_matrix(b.grad_output);
        if (a2 && g2) {
          TESSEL_ASSIGN_OR_RETURN(Tensor at, transposed(*a2));
          TESSEL_ASSIGN_OR_RETURN(grads[1], matmul(at, *g2));
          return grads;
        }
      }
      TESSEL_ASSIGN_OR_RETURN(Tensor at, transposed(b.inputs[0]));
      TESSEL_ASSIGN_OR_RETURN(Tensor full, matmul(at, b.grad_output));
      TESSEL_ASSIGN_OR_RETURN(grads[1], sum_to(full, b.input_meta[1].shape));
    }
    return grads;
  };
  return op;
}

Expected<TensorMeta> infer_linear(const std::vector<TensorMeta>& in) {
  const Shape &x = in[0].shape, &w = in[1].shape, &bias = in[2].shape;
  bool dtypes =
      in[0].dtype == DType::kF32 && in[1].dtype == DType::kF32 && in[2].dtype == DType::kF32;
  if (x.empty() || w.size() != 2 || bias.size() != 1 || x.back() != w[1] || bias[0] != w[0] ||
      !dtypes)
    return invalid_argument("linear: needs f32 x [..., K], weight [N, K], bias [N], got {}",
                            shapes_string(in));
  Shape out = x;
  out.back() = w[0];
  return TensorMeta{out, in[0].dtype};
}

// y [M, N] = x [M, K] @ w^T + bias, one gemm with the bias in its epilogue.
Expected<Tensor> linear_forward(const std::vector<Tensor>& in, const TensorMeta& out) {
  TESSEL_ASSIGN_OR_RETURN(Tensor y, empty_like_device(out.shape, out.dtype, in[0]));
  if (y.numel() == 0) return y;
  TESSEL_ASSIGN_OR_RETURN(View x, rows_view(in[0]));
  const Tensor& w = in[1];
  const int64_t m = x.shape[0], n = w.size(0), k = w.size(1);
  View wt{w, {k, n}, {w.strides()[1], w.strides()[0]}};
  View yv{y, {m, n}, {n, 1}};
  KernelParams params = gemm_params(y);
  params["BIAS"] = "1";
  TESSEL_TRY(launch_kernel("gemm", params, {x, wt, yv, in[2], 1.0, 0.0}));
  return y;
}

RefTensor linear_reference(const std::vector<RefTensor>& in) {
  const int64_t n = in[1].shape[0], k = in[1].shape[1], m = reference::numel(in[0].shape) / k;
  RefTensor out{in[0].shape, std::vector<double>(m * n)};
  out.shape.back() = n;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = in[2].values[j];
      for (int64_t p = 0; p < k; ++p)
        s += in[0].values[i * k + p] * in[1].values[j * k + p];
      out.values[i * n + j] = s;
    }
  return out;
}

OpDef linear_op() {
  OpDef op;
  op.name = "linear";
  op.arity = 3;
  op.infer = [](const std::vector<TensorMeta>& in, const Attrs&) { return infer_linear(in); };
  op.forward = [](const std::vector<Tensor>& in, const Attrs&, const TensorMeta& out) {
    return linear_forward(in, out);
  };
  op.reference = [](const std::vector<RefTensor>& in, const Attrs&) {
    return linear_reference(in);
  };
  op.save_inputs = {true, true, false};
  op.backward = [](const BackwardArgs& b) -> Expected<std::vector<Tensor>> {
    std::vector<Tensor> grads(3);
    const int64_t n = b.input_meta[1].shape[0];
    TESSEL_ASSIGN_OR_RETURN(Tensor g2, reshape(b.grad_output, {-1, n}));  // [M, N]
    if (b.needs_grad[0]) {                                                // dx = dy @ w
      TESSEL_ASSIGN_OR_RETURN(Tensor dx, matmul(g2, b.inputs[1]));
      TESSEL_ASSIGN_OR_RETURN(grads[0], reshape(dx, b.input_meta[0].shape));
    }
    if (b.needs_grad[1]) {  // dw = dy^T @ x
      TESSEL_ASSIGN_OR_RETURN(Tensor gt, g2.transpose(0, 1));
      TESSEL_ASSIGN_OR_RETURN(Tensor x2, reshape(b.inputs[0], {-1, b.input_meta[1].shape[1]}));
      TESSEL_ASSIGN_OR_RETURN(grads[1], matmul(gt, x2));
    }
    if (b.needs_grad[2]) {  // dbias = column sums of dy
      TESSEL_ASSIGN_OR_RETURN(grads[2], sum(g2, {0}));
    }
    return grads;
  };
  return op;
}

}  // namespace

void add_matmul_ops(std::vector<OpDef>& ops) {
  ops.push_back(matmul_op());
  ops.push_back(linear_op());
}

Expected<Tensor> matmul(const Tensor& a, const Tensor& b) {
  return run("matmul", {a, b});
}
Expected<Tensor> linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  return run("linear", {x, weight, bias});
}

}  // namespace tessel::ops
