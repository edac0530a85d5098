// Shape ops: reshape, permute and slice return views of their input (reshape copies only when
// the layout cannot be viewed, as torch.reshape does); contiguous copies on the device. Their
// gradients are views or the slice_grad kernel (kernels/copy.tile).
#include <numeric>

#include "ops/kernel_util.h"
#include "ops/ops.h"
#include "ops/reference_util.h"

namespace tessel::ops {
namespace {

// Shape ops work on a fake tensor's metadata to infer: a view of a 1-element CPU buffer would
// need storage, so inference reproduces the rules instead.
Expected<Shape> resolved_reshape(const Shape& in, Shape shape) {
  int64_t known = 1, inferred = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1 && inferred < 0)
      inferred = static_cast<int64_t>(i);
    else if (shape[i] < 0)
      return invalid_argument("reshape: bad size in {}", shape_string(shape));
    else
      known *= shape[i];
  }
  if (inferred >= 0) {
    if (known == 0 || shape_numel(in) % known != 0)
      return invalid_argument("reshape: {} cannot be viewed as {}", shape_string(in),
                              shape_string(shape));
    shape[inferred] = shape_numel(in) / known;
  }
  if (shape_numel(shape) != shape_numel(in))
    return invalid_argument("reshape: {} ({} elements) cannot be viewed as {}", shape_string(in),
                            shape_numel(in), shape_string(shape));
  return shape;
}

OpDef reshape_op() {
  OpDef op;
  op.name = "reshape";
  op.attrs = {"shape"};
  op.is_view = true;
  op.infer = [](const std::vector<TensorMeta>& in, const Attrs& a) -> Expected<TensorMeta> {
    TESSEL_ASSIGN_OR_RETURN(Shape s, resolved_reshape(in[0].shape, a.get_ints("shape")));
    return TensorMeta{s, in[0].dtype};
  };
  op.forward = [](const std::vector<Tensor>& in, const Attrs&,
                  const TensorMeta& out) -> Expected<Tensor> {
    Expected<Tensor> view = in[0].reshape(out.shape);
    if (view.ok()) return view;
    TESSEL_ASSIGN_OR_RETURN(Tensor c, contiguous_on_device(in[0]));
    return c.reshape(out.shape);
  };
  op.reference = [](const std::vector<RefTensor>& in, const Attrs& a) {
    return RefTensor{resolved_reshape(in[0].shape, a.get_ints("shape")).value(), in[0].values};
  };
  op.backward = [](const BackwardArgs& b) -> Expected<std::vector<Tensor>> {
    TESSEL_ASSIGN_OR_RETURN(Tensor dx, reshape(b.grad_output, b.input_meta[0].shape));
    return std::vector<Tensor>{dx};
  };
  return op;
}

Expected<std::vector<int64_t>> checked_order(const Shape& in, std::vector<int64_t> order) {
  const int64_t rank = static_cast<int64_t>(in.size());
  std::vector<bool> seen(rank, false);
  bool ok = static_cast<int64_t>(order.size()) == rank;
  for (int64_t& d : order) {
    if (d < 0) d += rank;
    ok = ok && d >= 0 && d < rank && !seen[d];
    if (ok) seen[d] = true;
  }
  if (!ok)
    return invalid_argument("permute: {} is not an order of the {} dimensions of {}",
                            shape_string(order), rank, shape_string(in));
  return order;
}

OpDef permute_op() {
  OpDef op;
  op.name = "permute";
  op.attrs = {"order"};
  op.is_view = true;
  op.infer = [](const std::vector<TensorMeta>& in, const Attrs& a) -> Expected<TensorMeta> {
    TESSEL_ASSIGN_OR_RETURN(std::vector<int64_t> order,
                            checked_order(in[0].shape, a.get_ints("order")));
    Shape out;
    for (int64_t d : order)
      out.push_back(in[0].shape[d]);
    return TensorMeta{out, in[0].dtype};
  };
  op.forward = [](const std::vector<Tensor>& in, const Attrs& a, const TensorMeta&) {
    return in[0].permute(a.get_ints("order"));
  };
  op.reference = [](const std::vector<RefTensor>& in, const Attrs& a) {
    std::vector<int64_t> order = checked_order(in[0].shape, a.get_ints("order")).value();
    RefTensor out{{}, std::vector<double>(in[0].values.size())};
    for (int64_t d : order)
      out.shape.push_back(in[0].shape[d]);
    for (int64_t i = 0; i < static_cast<int64_t>(out.values.size()); ++i) {
      auto index = reference::unravel(i, out.shape);
      std::vector<int64_t> source(index.size());
      for (size_t d = 0; d < order.size(); ++d)
        source[order[d]] = index[d];
      int64_t linear = 0;
      for (size_t d = 0; d < source.size(); ++d)
        linear = linear * in[0].shape[d] + source[d];
      out.values[i] = in[0].values[linear];
    }
    return out;
  };
  op.backward = [](const BackwardArgs& b) -> Expected<std::vector<Tensor>> {
    std::vector<int64_t> order =
        checked_order(b.input_meta[0].shape, b.attrs.get_ints("order")).value();
    std::vector<int64_t> inverse(order.size());
    for (size_t d = 0; d < order.size(); ++d)
      inverse[order[d]] = static_cast<int64_t>(d);
    TESSEL_ASSIGN_OR_RETURN(Tensor dx, permute(b.grad_output, inverse));
    return std::vector<Tensor>{dx};
  };
  return op;
}

