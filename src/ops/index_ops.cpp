// Indexing along one dimension (kernels/index.tile), with x seen as [outer, N, inner]:
//   index_select(x, index; dim)   torch.index_select, and ONNX Gather: index of any rank, the
//                                 output x.shape[:dim] + index.shape + x.shape[dim + 1:]
//   gather(x, index; dim)         torch.gather (ONNX GatherElements): index as x's rank
//   scatter_add(x, index, src; dim)  torch.scatter_add (ONNX ScatterElements, add)
// Ids lie in [-N, N): a negative one counts from the end, as ONNX's ops take them (PyTorch
// raises for negatives); anything else is out_of_range, checked on the ids' device. Gradients
// run without atomics: each block owns a tile of the result and scans the ids in order.
#include "ops/index_check.h"
#include "ops/kernel_util.h"
#include "ops/ops.h"
#include "ops/reference_util.h"

namespace tessel::ops {
namespace {

// dim in [0, rank), from a possibly negative attr.
Expected<int64_t> dim_of(const std::string& op, const Attrs& a, int64_t rank) {
  int64_t dim = a.get_int("dim", 0);
  if (dim < -rank || dim >= rank)
    return invalid_argument("{}: dim {} is out of range for rank {}", op, dim, rank);
  return dim < 0 ? dim + rank : dim;
}

struct Split {
  int64_t outer = 1, n = 1, inner = 1;
};
Split split_at(const Shape& s, int64_t dim) {
  Split p;
  for (int64_t d = 0; d < static_cast<int64_t>(s.size()); ++d)
    (d < dim ? p.outer : d == dim ? p.n : p.inner) *= s[d];
  return p;
}

// A contiguous copy of t (when it is not) as [outer, m, inner].
Expected<View> as_rows(const Tensor& t, int64_t outer, int64_t m, int64_t inner) {
  TESSEL_ASSIGN_OR_RETURN(Tensor c, contiguous_on_device(t));
  return View{c, {outer, m, inner}, {m * inner, inner, 1}};
}

// ---- index_select ----

Expected<TensorMeta> infer_index_select(const std::vector<TensorMeta>& in, const Attrs& a) {
  if (!is_floating_point(in[0].dtype) || in[0].shape.empty() || in[1].dtype != DType::kI64)
    return invalid_argument("index_select: needs a float x of rank >= 1 and i64 ids, got {}",
                            shapes_string(in));
  TESSEL_ASSIGN_OR_RETURN(int64_t dim, dim_of("index_select", a, in[0].shape.size()));
  Shape out(in[0].shape.begin(), in[0].shape.begin() + dim);
  out.insert(out.end(), in[1].shape.begin(), in[1].shape.end());
  out.insert(out.end(), in[0].shape.begin() + dim + 1, in[0].shape.end());
  return TensorMeta{out, in[0].dtype};
}

OpDef index_select_op() {
  OpDef op;
  op.name = "index_select";
  op.arity = 2;
  op.attrs = {"dim"};
  op.infer = infer_index_select;
  op.forward = [](const std::vector<Tensor>& in, const Attrs& a,
                  const TensorMeta& out) -> Expected<Tensor> {
    const int64_t dim = dim_of("index_select", a, in[0].rank()).value();
    const Split p = split_at(in[0].shape(), dim);
    TESSEL_TRY(check_indices("index_select", "index", in[1], -p.n, p.n));
    TESSEL_ASSIGN_OR_RETURN(View x, as_rows(in[0], p.outer, p.n, p.inner));
    TESSEL_ASSIGN_OR_RETURN(Tensor ids, contiguous_on_device(in[1]));
    const int64_t m = ids.numel();
    TESSEL_ASSIGN_OR_RETURN(Tensor y, empty_like_device(out.shape, out.dtype, in[0]));
    TESSEL_TRY(launch_kernel(
        "index_rows", {},
        {x, View{ids, {m}, {1}}, View{y, {p.outer, m, p.inner}, {m * p.inner, p.inner, 1}}}));
    return y;
  };
  op.reference = [](const std::vector<RefTensor>& in, const Attrs& a) {
    const int64_t dim = dim_of("index_select", a, in[0].shape.size()).value();
    const Split p = split_at(in[0].shape, dim);
    const int64_t m = reference::numel(in[1].shape);
    RefTensor out{infer_index_select({{in[0].shape}, {in[1].shape, DType::kI64}}, a)->shape, {}};
    for (int64_t o = 0; o < p.outer; ++o)
      for (int64_t r = 0; r < m; ++r) {
        int64_t id = static_cast<int64_t>(in[1].values[r]);
        if (id < 0) id += p.n;
        for (int64_t i = 0; i < p.inner; ++i)
          out.values.push_back(in[0].values[(o * p.n + id) * p.inner + i]);
      }
    return out;
  };
  op.save_inputs = {false, true};
  op.differentiable = {true, false};
  op.backward = [](const BackwardArgs& b) -> Expected<std::vector<Tensor>> {
    const Shape& xs = b.input_meta[0].shape;
    const int64_t dim = dim_of("index_select", b.attrs, xs.size()).value();
    const Split p = split_at(xs, dim);
    TESSEL_ASSIGN_OR_RETURN(Tensor ids, contiguous_on_device(b.inputs[1]));
    const int64_t m = ids.numel();
    TESSEL_ASSIGN_OR_RETURN(View g, as_rows(b.grad_output, p.outer, m, p.inner));
    TESSEL_ASSIGN_OR_RETURN(Tensor dx, empty_like_device(xs, b.grad_output.dtype(), ids));
    TESSEL_TRY(launch_kernel(
        "index_rows_grad", {{"T", dtype_name(dx.dtype())}},
        {View{ids, {m}, {1}}, g, View{dx, {p.outer, p.n, p.inner}, {p.n * p.inner, p.inner, 1}}}));
    return std::vector<Tensor>{dx, Tensor()};
  };
  return op;
}

// ---- gather and scatter_add ----

// As PyTorch: index has x's rank and no larger a size than x's except along dim (and than src's
// in every dimension, for scatter_add; src of index's rank and x's dtype).
Status check_elements_shapes(const std::string& op, const std::vector<TensorMeta>& in,
                             int64_t dim) {
  const Shape &x = in[0].shape, &index = in[1].shape;
  bool ok = index.size() == x.size();
  for (size_t d = 0; ok && d < x.size(); ++d)
    ok = static_cast<int64_t>(d) == dim || index[d] <= x[d];
  if (in.size() == 3) {
    ok = ok && in[2].shape.size() == index.size() && in[2].dtype == in[0].dtype;
    for (size_t d = 0; ok && d < index.size(); ++d)
      ok = index[d] <= in[2].shape[d];
  }
  if (!ok)
    return invalid_argument(
        "{}: index must have x's rank and sizes no larger than x's except along dim {}{}, got {}",
        op, dim, in.size() == 3 ? " (and than src's in every dimension)" : "", shapes_string(in));
  return ok_status();
}

// The part of t [..] that index covers: sizes of `like` in every dimension (but `keep`).
Expected<Tensor> covered(const Tensor& t, const Shape& like, int64_t keep) {
  Tensor v = t;
  for (size_t d = 0; d < like.size(); ++d)
    if (static_cast<int64_t>(d) != keep && like[d] < t.size(d)) {
      TESSEL_ASSIGN_OR_RETURN(v, slice(v, static_cast<int64_t>(d), 0, like[d]));
    }
  return v;
}

// `full` with its leading corner (the covered part, from dimension `from` on) replaced by `part`.
Expected<Tensor> embed(const Tensor& full, const Tensor& part, size_t from = 0) {
  for (size_t d = from; d < static_cast<size_t>(full.rank()); ++d) {
    const int64_t k = part.size(d);
    if (k == full.size(d)) continue;
    TESSEL_ASSIGN_OR_RETURN(Tensor head, slice(full, static_cast<int64_t>(d), 0, k));
    TESSEL_ASSIGN_OR_RETURN(Tensor tail, slice(full, static_cast<int64_t>(d), k, full.size(d)));
    TESSEL_ASSIGN_OR_RETURN(Tensor inner, embed(head, part, d + 1));
    return concat(inner, tail, static_cast<int64_t>(d));
  }
  return part;
}

Expected<TensorMeta> infer_elements(const std::string& op, const std::vector<TensorMeta>& in,
                                    const Attrs& a) {
  if (!is_floating_point(in[0].dtype) || in[0].shape.empty() || in[1].dtype != DType::kI64)
    return invalid_argument("{}: needs a float x of rank >= 1 and i64 ids, got {}", op,
                            shapes_string(in));
  TESSEL_ASSIGN_OR_RETURN(int64_t dim, dim_of(op, a, in[0].shape.size()));
  TESSEL_TRY(check_elements_shapes(op, in, dim));
  return TensorMeta{op == "gather" ? in[1].shape : in[0].shape, in[0].dtype};
}

// out[.., index[.., m, ..], ..] += src[.., m, ..] (index, src and out as [outer, *, inner]), on
// the device: scatter_add's forward (out = x) and gather's gradient (out = 0).
Expected<Tensor> scatter_add_launch(const Tensor& x, const Tensor& index, const Tensor& src,
                                    int64_t dim) {
  const Split p = split_at(x.shape(), dim);
  const int64_t m = index.size(dim);
  TESSEL_ASSIGN_OR_RETURN(View xv, as_rows(x, p.outer, p.n, p.inner));
  TESSEL_ASSIGN_OR_RETURN(View iv, as_rows(index, p.outer, m, p.inner));
  TESSEL_ASSIGN_OR_RETURN(View sv, as_rows(src, p.outer, m, p.inner));
  TESSEL_ASSIGN_OR_RETURN(Tensor y, empty_like_device(x.shape(), x.dtype(), x));
  TESSEL_TRY(
      launch_kernel("scatter_add_rows", {},
                    {xv, iv, sv, View{y, {p.outer, p.n, p.inner}, {p.n * p.inner, p.inner, 1}}}));
  return y;
}

Expected<Tensor> gather_launch(const Tensor& x, const Tensor& index, int64_t dim) {
  const Split p = split_at(x.shape(), dim);
  const int64_t m = index.size(dim);
  TESSEL_ASSIGN_OR_RETURN(View xv, as_rows(x, p.outer, p.n, p.inner));
  TESSEL_ASSIGN_OR_RETURN(View iv, as_rows(index, p.outer, m, p.inner));
  TESSEL_ASSIGN_OR_RETURN(Tensor y, empty_like_device(index.shape(), x.dtype(), x));
  TESSEL_TRY(launch_kernel("gather_elements", {},
                           {xv, iv, View{y, {p.outer, m, p.inner}, {m * p.inner, p.inner, 1}}}));
  return y;
}

// The reference of both: walks index's elements, calling f(position in index, position of the
// x element it names, position in `src` of index's element).
template <typename F>
void for_each_element(const RefTensor& x, const RefTensor& index, const Shape& src, int64_t dim,
                      F f) {
  for (size_t e = 0; e < index.values.size(); ++e) {
    std::vector<int64_t> at = reference::unravel(static_cast<int64_t>(e), index.shape);
    int64_t s = 0;
    for (size_t d = 0; d < at.size(); ++d)
      s = s * src[d] + at[d];
    int64_t id = static_cast<int64_t>(index.values[e]);
    at[dim] = id < 0 ? id + x.shape[dim] : id;
    int64_t target = 0;
    for (size_t d = 0; d < at.size(); ++d)
      target = target * x.shape[d] + at[d];
    f(static_cast<int64_t>(e), target, s);
  }
}

OpDef gather_op() {
  OpDef op;
  op.name = "gather";
  op.arity = 2;
  op.attrs = {"dim"};
  op.infer = [](const std::vector<TensorMeta>& in, const Attrs& a) {
    return infer_elements("gather", in, a);
  };
  op.forward = [](const std::vector<Tensor>& in, const Attrs& a,
                  const TensorMeta&) -> Expected<Tensor> {
    const int64_t dim = dim_of("gather", a, in[0].rank()).value();
    const int64_t n = in[0].size(dim);
    TESSEL_TRY(check_indices("gather", "index", in[1], -n, n));
    TESSEL_ASSIGN_OR_RETURN(Tensor x, covered(in[0], in[1].shape(), dim));
    return gather_launch(x, in[1], dim);
  };
  op.reference = [](const std::vector<RefTensor>& in, const Attrs& a) {
    const int64_t dim = dim_of("gather", a, in[0].shape.size()).value();
    RefTensor out{in[1].shape, std::vector<double>(in[1].values.size())};
    for_each_element(in[0], in[1], in[1].shape, dim, [&](int64_t e, int64_t source, int64_t) {
      out.values[e] = in[0].values[source];
    });
    return out;
  };
  op.save_inputs = {false, true};
  op.differentiable = {true, false};
  op.backward = [](const BackwardArgs& b) -> Expected<std::vector<Tensor>> {
    const TensorMeta& xm = b.input_meta[0];
    const int64_t dim = dim_of("gather", b.attrs, xm.shape.size()).value();
    TESSEL_ASSIGN_OR_RETURN(Tensor zeros,
                            Tensor::zeros(xm.shape, b.grad_output.dtype(), b.grad_output.device()));
    TESSEL_ASSIGN_OR_RETURN(Tensor part, covered(zeros, b.inputs[1].shape(), dim));
    TESSEL_ASSIGN_OR_RETURN(Tensor dpart,
                            scatter_add_launch(part, b.inputs[1], b.grad_output, dim));
    TESSEL_ASSIGN_OR_RETURN(Tensor dx, embed(zeros, dpart));
    return std::vector<Tensor>{dx, Tensor()};
  };
  return op;
}

OpDef scatter_add_op() {
  OpDef op;
  op.name = "scatter_add";
  op.arity = 3;
  op.attrs = {"dim"};
  op.infer = [](const std::vector<TensorMeta>& in, const Attrs& a) {
    return infer_elements("scatter_add", in, a);
  };
  op.forward = [](const std::vector<Tensor>& in, const Attrs& a,
                  const TensorMeta&) -> Expected<Tensor> {
    const int64_t dim = dim_of("scatter_add", a, in[0].rank()).value();
    const int64_t n = in[0].size(dim);
    TESSEL_TRY(check_indices("scatter_add", "index", in[1], -n, n));
    TESSEL_ASSIGN_OR_RETURN(Tensor x, covered(in[0], in[1].shape(), dim));
    TESSEL_ASSIGN_OR_RETURN(Tensor src, covered(in[2], in[1].shape(), -1));
    TESSEL_ASSIGN_OR_RETURN(Tensor y, scatter_add_launch(x, in[1], src, dim));
    return embed(in[0], y);
  };
  op.reference = [](const std::vector<RefTensor>& in, const Attrs& a) {
    const int64_t dim = dim_of("scatter_add", a, in[0].shape.size()).value();
    RefTensor out = in[0];
    for_each_element(in[0], in[1], in[2].shape, dim, [&](int64_t, int64_t target, int64_t s) {
      out.values[target] += in[2].values[s];
    });
    return out;
  };
  op.save_inputs = {false, true, false};
  op.differentiable = {true, false, true};
  // dx = g; dsrc = g gathered at the index.
  op.backward = [](const BackwardArgs& b) -> Expected<std::vector<Tensor>> {
    const int64_t dim = dim_of("scatter_add", b.attrs, b.input_meta[0].shape.size()).value();
    std::vector<Tensor> grads(3);
    if (b.needs_grad[0]) grads[0] = b.grad_output;
    if (b.needs_grad[2]) {  // 0 where src is past the index
      TESSEL_ASSIGN_OR_RETURN(Tensor g, covered(b.grad_output, b.inputs[1].shape(), dim));
      TESSEL_ASSIGN_OR_RETURN(Tensor part, gather_launch(g, b.inputs[1], dim));
      TESSEL_ASSIGN_OR_RETURN(
          Tensor zeros,
          Tensor::zeros(b.input_meta[2].shape, b.grad_output.dtype(), b.grad_output.device()));
      TESSEL_ASSIGN_OR_RETURN(grads[2], embed(zeros, part));
    }
    return grads;
  };
  return op;
}

}  // namespace

void add_index_ops(std::vector<OpDef>& ops) {
  ops.push_back(index_select_op());
  ops.push_back(gather_op());
  ops.push_back(scatter_add_op());
}

Expected<Tensor> index_select(const Tensor& x, int64_t dim, const Tensor& index) {
  return run("index_select", {x, index}, Attrs().set("dim", dim));
}
Expected<Tensor> gather(const Tensor& x, int64_t dim, const Tensor& index) {
  return run("gather", {x, index}, Attrs().set("dim", dim));
}
Expected<Tensor> scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src) {
  return run("scatter_add", {x, index, src}, Attrs().set("dim", dim));
}

}  // namespace tessel::ops
