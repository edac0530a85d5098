// The sparse OpDefs (see sparse_ops.h): shape checks, kernel launches (kernels/sparse.tile),
// backward rules and plain-C++ references in double.
#include "sparse/sparse_ops.h"

#include <algorithm>
#include <unordered_map>

#include "ops/kernel_util.h"
#include "ops/ops.h"

namespace tessel::sparse {
namespace {

using ops::Attrs;
using ops::BackwardArgs;
using ops::KernelArg;
using ops::OpDef;
using ops::RefTensor;
using ops::TensorMeta;
using ops::View;

bool is_index(const TensorMeta& m) {
  return m.dtype == DType::kI64 && m.shape.size() == 1;
}
bool is_values(const TensorMeta& m) {
  return m.dtype == DType::kF32 && m.shape.size() == 1;
}

Status check_indices(const std::string& op, const std::vector<TensorMeta>& in,
                     std::initializer_list<size_t> which) {
  for (size_t i : which)
    if (!is_index(in[i]))
      return invalid_argument("{}: input {} must be i64 [n], got {}", op, i,
                              ops::shapes_string(in));
  return ok_status();
}

// The shared checks of the CSR products: indptr [M + 1], cols/values/rows [NNZ], the
// transpose's indptr [K + 1], its cols and permutation [NNZ]; `dense` is B [K, N] or x [K].
Expected<TensorMeta> infer_csr_product(const std::string& op, const std::vector<TensorMeta>& in,
                                       int dense_rank) {
  TESSEL_TRY(check_indices(op, in, {0, 1, 4, 5, 6, 7}));
  const int64_t nnz = in[1].shape[0], m = in[0].shape[0] - 1, k = in[5].shape[0] - 1;
  const TensorMeta& b = in[3];
  if (!is_values(in[2]) || in[2].shape[0] != nnz || in[4].shape[0] != nnz ||
      in[6].shape[0] != nnz || in[7].shape[0] != nnz || m < 0 || k < 0 || b.dtype != DType::kF32 ||
      static_cast<int>(b.shape.size()) != dense_rank || b.shape[0] != k)
    return invalid_argument(
        "{}: needs a CSR matrix of {} x {} with {} values and an f32 {} of {} rows, got {}", op, m,
        k, nnz, dense_rank == 2 ? "[K, N]" : "[K]", k, ops::shapes_string(in));
  Shape out{m};
  if (dense_rank == 2) out.push_back(b.shape[1]);
  return TensorMeta{out, DType::kF32};
}

Expected<TensorMeta> infer_coo_product(const std::string& op, const std::vector<TensorMeta>& in,
                                       const Attrs& attrs, int dense_rank) {
  TESSEL_TRY(check_indices(op, in, {0, 1}));
  const int64_t nnz = in[0].shape[0], m = attrs.get_int("rows", -1);
  const TensorMeta& b = in[3];
  if (m < 0 || !is_values(in[2]) || in[1].shape[0] != nnz || in[2].shape[0] != nnz ||
      b.dtype != DType::kF32 || static_cast<int>(b.shape.size()) != dense_rank)
    return invalid_argument(
        "{}: needs rows, cols, f32 values of one length, an f32 {} and attr rows >= 0, got {} "
        "(rows={})",
        op, dense_rank == 2 ? "[K, N]" : "[K]", ops::shapes_string(in), m);
  Shape out{m};
  if (dense_rank == 2) out.push_back(b.shape[1]);
  return TensorMeta{out, DType::kF32};
}

// A vector [n] as the [n, 1] matrix the row kernels take.
View column(const Tensor& v) {
  return View{v, {v.numel(), 1}, {v.strides()[0], 0}};
}

// out[k] = dot(G[rows[k], :], B[cols[k], :]).
Expected<Tensor> sddmm(const Tensor& rows, const Tensor& cols, const KernelArg& g,
                       const KernelArg& b) {
  TESSEL_ASSIGN_OR_RETURN(Tensor out, Tensor::empty({rows.numel()}, DType::kF32, rows.device()));
  if (out.numel() == 0) return out;
  TESSEL_TRY(ops::launch_kernel("sddmm", {{"T", "f32"}}, {rows, cols, g, b, out}));
  return out;
}

Expected<Tensor> gather(const Tensor& src, const Tensor& idx) {
  TESSEL_ASSIGN_OR_RETURN(Tensor out, Tensor::empty(idx.shape(), src.dtype(), src.device()));
  if (out.numel() == 0) return out;
  TESSEL_TRY(ops::launch_kernel("gather_values", {}, {src, idx, out}));
  return out;
}

Expected<Tensor> gather_pairs(const Tensor& rows, const Tensor& cols, const Tensor& d) {
  TESSEL_ASSIGN_OR_RETURN(Tensor out, Tensor::empty({rows.numel()}, DType::kF32, rows.device()));
  if (out.numel() == 0) return out;
  TESSEL_ASSIGN_OR_RETURN(Tensor dc, ops::contiguous_on_device(d));
  TESSEL_TRY(ops::launch_kernel("gather_pairs", {{"T", "f32"}}, {rows, cols, dc, out}));
  return out;
}

// C = S B for CSR S given as (indptr, cols, values); B a [K, N] tensor or a [K, 1] view. N
// that splits into tiles goes to spmm_csr_tiled, other N to spmm_csr.
Expected<Tensor> run_spmm_csr(const Tensor& indptr, const Tensor& cols, const Tensor& values,
                              const Tensor& b) {
  const int64_t m = indptr.numel() - 1, k = b.size(0), n = b.size(1);
  TESSEL_ASSIGN_OR_RETURN(Tensor bc, ops::contiguous_on_device(b));
  TESSEL_ASSIGN_OR_RETURN(Tensor c, ops::empty_like_device({m, n}, DType::kF32, b));
  if (c.numel() == 0) return c;
  if (const int64_t bn = csr_tile(b.device(), n); bn > 0) {
    const int64_t nt = n / bn;
    TESSEL_TRY(ops::launch_kernel("spmm_csr_tiled", {{"T", "f32"}, {"BN", std::to_string(bn)}},
                                  {indptr, cols, values, View{bc, {k, nt, bn}, {n, bn, 1}},
                                   View{c, {m, nt, bn}, {n, bn, 1}}, kCsrBlockRows}));
    return c;
  }
  TESSEL_TRY(
      ops::launch_kernel("spmm_csr", spmm_params(b.device(), n), {indptr, cols, values, bc, c}));
  return c;
}

Expected<Tensor> run_spmm_coo(const Tensor& rows, const Tensor& cols, const Tensor& values,
                              const Tensor& b, int64_t m) {
  TESSEL_ASSIGN_OR_RETURN(Tensor bc, ops::contiguous_on_device(b));
  TESSEL_ASSIGN_OR_RETURN(Tensor c, Tensor::zeros({m, b.size(1)}, DType::kF32, b.device()));
  if (c.numel() == 0 || rows.numel() == 0) return c;
  ops::KernelParams params{{"T", "f32"}};
  // Each block owns BN columns: narrow tiles keep both cores busy when N is small.
  if (b.device()->kind() == DeviceKind::kCpu) params["BN"] = b.size(1) <= 64 ? "32" : "64";
  TESSEL_TRY(ops::launch_kernel("spmm_coo", params, {rows, cols, values, bc, c}));
  return c;
}

Expected<Tensor> run_spmv_csr(const Tensor& indptr, const Tensor& cols, const Tensor& values,
                              const Tensor& x) {
  TESSEL_ASSIGN_OR_RETURN(Tensor y, Tensor::empty({indptr.numel() - 1}, DType::kF32, x.device()));
  if (y.numel() == 0) return y;
  TESSEL_TRY(ops::launch_kernel(
      "spmv_csr", {{"T", "f32"}},
      {indptr, cols, values, x, y, spmv_groups(x.device(), y.numel(), cols.numel())}));
  return y;
}

Expected<Tensor> run_spmv_coo(const Tensor& rows, const Tensor& cols, const Tensor& values,
                              const Tensor& x, int64_t m) {
  TESSEL_ASSIGN_OR_RETURN(Tensor y, Tensor::zeros({m}, DType::kF32, x.device()));
  if (y.numel() == 0 || rows.numel() == 0) return y;
  TESSEL_TRY(ops::launch_kernel("spmv_coo", {{"T", "f32"}}, {rows, cols, values, x, y}));
  return y;
}

// ---- references (tests only) ----

// The dense [m, k] matrix of (rows, cols, values) as reference tensors hold them.
std::vector<double> dense_of(const RefTensor& rows, const RefTensor& cols, const RefTensor& values,
                             int64_t m, int64_t k) {
  std::vector<double> d(static_cast<size_t>(m * k), 0.0);
  for (size_t i = 0; i < values.values.size(); ++i)
    d[static_cast<int64_t>(rows.values[i]) * k + static_cast<int64_t>(cols.values[i])] +=
        values.values[i];
  return d;
}

RefTensor expand_indptr(const RefTensor& indptr) {
  RefTensor rows;
  for (size_t r = 0; r + 1 < indptr.values.size(); ++r)
    for (double k = indptr.values[r]; k < indptr.values[r + 1]; ++k)
      rows.values.push_back(static_cast<double>(r));
  rows.shape = {static_cast<int64_t>(rows.values.size())};
  return rows;
}

// S [m, k] times b [k] or [k, n].
RefTensor product(const std::vector<double>& s, int64_t m, int64_t k, const RefTensor& b) {
  const int64_t n = b.shape.size() == 2 ? b.shape[1] : 1;
  RefTensor out;
  out.shape = b.shape.size() == 2 ? Shape{m, n} : Shape{m};
  out.values.assign(static_cast<size_t>(m * n), 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t p = 0; p < k; ++p)
      for (int64_t j = 0; j < n; ++j)
        out.values[i * n + j] += s[i * k + p] * b.values[p * n + j];
  return out;
}

RefTensor csr_product_reference(const std::vector<RefTensor>& in, const Attrs&) {
  const int64_t m = in[0].shape[0] - 1, k = in[3].shape[0];
  return product(dense_of(expand_indptr(in[0]), in[1], in[2], m, k), m, k, in[3]);
}

RefTensor coo_product_reference(const std::vector<RefTensor>& in, const Attrs& attrs) {
  const int64_t m = attrs.get_int("rows", 0), k = in[3].shape[0];
  return product(dense_of(in[0], in[1], in[2], m, k), m, k, in[3]);
}

// ---- backward rules ----

// Gradients of a product S B (B [K, N], or x [K] when `vector`) given the output's gradient:
// values get SDDMM(dC, B); B gets S^T dC by `transpose_product`.
Expected<std::vector<Tensor>> product_backward(
    const BackwardArgs& a, const Tensor& rows, const Tensor& cols, size_t values_at,
    size_t dense_at, bool vector,
    const std::function<Expected<Tensor>(const Tensor& grad)>& transpose_product) {
  std::vector<Tensor> grads(a.input_meta.size());
  const Tensor& b = a.inputs[dense_at];
  if (a.needs_grad[values_at]) {
    if (vector) {
      TESSEL_ASSIGN_OR_RETURN(grads[values_at],
                              sddmm(rows, cols, column(a.grad_output), column(b)));
    } else {
      TESSEL_ASSIGN_OR_RETURN(Tensor g, ops::contiguous_on_device(a.grad_output));
      TESSEL_ASSIGN_OR_RETURN(Tensor bc, ops::contiguous_on_device(b));
      TESSEL_ASSIGN_OR_RETURN(grads[values_at], sddmm(rows, cols, g, bc));
    }
  }
  if (a.needs_grad[dense_at]) {
    TESSEL_ASSIGN_OR_RETURN(grads[dense_at], transpose_product(a.grad_output));
  }
  return grads;
}

OpDef spmm_csr_op(bool vector) {
  OpDef op;
  op.name = vector ? "spmv_csr" : "spmm_csr";
  op.arity = 8;
  op.infer = [vector, name = op.name](const std::vector<TensorMeta>& in, const Attrs&) {
    return infer_csr_product(name, in, vector ? 1 : 2);
  };
  op.forward = [vector](const std::vector<Tensor>& in, const Attrs&, const TensorMeta&) {
    if (vector) return run_spmv_csr(in[0], in[1], in[2], in[3]);
    return run_spmm_csr(in[0], in[1], in[2], in[3]);
  };
  op.backward = [vector](const BackwardArgs& a) {
    const std::vector<Tensor>& in = a.inputs;
    return product_backward(a, in[4], in[1], 2, 3, vector,
                            [&](const Tensor& g) -> Expected<Tensor> {
                              TESSEL_ASSIGN_OR_RETURN(Tensor tv, gather(in[2], in[7]));
                              if (vector) {
                                TESSEL_ASSIGN_OR_RETURN(Tensor gc, ops::contiguous_on_device(g));
                                return run_spmv_csr(in[5], in[6], tv, gc);
                              }
                              return run_spmm_csr(in[5], in[6], tv, g);
                            });
  };
  op.save_inputs = std::vector<bool>(8, true);
  op.differentiable = {false, false, true, true, false, false, false, false};
  op.reference = csr_product_reference;
  return op;
}

OpDef spmm_coo_op(bool vector) {
  OpDef op;
  op.name = vector ? "spmv_coo" : "spmm_coo";
  op.arity = 4;
  op.attrs = {"rows"};
  op.infer = [vector, name = op.name](const std::vector<TensorMeta>& in, const Attrs& attrs) {
    return infer_coo_product(name, in, attrs, vector ? 1 : 2);
  };
  op.forward = [vector](const std::vector<Tensor>& in, const Attrs& attrs, const TensorMeta&) {
    int64_t m = attrs.get_int("rows", 0);
    if (vector) return run_spmv_coo(in[0], in[1], in[2], in[3], m);
    return run_spmm_coo(in[0], in[1], in[2], in[3], m);
  };
  op.backward = [vector](const BackwardArgs& a) {
    const std::vector<Tensor>& in = a.inputs;
    const int64_t k = a.input_meta[3].shape[0];
    // S^T's COO is S's with rows and columns swapped: no permutation needed.
    return product_backward(a, in[0], in[1], 2, 3, vector,
                            [&](const Tensor& g) -> Expected<Tensor> {
                              TESSEL_ASSIGN_OR_RETURN(Tensor gc, ops::contiguous_on_device(g));
                              if (vector) return run_spmv_coo(in[1], in[0], in[2], gc, k);
                              return run_spmm_coo(in[1], in[0], in[2], gc, k);
                            });
  };
  op.save_inputs = {true, true, true, true};
  op.differentiable = {false, false, true, true};
  op.reference = coo_product_reference;
  return op;
}

OpDef spmm_bsr_op() {
  OpDef op;
  op.name = "spmm_bsr";
  op.arity = 4;
  op.attrs = {"rows"};
  op.infer = [](const std::vector<TensorMeta>& in, const Attrs& attrs) -> Expected<TensorMeta> {
    TESSEL_TRY(check_indices("spmm_bsr", in, {0, 1}));
    const int64_t m = attrs.get_int("rows", -1);
    const TensorMeta &v = in[2], &b = in[3];
    if (m < 0 || v.dtype != DType::kF32 || v.shape.size() != 3 || v.shape[0] != in[1].shape[0] ||
        b.dtype != DType::kF32 || b.shape.size() != 2 ||
        in[0].shape[0] - 1 !=
            (m + std::max<int64_t>(v.shape[1], 1) - 1) / std::max<int64_t>(v.shape[1], 1))
      return invalid_argument(
          "spmm_bsr: needs indptr, block cols, f32 blocks [NB, BR, BC] and f32 [K, N] for attr "
          "rows, got {} (rows={})",
          ops::shapes_string(in), m);
    return TensorMeta{{m, b.shape[1]}, DType::kF32};
  };
  op.forward = [](const std::vector<Tensor>& in, const Attrs& attrs,
                  const TensorMeta& out) -> Expected<Tensor> {
    TESSEL_ASSIGN_OR_RETURN(Tensor bc, ops::contiguous_on_device(in[3]));
    TESSEL_ASSIGN_OR_RETURN(Tensor c, ops::empty_like_device(out.shape, DType::kF32, in[3]));
    (void)attrs;
    if (c.numel() == 0) return c;
    ops::KernelParams params = spmm_params(bc.device(), bc.size(1));
    params["BR"] = std::to_string(in[2].size(1));
    params["BC"] = std::to_string(in[2].size(2));
    TESSEL_TRY(ops::launch_kernel("spmm_bsr", params, {in[0], in[1], in[2], bc, c}));
    return c;
  };
  op.differentiable = {false, false, false, false};
  op.reference = [](const std::vector<RefTensor>& in, const Attrs& attrs) {
    const int64_t m = attrs.get_int("rows", 0), k = in[3].shape[0];
    const int64_t br = in[2].shape[1], bc = in[2].shape[2];
    std::vector<double> s(static_cast<size_t>(m * k), 0.0);
    for (size_t blk_row = 0; blk_row + 1 < in[0].values.size(); ++blk_row)
      for (auto b = static_cast<int64_t>(in[0].values[blk_row]); b < in[0].values[blk_row + 1]; ++b)
        for (int64_t i = 0; i < br; ++i)
          for (int64_t j = 0; j < bc; ++j) {
            int64_t r = static_cast<int64_t>(blk_row) * br + i;
            int64_t c = static_cast<int64_t>(in[1].values[b]) * bc + j;
            if (r < m && c < k) s[r * k + c] = in[2].values[(b * br + i) * bc + j];
          }
    return product(s, m, k, in[3]);
  };
  return op;
}

OpDef sparse_add_dense_op() {
  OpDef op;
  op.name = "sparse_add_dense";
  op.arity = 4;
  op.infer = [](const std::vector<TensorMeta>& in, const Attrs&) -> Expected<TensorMeta> {
    TESSEL_TRY(check_indices("sparse_add_dense", in, {0, 1}));
    if (!is_values(in[2]) || in[2].shape[0] != in[0].shape[0] || in[1].shape[0] != in[0].shape[0] ||
        in[3].dtype != DType::kF32 || in[3].shape.size() != 2)
      return invalid_argument(
          "sparse_add_dense: needs rows, cols, f32 values of one length and an f32 [M, K], got {}",
          ops::shapes_string(in));
    return in[3];
  };
  op.forward = [](const std::vector<Tensor>& in, const Attrs&,
                  const TensorMeta&) -> Expected<Tensor> {
    TESSEL_ASSIGN_OR_RETURN(Tensor out, ops::empty_like_device(in[3].shape(), DType::kF32, in[3]));
    if (out.numel() > 0) TESSEL_TRY(ops::launch_kernel("copy_rows", {}, {in[3], out}));
    if (in[0].numel() > 0)
      TESSEL_TRY(ops::launch_kernel("scatter_add", {{"T", "f32"}}, {in[0], in[1], in[2], out}));
    return out;
  };
  op.backward = [](const BackwardArgs& a) -> Expected<std::vector<Tensor>> {
    std::vector<Tensor> grads(4);
    if (a.needs_grad[2]) {
      TESSEL_ASSIGN_OR_RETURN(grads[2], gather_pairs(a.inputs[0], a.inputs[1], a.grad_output));
    }
    if (a.needs_grad[3]) grads[3] = a.grad_output;
    return grads;
  };
  op.save_inputs = {true, true, false, false};
  op.differentiable = {false, false, true, true};
  op.reference = [](const std::vector<RefTensor>& in, const Attrs&) {
    RefTensor out = in[3];
    const int64_t k = in[3].shape[1];
    for (size_t i = 0; i < in[2].values.size(); ++i)
      out.values[static_cast<int64_t>(in[0].values[i]) * k +
                 static_cast<int64_t>(in[1].values[i])] += in[2].values[i];
    return out;
  };
  return op;
}

OpDef sparse_to_dense_op() {
  OpDef op;
  op.name = "sparse_to_dense";
  op.arity = 3;
  op.attrs = {"rows", "cols"};
  op.infer = [](const std::vector<TensorMeta>& in, const Attrs& attrs) -> Expected<TensorMeta> {
    TESSEL_TRY(check_indices("sparse_to_dense", in, {0, 1}));
    const int64_t m = attrs.get_int("rows", -1), k = attrs.get_int("cols", -1);
    if (m < 0 || k < 0 || !is_values(in[2]) || in[2].shape[0] != in[0].shape[0] ||
        in[1].shape[0] != in[0].shape[0])
      return invalid_argument(
          "sparse_to_dense: needs rows, cols, f32 values of one length and attrs rows, cols >= 0, "
          "got {}",
          ops::shapes_string(in));
    return TensorMeta{{m, k}, DType::kF32};
  };
  op.forward = [](const std::vector<Tensor>& in, const Attrs&,
                  const TensorMeta& out) -> Expected<Tensor> {
    TESSEL_ASSIGN_OR_RETURN(Tensor d, Tensor::zeros(out.shape, DType::kF32, in[2].device()));
    if (in[0].numel() > 0)
      TESSEL_TRY(ops::launch_kernel("scatter_add", {{"T", "f32"}}, {in[0], in[1], in[2], d}));
    return d;
  };
  op.backward = [](const BackwardArgs& a) -> Expected<std::vector<Tensor>> {
    std::vector<Tensor> grads(3);
    TESSEL_ASSIGN_OR_RETURN(grads[2], gather_pairs(a.inputs[0], a.inputs[1], a.grad_output));
    return grads;
  };
  op.save_inputs = {true, true, false};
  op.differentiable = {false, false, true};
  op.reference = [](const std::vector<RefTensor>& in, const Attrs& attrs) {
    const int64_t m = attrs.get_int("rows", 0), k = attrs.get_int("cols", 0);
    return RefTensor{{m, k}, dense_of(in[0], in[1], in[2], m, k)};
  };
  return op;
}

OpDef gather_values_op() {
  OpDef op;
  op.name = "gather_values";
  op.arity = 3;
  op.infer = [](const std::vector<TensorMeta>& in, const Attrs&) -> Expected<TensorMeta> {
    TESSEL_TRY(check_indices("gather_values", in, {1, 2}));
    if (!is_values(in[0]) || in[1].shape != in[0].shape || in[2].shape != in[0].shape)
      return invalid_argument(
          "gather_values: needs f32 values and two permutations of their length, got {}",
          ops::shapes_string(in));
    return in[0];
  };
  op.forward = [](const std::vector<Tensor>& in, const Attrs&, const TensorMeta&) {
    return gather(in[0], in[1]);
  };
  op.backward = [](const BackwardArgs& a) -> Expected<std::vector<Tensor>> {
    std::vector<Tensor> grads(3);
    TESSEL_ASSIGN_OR_RETURN(Tensor g, ops::contiguous_on_device(a.grad_output));
    TESSEL_ASSIGN_OR_RETURN(grads[0], gather(g, a.inputs[2]));
    return grads;
  };
  op.save_inputs = {false, false, true};
  op.differentiable = {true, false, false};
  op.reference = [](const std::vector<RefTensor>& in, const Attrs&) {
    RefTensor out = in[0];
    for (size_t i = 0; i < out.values.size(); ++i)
      out.values[i] = in[0].values[static_cast<int64_t>(in[1].values[i])];
    return out;
  };
  return op;
}

}  // namespace

ops::KernelParams spmm_params(Device* device, int64_t n) {
  ops::KernelParams params{{"T", "f32"}};
  if (device->kind() != DeviceKind::kCpu) return params;
  // Narrower tiles for narrow operands; whole tiles where they fit (384 = 3 x 128). Tiles of B
  // that fit L2 (BN = 32 or 64 at K = 4096, rows fastest) measured slower than 256 on this Zen 4:
  // the per-block work shrinks while the rows of B still come from L3 at this density.
  const int64_t bn = n <= 64                                                    ? 64
                     : (n <= 128 || (n % 256 != 0 && n % 128 == 0 && n < 1024)) ? 128
                                                                                : 256;
  params["BN"] = std::to_string(bn);
  return params;
}

int64_t spmv_cpu_blocks(int64_t rows, int64_t nnz) {
  const int64_t groups = std::max<int64_t>(1, (rows + kSpmvRows - 1) / kSpmvRows);
  return std::clamp<int64_t>(nnz / kSpmvBlockNonzeros, 1, groups);
}

int64_t spmv_groups(Device* device, int64_t rows, int64_t nnz) {
  if (device->kind() != DeviceKind::kCpu) return 1;
  const int64_t groups = (rows + kSpmvRows - 1) / kSpmvRows;
  const int64_t blocks = spmv_cpu_blocks(rows, nnz);
  return (groups + blocks - 1) / blocks;
}

int64_t csr_tile(Device* device, int64_t n) {
  if (n <= 0) return 0;
  if (device->kind() != DeviceKind::kCpu) return n % 64 == 0 ? 64 : 0;
  for (int64_t bn : {256, 128, 64})
    if (n % bn == 0) return bn;
  // A narrow operand is one tile of its own width (one specialisation per width).
  return n <= 256 ? n : 0;
}

const std::vector<OpDef>& sparse_ops() {
  static const std::vector<OpDef> ops = [] {
    std::vector<OpDef> list{spmm_csr_op(false),   spmm_coo_op(false), spmm_bsr_op(),
                            spmm_csr_op(true),    spmm_coo_op(true),  sparse_add_dense_op(),
                            sparse_to_dense_op(), gather_values_op()};
    for (OpDef& op : list) {
      op.save_inputs.resize(op.arity, false);
      op.differentiable.resize(op.arity, true);
    }
    return list;
  }();
  return ops;
}

Expected<const OpDef*> find_sparse_op(std::string_view name) {
  for (const OpDef& op : sparse_ops())
    if (op.name == name) return &op;
  return not_found("no sparse op named '{}'", name);
}

}  // namespace tessel::sparse