struct SliceSpec {
  int64_t dim, start, size, step;
};
Expected<SliceSpec> slice_spec(const Shape& in, const Attrs& a) {
  const int64_t rank = static_cast<int64_t>(in.size());
  int64_t dim = a.get_int("dim", 0), step = a.get_int("step", 1);
  if (dim < 0) dim += rank;
  if (dim < 0 || dim >= rank || step < 1)
    return invalid_argument("slice: dim {} step {} do not fit shape {}", a.get_int("dim", 0), step,
                            shape_string(in));
  const int64_t n = in[dim];
  int64_t start = a.get_int("start", 0), end = a.get_int("end", n);
  if (start < 0) start += n;
  if (end < 0) end += n;
  start = std::clamp<int64_t>(start, 0, n);
  end = std::clamp<int64_t>(end, start, n);
  return SliceSpec{dim, start, (end - start + step - 1) / step, step};
}

OpDef slice_op() {
  OpDef op;
  op.name = "slice";
  op.attrs = {"dim", "start", "end", "step"};
  op.is_view = true;
  op.infer = [](const std::vector<TensorMeta>& in, const Attrs& a) -> Expected<TensorMeta> {
    TESSEL_ASSIGN_OR_RETURN(SliceSpec s, slice_spec(in[0].shape, a));
    Shape out = in[0].shape;
    out[s.dim] = s.size;
    return TensorMeta{out, in[0].dtype};
  };
  op.forward = [](const std::vector<Tensor>& in, const Attrs& a,
                  const TensorMeta&) -> Expected<Tensor> {
    TESSEL_ASSIGN_OR_RETURN(SliceSpec s, slice_spec(in[0].shape(), a));
    return in[0].slice(s.dim, s.start, s.size == 0 ? s.start : s.start + (s.size - 1) * s.step + 1,
                       s.step);
  };
  op.reference = [](const std::vector<RefTensor>& in, const Attrs& a) {
    SliceSpec s = slice_spec(in[0].shape, a).value();
    RefTensor out{in[0].shape, {}};
    out.shape[s.dim] = s.size;
    for (int64_t i = 0; i < reference::numel(in[0].shape); ++i) {
      int64_t k = reference::unravel(i, in[0].shape)[s.dim] - s.start;
      if (k >= 0 && k % s.step == 0 && k / s.step < s.size) out.values.push_back(in[0].values[i]);
    }
    return out;
  };
  op.backward = [](const BackwardArgs& b) -> Expected<std::vector<Tensor>> {
    const Shape& in = b.input_meta[0].shape;
    SliceSpec s = slice_spec(in, b.attrs).value();
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < s.dim; ++d)
      outer *= in[d];
    for (size_t d = s.dim + 1; d < in.size(); ++d)
      inner *= in[d];
    TESSEL_ASSIGN_OR_RETURN(Tensor dx, empty_like_device(in, b.grad_output.dtype(), b.grad_output));
    if (dx.numel() == 0) return std::vector<Tensor>{dx};
    // A slice of the last axis (GPT's q, k, v): rows of dx, any layout of dY. Only the last axis:
    // rows_view cuts dY at its last axis, so trailing axes of size 1 ([1, C, 1, 1] along dim 1)
    // would make its rows the wrong ones; those take the middle-axis kernel with D2 = 1.
    if (inner == 1 && s.dim + 1 == static_cast<int64_t>(in.size())) {
      TESSEL_ASSIGN_OR_RETURN(View gv, rows_view(b.grad_output));
      View dv{dx, {outer, in[s.dim]}, {in[s.dim], 1}};
      TESSEL_TRY(launch_kernel("slice_grad_last", {{"UNIT", s.step == 1 ? "1" : "0"}},
                               {gv, dv, s.start, s.step}));
      return std::vector<Tensor>{dx};
    }
    TESSEL_ASSIGN_OR_RETURN(Tensor g, contiguous_on_device(b.grad_output));
    View gv{g, {outer, s.size, inner}, {s.size * inner, inner, 1}};
    View dv{dx, {outer, in[s.dim], inner}, {in[s.dim] * inner, inner, 1}};
    TESSEL_TRY(launch_kernel("slice_grad", {}, {gv, dv, s.start, s.step}));
    return std::vector<Tensor>{dx};
  };
  return op;
}

