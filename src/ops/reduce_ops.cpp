// sum, mean and max over axes, on the reduce_rows kernel (kernels/reduce.tile): the reduced axes
// are moved last (a permuted view), the kept and the reduced axes are each merged into one where
// the strides allow (else the view is copied contiguous), and each row of the [kept, reduced]
// matrix is summed. The gradient broadcasts back (the copy4 kernel over a stride-0 view).
#include <algorithm>
#include <cmath>

#include "ops/kernel_util.h"
#include "ops/ops.h"
#include "ops/reference_util.h"

namespace tessel::ops {
namespace {

// Normalised, sorted, distinct axes; empty means all.
Expected<std::vector<int64_t>> reduced_axes(const std::string& op, const Shape& shape,
                                            std::vector<int64_t> axes) {
  if (axes.empty())
    for (size_t d = 0; d < shape.size(); ++d)
      axes.push_back(static_cast<int64_t>(d));
  for (int64_t& a : axes) {
    int64_t rank = static_cast<int64_t>(shape.size());
    if (a < -rank || a >= rank)
      return invalid_argument("{}: axis {} is out of range for shape {}", op, a,
                              shape_string(shape));
    if (a < 0) a += rank;
  }
  std::sort(axes.begin(), axes.end());
  if (std::adjacent_find(axes.begin(), axes.end()) != axes.end())
    return invalid_argument("{}: axes {} repeat an axis", op, shape_string(axes));
  return axes;
}

// ONNX's noop_with_empty_axes: no axes given means no reduction (the input, copied) instead of
// all axes.
bool is_noop(const Attrs& a) {
  return a.get_int("noop_with_empty_axes", 0) != 0 && a.get_ints("axes").empty();
}

Shape reduced_shape(const Shape& shape, const std::vector<int64_t>& axes, bool keepdim) {
  Shape out;
  for (size_t d = 0; d < shape.size(); ++d) {
    bool reduced = std::binary_search(axes.begin(), axes.end(), static_cast<int64_t>(d));
    if (!reduced)
      out.push_back(shape[d]);
    else if (keepdim)
      out.push_back(1);
  }
  return out;
}

// One merged (size, stride) for a group of dimensions of `t`, or nullopt if they do not merge.
std::optional<std::pair<int64_t, int64_t>> merge_group(const Tensor& t,
                                                       const std::vector<int64_t>& dims) {
  int64_t size = 1, stride = 1, span = -1;
  for (size_t i = dims.size(); i-- > 0;) {
    int64_t d = dims[i];
    if (t.shape()[d] == 1) continue;
    if (span < 0)
      stride = t.strides()[d];
    else if (t.strides()[d] != span)
      return std::nullopt;
    span = t.strides()[d] * t.shape()[d];
    size *= t.shape()[d];
  }
  return std::make_pair(size, stride);
}

// OP of reduce_rows: 0 sum, 1 max.
// reduce_cols' parameters. On the CPU a block owns 64 columns rather than 256: a bias or
// LayerNorm gradient of 128 columns (gpt_tiny) was one block, so one thread, and ran half its
// lanes under masked loads; 64-wide blocks give 128 columns two blocks and 384 six.
KernelParams reduce_cols_params(const Tensor& x, int kind, bool accumulate) {
  KernelParams params{{"OP", std::to_string(kind)}};
  if (accumulate) params["ACC"] = "1";
  if (x.device()->kind() == DeviceKind::kCpu) params["BC"] = "64";
  return params;
}

Expected<Tensor> reduce_forward(const Tensor& x, const Attrs& attrs, const TensorMeta& out,
                                int kind) {
  TESSEL_ASSIGN_OR_RETURN(std::vector<int64_t> axes,
                          reduced_axes("sum", x.shape(), attrs.get_ints("axes")));
  std::vector<int64_t> kept, reduced = axes;
  for (int64_t d = 0; d < x.rank(); ++d)
    if (!std::binary_search(axes.begin(), axes.end(), d)) kept.push_back(d);
  TESSEL_ASSIGN_OR_RETURN(Tensor y, empty_like_device(out.shape, out.dtype, x));
  if (y.numel() == 0) return y;
  auto rows = merge_group(x, kept);
  auto cols = merge_group(x, reduced);
  View xv;
  if (rows && cols && rows->second == 1 && cols->second != 1 && rows->first > 1) {
    // The kept elements are the contiguous ones (a sum over a leading axis: LayerNorm's weight
    // and bias gradients, a broadcast add's backward): reduce_cols walks the reduced axis with
    // contiguous reads, where reduce_rows over this view would gather each element with the
    // reduced axis's stride (18 such sums were 7% of a gpt_tiny training step).
    View columns{x, {cols->first, rows->first}, {cols->second, 1}};
    View yv{y, {y.numel()}, {1}};
    TESSEL_TRY(launch_kernel("reduce_cols", reduce_cols_params(x, kind, false), {columns, yv}));
    return y;
  }
  if (rows && cols) {
    xv = View{x, {rows->first, cols->first}, {rows->second, cols->second}};
  } else {
    std::vector<int64_t> order = kept;
    order.insert(order.end(), reduced.begin(), reduced.end());
    TESSEL_ASSIGN_OR_RETURN(Tensor p, x.permute(order));
    TESSEL_ASSIGN_OR_RETURN(Tensor c, contiguous_on_device(p));
    int64_t m = y.numel(), n = x.numel() / std::max<int64_t>(m, 1);
    xv = View{c, {m, n}, {n, 1}};
  }
  View yv{y, {y.numel()}, {1}};
  TESSEL_TRY(launch_kernel("reduce_rows", {{"OP", std::to_string(kind)}}, {xv, yv}));
  return y;
}

Expected<TensorMeta> infer_reduce(const std::string& op, const std::vector<TensorMeta>& in,
                                  const Attrs& a) {
  if (!is_floating_point(in[0].dtype))
    return invalid_argument("{}: needs a floating-point input, got {}", op, shapes_string(in));
  if (is_noop(a)) return in[0];
  TESSEL_ASSIGN_OR_RETURN(std::vector<int64_t> axes,
                          reduced_axes(op, in[0].shape, a.get_ints("axes")));
  if (op == "max") {  // PyTorch: the maximum of nothing is an error, not -inf
    for (int64_t d : axes)
      if (in[0].shape[d] == 0)
        return invalid_argument(
            "max: axis {} of {} has size 0; the maximum of nothing is undefined", d,
            shape_string(in[0].shape));
  }
  return TensorMeta{reduced_shape(in[0].shape, axes, a.get_int("keepdim", 0) != 0), in[0].dtype};
}

RefTensor reduce_reference(const RefTensor& x, const Attrs& a, bool mean) {
  if (is_noop(a)) return x;
  std::vector<int64_t> axes = reduced_axes("sum", x.shape, a.get_ints("axes")).value();
  Shape kept = reduced_shape(x.shape, axes, true);
  RefTensor out{reduced_shape(x.shape, axes, a.get_int("keepdim", 0) != 0),
                std::vector<double>(reference::numel(kept), 0.0)};
  for (int64_t i = 0; i < reference::numel(x.shape); ++i)
    out.values[reference::broadcast_source(reference::unravel(i, x.shape), kept)] += x.values[i];
  if (mean) {
    const int64_t groups = reference::numel(kept);
    double n = groups == 0 ? 0.0 : static_cast<double>(reference::numel(x.shape)) / groups;
    for (double& v : out.values)
      v = n == 0 ? NAN : v / n;
  }
  return out;
}

// The output gradient broadcast back to the input's shape, times `factor`.
Expected<Tensor> broadcast_back(const BackwardArgs& b, double factor) {
  const Shape& in = b.input_meta[0].shape;
  std::vector<int64_t> axes = reduced_axes("sum", in, b.attrs.get_ints("axes")).value();
  TESSEL_ASSIGN_OR_RETURN(Tensor g, reshape(b.grad_output, reduced_shape(in, axes, true)));
  TESSEL_ASSIGN_OR_RETURN(Tensor e, g.expand(in));
  TESSEL_ASSIGN_OR_RETURN(Tensor full, contiguous_on_device(e));
  if (factor == 1.0) return full;
  return scale(full, factor);
}

OpDef reduce_op(const std::string& name, bool mean) {
  OpDef op;
  op.name = name;
  op.attrs = {"axes", "keepdim", "noop_with_empty_axes"};
  op.infer = [name](const std::vector<TensorMeta>& in, const Attrs& a) {
    return infer_reduce(name, in, a);
  };
  op.forward = [mean](const std::vector<Tensor>& in, const Attrs& a,
                      const TensorMeta& out) -> Expected<Tensor> {
    if (is_noop(a)) return copy_on_device(in[0]);
    if (in[0].numel() == 0)  // PyTorch: a sum over nothing is 0, a mean over nothing NaN
      return Tensor::full(out.shape, mean ? NAN : 0.0, out.dtype, in[0].device());
    TESSEL_ASSIGN_OR_RETURN(Tensor s, reduce_forward(in[0], a, out, 0));
    if (!mean || out.shape == in[0].shape()) return s;
    return scale(s, static_cast<double>(s.numel()) /
                        static_cast<double>(std::max<int64_t>(1, in[0].numel())));
  };
  op.reference = [mean](const std::vector<RefTensor>& in, const Attrs& a) {
    return reduce_reference(in[0], a, mean);
  };
  op.backward = [mean](const BackwardArgs& b) -> Expected<std::vector<Tensor>> {
    if (is_noop(b.attrs)) return std::vector<Tensor>{b.grad_output};
    double factor = 1.0;
    if (mean) {
      int64_t n = shape_numel(b.input_meta[0].shape), m = b.grad_output.numel();
      factor = static_cast<double>(m) / static_cast<double>(std::max<int64_t>(1, n));
    }
    TESSEL_ASSIGN_OR_RETURN(Tensor dx, broadcast_back(b, factor));
    return std::vector<Tensor>{dx};
  };
  return op;
}

// The gradient goes to the elements equal to their maximum (kernels/mask.tile, select_equal).
OpDef max_op() {
  OpDef op;
  op.name = "max";
  op.attrs = {"axes", "keepdim", "noop_with_empty_axes"};
  op.infer = [](const std::vector<TensorMeta>& in, const Attrs& a) {
    return infer_reduce("max", in, a);
  };
  op.forward = [](const std::vector<Tensor>& in, const Attrs& a, const TensorMeta& out) {
    if (is_noop(a)) return copy_on_device(in[0]);
    return reduce_forward(in[0], a, out, 1);
  };
  op.reference = [](const std::vector<RefTensor>& in, const Attrs& a) {
    if (is_noop(a)) return in[0];
    std::vector<int64_t> axes = reduced_axes("max", in[0].shape, a.get_ints("axes")).value();
    Shape kept = reduced_shape(in[0].shape, axes, true);
    RefTensor out{reduced_shape(in[0].shape, axes, a.get_int("keepdim", 0) != 0),
                  std::vector<double>(reference::numel(kept), -INFINITY)};
    for (int64_t i = 0; i < reference::numel(in[0].shape); ++i) {
      double& m = out.values[reference::broadcast_source(reference::unravel(i, in[0].shape), kept)];
      m = std::max(m, in[0].values[i]);
    }
    return out;
  };
  op.save_inputs = {true};
  op.save_output = true;
  op.backward = [](const BackwardArgs& b) -> Expected<std::vector<Tensor>> {
    if (is_noop(b.attrs)) return std::vector<Tensor>{b.grad_output};
    const Shape& in = b.input_meta[0].shape;
    std::vector<int64_t> axes = reduced_axes("max", in, b.attrs.get_ints("axes")).value();
    Shape kept = reduced_shape(in, axes, true);
    TESSEL_ASSIGN_OR_RETURN(Tensor y, reshape(b.output, kept));
    TESSEL_ASSIGN_OR_RETURN(Tensor g, reshape(b.grad_output, kept));
    TESSEL_ASSIGN_OR_RETURN(Tensor ye, y.expand(in));
    TESSEL_ASSIGN_OR_RETURN(Tensor ge, g.expand(in));
    TESSEL_ASSIGN_OR_RETURN(Tensor dx, empty_like_device(in, b.inputs[0].dtype(), b.inputs[0]));
    Tensor x = b.inputs[0];
    auto views = merged_views({x, ye, ge, dx}, 3);
    if (!views) {
      TESSEL_ASSIGN_OR_RETURN(x, contiguous_on_device(x));
      TESSEL_ASSIGN_OR_RETURN(ye, contiguous_on_device(ye));
      TESSEL_ASSIGN_OR_RETURN(ge, contiguous_on_device(ge));
      views = merged_views({x, ye, ge, dx}, 3);
    }
    TESSEL_TRY(
        launch_kernel("select_equal", {}, {(*views)[0], (*views)[1], (*views)[2], (*views)[3]}));
    return std::vector<Tensor>{dx};
  };
  return op;
}

// ONNX GlobalAveragePool: x [N, C, *] -> [N, C, 1, ...], the mean over every position (a
// `mean` over the spatial axes, kept as size 1).
std::vector<int64_t> spatial_axes(size_t rank) {
  std::vector<int64_t> axes;
  for (size_t d = 2; d < rank; ++d)
    axes.push_back(static_cast<int64_t>(d));
  return axes;
}

OpDef global_avg_pool_op() {
  OpDef op;
  op.name = "global_avg_pool";
  op.infer = [](const std::vector<TensorMeta>& in, const Attrs&) -> Expected<TensorMeta> {
    if (in[0].shape.size() < 3 || !is_floating_point(in[0].dtype))
      return invalid_argument("global_avg_pool: needs a float x [N, C, D1, ...], got {}",
                              shapes_string(in));
    return TensorMeta{reduced_shape(in[0].shape, spatial_axes(in[0].shape.size()), true),
                      in[0].dtype};
  };
  op.forward = [](const std::vector<Tensor>& in, const Attrs&, const TensorMeta&) {
    return mean(in[0], spatial_axes(in[0].rank()), true);
  };
  op.reference = [](const std::vector<RefTensor>& in, const Attrs&) {
    return reduce_reference(
        in[0], Attrs().set("axes", spatial_axes(in[0].shape.size())).set("keepdim", 1), true);
  };
  op.backward = [](const BackwardArgs& b) -> Expected<std::vector<Tensor>> {
    const Shape& in = b.input_meta[0].shape;
    const double positions = static_cast<double>(shape_numel(in)) /
                             static_cast<double>(std::max<int64_t>(1, b.grad_output.numel()));
    TESSEL_ASSIGN_OR_RETURN(Tensor e, b.grad_output.expand(in));
    TESSEL_ASSIGN_OR_RETURN(Tensor full, contiguous_on_device(e));
    TESSEL_ASSIGN_OR_RETURN(Tensor dx, scale(full, 1.0 / positions));
    return std::vector<Tensor>{dx};
  };
  return op;
}

}  // namespace

void add_reduce_ops(std::vector<OpDef>& ops) {
  ops.push_back(reduce_op("sum", false));
  ops.push_back(reduce_op("mean", true));
  ops.push_back(max_op());
  ops.push_back(global_avg_pool_op());
}

Expected<Tensor> global_avg_pool(const Tensor& x) {
  return run("global_avg_pool", {x});
}

Expected<Tensor> max(const Tensor& x, std::vector<int64_t> axes, bool keepdim) {
  return run("max", {x}, Attrs().set("axes", std::move(axes)).set("keepdim", keepdim ? 1 : 0));
}

Expected<Tensor> sum(const Tensor& x, std::vector<int64_t> axes, bool keepdim) {
  return run("sum", {x}, Attrs().set("axes", std::move(axes)).set("keepdim", keepdim ? 1 : 0));
}
Expected<Tensor> mean(const Tensor& x, std::vector<int64_t> axes, bool keepdim) {
  return run("mean", {x}, Attrs().set("axes", std::move(axes)).set("keepdim", keepdim ? 1 : 0));
}

Status sum_rows_into(const Tensor& x, const Tensor& y) {
  if (!x.defined() || !y.defined() || x.rank() != 2 || y.rank() != 1 || x.size(1) != y.size(0) ||
      x.dtype() != y.dtype() || !y.is_contiguous() || x.strides()[1] != 1 ||
      x.device() != y.device() || !kernel_writable_in_place(y))
    return invalid_argument(
        "sum_rows_into: needs x [M, N] with unit column stride and a contiguous y [N] of its "
        "dtype and device, got {} and {}",
        tensor_summary(x), tensor_summary(y));
  if (y.numel() == 0) return ok_status();
  View xv{x, {x.size(0), x.size(1)}, {x.strides()[0], 1}};
  return launch_kernel("reduce_cols", reduce_cols_params(x, 0, true),
                       {xv, View{y, {y.numel()}, {1}}});
}

Expected<Tensor> sum_to(const Tensor& grad, const Shape& shape) {
  if (grad.shape() == shape) return grad;
  const int64_t lead = grad.rank() - static_cast<int64_t>(shape.size());
  std::vector<int64_t> axes;
  for (int64_t d = 0; d < grad.rank(); ++d)
    if (d < lead || (shape[d - lead] == 1 && grad.shape()[d] != 1)) axes.push_back(d);
  if (axes.empty()) return reshape(grad, shape);
  TESSEL_ASSIGN_OR_RETURN(Tensor s, sum(grad, axes, true));
  return reshape(s, shape);
}

}  // namespace tessel::ops
