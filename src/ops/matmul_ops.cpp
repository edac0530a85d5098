// matmul (batched, broadcasting batch dimensions) and linear (x @ weight^T + bias), on the gemm and
// batched_gemm kernels. Transposed operands are strided views; nothing is transposed in memory.
// Operands are f32, f16 or bf16 and multiply in the dtype gemm_precision.h chooses (the
// "compute" attr); results are f32, gradients have their input's dtype.
#include <optional>

#include "ops/gemm_precision.h"
#include "ops/kernel_util.h"
#include "ops/ops.h"
#include "ops/reference_util.h"
#include "support/thread_pool.h"

namespace tessel::ops {
namespace {

// Block sizes per device kind for `batch` products of [m, k] @ [k, n] (gemm_launch_blocks).
KernelParams gemm_params(const Tensor& t, int64_t batch, int64_t m, int64_t n) {
  return gemm_launch_blocks(t.device()->kind(), batch, m, n);
}

// Batched products of small matrices (attention: [T, D] @ [D, T] per head) get small CPU blocks:
// a block clears and writes back its whole [BM, BN] accumulator, and the default 192 x 256 one
// is 12 times a 64 x 64 product. 72 x 64 is a multiple of every CPU micro-tile (12 x 32, 6 x 16,
// 4 x 16) and holds T = 64 in one block.
KernelParams batched_gemm_params(const Tensor& c, int64_t batch, int64_t m, int64_t n) {
  if (c.device()->kind() == DeviceKind::kCpu && m <= 96 && n <= 128)
    return {{"BM", "72"}, {"BN", "64"}};
  return gemm_params(c, batch, m, n);
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

Expected<TensorMeta> infer_matmul(const std::vector<TensorMeta>& in, const Attrs& attrs) {
  const Shape& a = in[0].shape;
  const Shape& b = in[1].shape;
  if (a.size() < 2 || b.size() < 2 || a.back() != b[b.size() - 2])
    return invalid_argument("matmul: needs [..., M, K] and [..., K, N], got {}", shapes_string(in));
  TESSEL_TRY(gemm_compute_dtype("matmul", in, attrs));
  Shape batch_a(a.begin(), a.end() - 2), batch_b(b.begin(), b.end() - 2);
  Expected<Shape> batch = broadcast_shapes(batch_a, batch_b);
  if (!batch.ok())
    return invalid_argument("matmul: batch dimensions of {} do not broadcast", shapes_string(in));
  Shape out = *batch;
  out.push_back(a[a.size() - 2]);
  out.push_back(b.back());
  return TensorMeta{out, DType::kF32};
}

Expected<DType> compute_of(const std::string& op, const std::vector<Tensor>& in,
                           const Attrs& attrs) {
  std::vector<TensorMeta> meta;
  for (const Tensor& t : in)
    meta.push_back({t.shape(), t.dtype()});
  return gemm_compute_dtype(op, meta, attrs);
}

Expected<Tensor> matmul_forward(const std::vector<Tensor>& in, const Attrs& attrs,
                                const TensorMeta& out) {
  Shape batch(out.shape.begin(), out.shape.end() - 2);
  TESSEL_ASSIGN_OR_RETURN(Tensor c, empty_like_device(out.shape, out.dtype, in[0]));
  if (c.numel() == 0) return c;
  if (in[0].size(-1) == 0) return Tensor::zeros(out.shape, out.dtype, c.device());  // K = 0
  TESSEL_ASSIGN_OR_RETURN(DType compute, compute_of("matmul", in, attrs));
  TESSEL_ASSIGN_OR_RETURN(Tensor a16, gemm_operand(in[0], compute));
  TESSEL_ASSIGN_OR_RETURN(Tensor b16, gemm_operand(in[1], compute));
  const int64_t m = out.shape[out.shape.size() - 2], n = out.shape.back();
  if (in[0].rank() > 2 && in[1].rank() == 2) {
    if (std::optional<Tensor> a2 = rows_matrix(a16)) {  // one [rows, K] @ [K, N] product
      const int64_t rows = a2->size(0), k = a2->size(1);
      View av{*a2, {1, rows, k}, {0, a2->strides()[0], a2->strides()[1]}};
      View bv{b16, {1, k, n}, {0, b16.strides()[0], b16.strides()[1]}};
      View cv{c, {1, rows, n}, {0, n, 1}};
      auto [kernel, params] =
          gemm_kernel(true, a16, b16, compute, batched_gemm_params(c, 1, rows, n));
      TESSEL_TRY(launch_kernel(kernel, params, {av, bv, cv, 1.0, 0.0}));
      return c;
    }
  }
  TESSEL_ASSIGN_OR_RETURN(View a, batched_view(a16, batch));
  TESSEL_ASSIGN_OR_RETURN(View b, batched_view(b16, batch));
  View cv{c, {shape_numel(batch), m, n}, {m * n, n, 1}};
  auto [kernel, params] =
      gemm_kernel(true, a16, b16, compute, batched_gemm_params(c, shape_numel(batch), m, n));
  TESSEL_TRY(launch_kernel(kernel, params, {a, b, cv, 1.0, 0.0}));
  return c;
}

// The inputs as the compute dtype rounds them (16-bit inputs are exact already).
std::vector<RefTensor> rounded_inputs(std::vector<RefTensor> in, const Attrs& attrs, size_t count) {
  if (!attrs.has("compute")) return in;
  const DType compute = static_cast<DType>(attrs.get_int("compute", 0));
  for (size_t i = 0; i < count; ++i)
    for (double& v : in[i].values)
      v = round_to(v, compute);
  return in;
}

// The gradient of a 16-bit input has the input's dtype.
Expected<Tensor> as_input_dtype(const Tensor& grad, const TensorMeta& input) {
  return cast(grad, input.dtype);
}

RefTensor matmul_reference(std::vector<RefTensor> in, const Attrs& attrs) {
  in = rounded_inputs(std::move(in), attrs, 2);
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
  op.attrs = {"compute"};
  op.infer = infer_matmul;
  op.forward = matmul_forward;
  op.reference = matmul_reference;
  op.save_inputs = {true, true};
  // The gradients' gemms compute in the forward's dtype.
  op.backward = [](const BackwardArgs& b) -> Expected<std::vector<Tensor>> {
    TESSEL_ASSIGN_OR_RETURN(DType compute, gemm_compute_dtype("matmul", b.input_meta, b.attrs));
    std::vector<Tensor> grads(2);
    if (b.needs_grad[0]) {  // dA = dC @ B^T, summed over the batch dimensions A was broadcast in
      TESSEL_ASSIGN_OR_RETURN(Tensor bt, transposed(b.inputs[1]));
      TESSEL_ASSIGN_OR_RETURN(Tensor full, matmul(b.grad_output, bt, compute));
      TESSEL_ASSIGN_OR_RETURN(Tensor g, sum_to(full, b.input_meta[0].shape));
      TESSEL_ASSIGN_OR_RETURN(grads[0], as_input_dtype(g, b.input_meta[0]));
    }
    if (b.needs_grad[1]) {  // dB = A^T @ dC
      if (b.inputs[0].rank() > 2 && b.inputs[1].rank() == 2) {
        std::optional<Tensor> a2 = rows_matrix(b.inputs[0]), g2 = rows_matrix(b.grad_output);
        if (a2 && g2) {
          TESSEL_ASSIGN_OR_RETURN(Tensor at, transposed(*a2));
          TESSEL_ASSIGN_OR_RETURN(Tensor g, matmul(at, *g2, compute));
          TESSEL_ASSIGN_OR_RETURN(grads[1], as_input_dtype(g, b.input_meta[1]));
          return grads;
        }
      }
      TESSEL_ASSIGN_OR_RETURN(Tensor at, transposed(b.inputs[0]));
      TESSEL_ASSIGN_OR_RETURN(Tensor full, matmul(at, b.grad_output, compute));
      TESSEL_ASSIGN_OR_RETURN(Tensor g, sum_to(full, b.input_meta[1].shape));
      TESSEL_ASSIGN_OR_RETURN(grads[1], as_input_dtype(g, b.input_meta[1]));
    }
    return grads;
  };
  return op;
}

Expected<TensorMeta> infer_linear(const std::vector<TensorMeta>& in, const Attrs& attrs) {
  const Shape &x = in[0].shape, &w = in[1].shape, &bias = in[2].shape;
  if (x.empty() || w.size() != 2 || bias.size() != 1 || x.back() != w[1] || bias[0] != w[0] ||
      !is_float_operand(in[2].dtype))
    return invalid_argument("linear: needs x [..., K], weight [N, K], bias [N], got {}",
                            shapes_string(in));
  TESSEL_TRY(gemm_compute_dtype("linear", {in[0], in[1]}, attrs));
  Shape out = x;
  out.back() = w[0];
  return TensorMeta{out, DType::kF32};
}

// y [M, N] = x [M, K] @ w^T + bias, one gemm with the bias (in f32) in its epilogue.
Expected<Tensor> linear_forward(const std::vector<Tensor>& in, const Attrs& attrs,
                                const TensorMeta& out) {
  TESSEL_ASSIGN_OR_RETURN(Tensor y, empty_like_device(out.shape, out.dtype, in[0]));
  if (y.numel() == 0) return y;
  TESSEL_ASSIGN_OR_RETURN(DType compute, compute_of("linear", {in[0], in[1]}, attrs));
  TESSEL_ASSIGN_OR_RETURN(Tensor x16, gemm_operand(in[0], compute));
  TESSEL_ASSIGN_OR_RETURN(Tensor w, gemm_operand(in[1], compute));
  TESSEL_ASSIGN_OR_RETURN(Tensor bias, cast(in[2], DType::kF32));
  if (w.size(1) == 0) {  // K = 0: an empty product, so each row is the bias
    TESSEL_ASSIGN_OR_RETURN(Tensor rows, bias.expand(out.shape));
    return copy_on_device(rows);
  }
  TESSEL_ASSIGN_OR_RETURN(View x, rows_view(x16));
  const int64_t m = x.shape[0], n = w.size(0), k = w.size(1);
  View wt{w, {k, n}, {w.strides()[1], w.strides()[0]}};
  View yv{y, {m, n}, {n, 1}};
  KernelParams params = gemm_params(y, 1, m, n);
  params["BIAS"] = "1";
  auto [kernel, kernel_params] = gemm_kernel(false, x16, w, compute, std::move(params));
  TESSEL_TRY(launch_kernel(kernel, kernel_params, {x, wt, yv, bias, 1.0, 0.0}));
  return y;
}

RefTensor linear_reference(std::vector<RefTensor> in, const Attrs& attrs) {
  in = rounded_inputs(std::move(in), attrs, 2);
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
  op.attrs = {"compute"};
  op.infer = infer_linear;
  op.forward = linear_forward;
  op.reference = linear_reference;
  op.save_inputs = {true, true, false};
  op.backward = [](const BackwardArgs& b) -> Expected<std::vector<Tensor>> {
    TESSEL_ASSIGN_OR_RETURN(
        DType compute, gemm_compute_dtype("linear", {b.input_meta[0], b.input_meta[1]}, b.attrs));
    std::vector<Tensor> grads(3);
    const int64_t n = b.input_meta[1].shape[0];
    TESSEL_ASSIGN_OR_RETURN(Tensor g2, reshape(b.grad_output, {-1, n}));  // [M, N]
    if (b.needs_grad[0]) {                                                // dx = dy @ w
      TESSEL_ASSIGN_OR_RETURN(Tensor dx, matmul(g2, b.inputs[1], compute));
      TESSEL_ASSIGN_OR_RETURN(Tensor shaped, reshape(dx, b.input_meta[0].shape));
      TESSEL_ASSIGN_OR_RETURN(grads[0], as_input_dtype(shaped, b.input_meta[0]));
    }
    if (b.needs_grad[1]) {  // dw = dy^T @ x, added straight into the leaf's gradient if it has one
      TESSEL_ASSIGN_OR_RETURN(Tensor gt, g2.transpose(0, 1));
      TESSEL_ASSIGN_OR_RETURN(Tensor x2, reshape(b.inputs[0], {-1, b.input_meta[1].shape[1]}));
      const Tensor& into = b.grad_into.empty() ? Tensor() : b.grad_into[1];
      if (into.defined() && into.dtype() == DType::kF32) {
        TESSEL_ASSIGN_OR_RETURN(Tensor g16, gemm_operand(gt, compute));
        TESSEL_ASSIGN_OR_RETURN(Tensor x16, gemm_operand(x2, compute));
        const int64_t m = x16.size(0), k = x16.size(1);
        View a{g16, {1, n, m}, {0, g16.strides()[0], g16.strides()[1]}};
        View x{x16, {1, m, k}, {0, x16.strides()[0], x16.strides()[1]}};
        View c{into, {1, n, k}, {0, k, 1}};
        auto [kernel, params] = gemm_kernel(true, g16, x16, compute, gemm_params(into, 1, n, k));
        TESSEL_TRY(launch_kernel(kernel, params, {a, x, c, 1.0, 1.0}));
      } else {
        TESSEL_ASSIGN_OR_RETURN(Tensor dw, matmul(gt, x2, compute));
        TESSEL_ASSIGN_OR_RETURN(grads[1], as_input_dtype(dw, b.input_meta[1]));
      }
    }
    if (b.needs_grad[2]) {  // dbias = column sums of dy
      const Tensor& into = b.grad_into.empty() ? Tensor() : b.grad_into[2];
      if (into.defined() && into.dtype() == DType::kF32) {
        TESSEL_TRY(sum_rows_into(g2, into));
      } else {
        TESSEL_ASSIGN_OR_RETURN(Tensor db, sum(g2, {0}));
        TESSEL_ASSIGN_OR_RETURN(grads[2], as_input_dtype(db, b.input_meta[2]));
      }
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
Expected<Tensor> matmul(const Tensor& a, const Tensor& b, DType compute) {
  return run("matmul", {a, b}, Attrs().set("compute", static_cast<int64_t>(compute)));
}
Expected<Tensor> linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  return run("linear", {x, weight, bias});
}
Expected<Tensor> linear(const Tensor& x, const Tensor& weight, const Tensor& bias, DType compute) {
  return run("linear", {x, weight, bias}, Attrs().set("compute", static_cast<int64_t>(compute)));
}

}  // namespace tessel::ops