// concat of two tensors along `dim` (concat2 in kernels/copy.tile, over [outer, dim, inner]
// views); the gradients are slices of the output gradient.
Expected<TensorMeta> infer_concat(const std::vector<TensorMeta>& in, const Attrs& a) {
  const Shape &x = in[0].shape, &y = in[1].shape;
  const int64_t rank = static_cast<int64_t>(x.size());
  int64_t dim = a.get_int("dim", 0);
  if (dim < 0) dim += rank;
  bool ok =
      rank > 0 && x.size() == y.size() && dim >= 0 && dim < rank && in[0].dtype == in[1].dtype;
  for (int64_t d = 0; ok && d < rank; ++d)
    ok = d == dim || x[d] == y[d];
  if (!ok)
    return invalid_argument("concat: {} do not join along dim {}", shapes_string(in),
                            a.get_int("dim", 0));
  Shape out = x;
  out[dim] += y[dim];
  return TensorMeta{out, in[0].dtype};
}

int64_t concat_dim(const Attrs& a, int64_t rank) {
  int64_t dim = a.get_int("dim", 0);
  return dim < 0 ? dim + rank : dim;
}

OpDef concat_op() {
  OpDef op;
  op.name = "concat";
  op.arity = 2;
  op.attrs = {"dim"};
  op.infer = infer_concat;
  op.forward = [](const std::vector<Tensor>& in, const Attrs& a,
                  const TensorMeta& out) -> Expected<Tensor> {
    const int64_t dim = concat_dim(a, in[0].rank());
    TESSEL_ASSIGN_OR_RETURN(Tensor y, empty_like_device(out.shape, out.dtype, in[0]));
    if (y.numel() == 0) return y;
    for (int i = 0; i < 2; ++i)  // an empty operand (size 0 along dim) adds nothing
      if (in[i].numel() == 0) return copy_on_device(in[1 - i]);
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < dim; ++d)
      outer *= out.shape[d];
    for (size_t d = dim + 1; d < out.shape.size(); ++d)
      inner *= out.shape[d];
    std::vector<KernelArg> args;
    for (const Tensor& t : in) {
      TESSEL_ASSIGN_OR_RETURN(Tensor c, contiguous_on_device(t));
      args.push_back(View{c, {outer, t.size(dim), inner}, {t.size(dim) * inner, inner, 1}});
    }
    args.push_back(View{y, {outer, out.shape[dim], inner}, {out.shape[dim] * inner, inner, 1}});
    TESSEL_TRY(launch_kernel("concat2", {}, args));
    return y;
  };
  op.reference = [](const std::vector<RefTensor>& in, const Attrs& a) {
    const int64_t dim = concat_dim(a, static_cast<int64_t>(in[0].shape.size()));
    RefTensor out{in[0].shape, {}};
    out.shape[dim] += in[1].shape[dim];
    int64_t outer = 1;
    for (int64_t d = 0; d < dim; ++d)
      outer *= out.shape[d];
    for (int64_t o = 0; o < outer; ++o)
      for (const RefTensor& t : in) {
        const int64_t block = reference::numel(t.shape) / outer;
        out.values.insert(out.values.end(), t.values.begin() + o * block,
                          t.values.begin() + (o + 1) * block);
      }
    return out;
  };
  op.backward = [](const BackwardArgs& b) -> Expected<std::vector<Tensor>> {
    const int64_t dim = concat_dim(b.attrs, static_cast<int64_t>(b.input_meta[0].shape.size()));
    const int64_t first = b.input_meta[0].shape[dim];
    std::vector<Tensor> grads(2);
    TESSEL_ASSIGN_OR_RETURN(grads[0], b.grad_output.slice(dim, 0, first));
    TESSEL_ASSIGN_OR_RETURN(grads[1], b.grad_output.slice(dim, first, b.grad_output.size(dim)));
    return grads;
  };
  return op;
}

OpDef contiguous_op() {
  OpDef op;
  op.name = "contiguous";
  op.infer = [](const std::vector<TensorMeta>& in, const Attrs&) -> Expected<TensorMeta> {
    return in[0];
  };
  op.forward = [](const std::vector<Tensor>& in, const Attrs&, const TensorMeta&) {
    return contiguous_on_device(in[0]);
  };
  op.reference = [](const std::vector<RefTensor>& in, const Attrs&) { return in[0]; };
  op.backward = [](const BackwardArgs& b) -> Expected<std::vector<Tensor>> {
    return std::vector<Tensor>{b.grad_output};
  };
  return op;
}

}  // namespace

void add_view_ops(std::vector<OpDef>& ops) {
  ops.push_back(reshape_op());
  ops.push_back(permute_op());
  ops.push_back(slice_op());
  ops.push_back(concat_op());
  ops.push_back(contiguous_op());
}

Expected<Tensor> reshape(const Tensor& x, const Shape& shape) {
  return run("reshape", {x}, Attrs().set("shape", shape));
}
Expected<Tensor> permute(const Tensor& x, const std::vector<int64_t>& order) {
  return run("permute", {x}, Attrs().set("order", order));
}
Expected<Tensor> slice(const Tensor& x, int64_t dim, int64_t start, int64_t end, int64_t step) {
  return run("slice", {x},
             Attrs().set("dim", dim).set("start", start).set("end", end).set("step", step));
}
Expected<Tensor> contiguous(const Tensor& x) {
  return run("contiguous", {x});
}
Expected<Tensor> concat(const Tensor& a, const Tensor& b, int64_t dim) {
  return run("concat", {a, b}, Attrs().set("dim", dim));
}

}  // namespace tessel::ops
