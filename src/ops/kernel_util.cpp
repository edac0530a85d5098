// Fitting N-d tensors to kernel ranks (see kernel_util.h).
#include "ops/kernel_util.h"

#include "ops/launch_hook.h"

namespace tessel::ops {

std::optional<std::vector<View>> merged_views(const std::vector<Tensor>& tensors, size_t rank) {
  const Shape& shape = tensors.at(0).shape();
  Shape sizes;
  std::vector<Strides> strides(tensors.size());
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    bool merge = !sizes.empty();
    for (size_t i = 0; i < tensors.size() && merge; ++i)
      merge = strides[i].back() == tensors[i].strides()[d] * shape[d];
    if (merge) {
      sizes.back() *= shape[d];
      for (size_t i = 0; i < tensors.size(); ++i)
        strides[i].back() = tensors[i].strides()[d];
    } else {
      sizes.push_back(shape[d]);
      for (size_t i = 0; i < tensors.size(); ++i)
        strides[i].push_back(tensors[i].strides()[d]);
    }
  }
  if (sizes.size() > rank) return std::nullopt;
  while (sizes.size() < rank) {
    sizes.insert(sizes.begin(), 1);
    for (Strides& s : strides)
      s.insert(s.begin(), 0);
  }
  std::vector<View> views;
  for (size_t i = 0; i < tensors.size(); ++i)
    views.push_back(View{tensors[i], sizes, strides[i]});
  return views;
}

namespace {

Status launch_elementwise_now(const std::string& kernel, const KernelParams& params,
                              std::vector<Tensor> tensors, const std::vector<KernelArg>& scalars) {
  auto views = merged_views(tensors, 3);
  if (!views) {
    for (size_t i = 0; i + 1 < tensors.size(); ++i) {
      TESSEL_ASSIGN_OR_RETURN(tensors[i], contiguous_on_device(tensors[i]));
    }
    views = merged_views(tensors, 3);
    TESSEL_CHECK(views.has_value(), "contiguous tensors of one shape always merge");
  }
  std::vector<KernelArg> args(views->begin(), views->end());
  args.insert(args.end(), scalars.begin(), scalars.end());
  return launch_kernel(kernel, params, args);
}

}  // namespace

Status launch_elementwise(const std::string& kernel, const KernelParams& params,
                          std::vector<Tensor> tensors, const std::vector<KernelArg>& scalars) {
  if (LaunchHook* hook = launch_hook()) {
    LaunchHookScope off(nullptr);  // the hook's own launches go straight to the device
    return hook->elementwise(kernel, params, tensors, scalars, [&] {
      return launch_elementwise_now(kernel, params, tensors, scalars);
    });
  }
  return launch_elementwise_now(kernel, params, std::move(tensors), scalars);
}

Expected<Tensor> empty_like_device(const Shape& shape, DType dtype, const Tensor& like) {
  return Tensor::empty(shape, dtype, like.device());
}

Expected<Tensor> contiguous_on_device(const Tensor& t) {
  if (t.is_contiguous()) return t;
  return copy_on_device(t);
}

Expected<Tensor> copy_on_device(const Tensor& t) {
  TESSEL_ASSIGN_OR_RETURN(Tensor out, empty_like_device(t.shape(), t.dtype(), t));
  if (out.numel() == 0) return out;
  if (auto views = merged_views({t, out}, 4)) {
    TESSEL_TRY(launch_kernel("copy4", {}, {(*views)[0], (*views)[1]}));
    return out;
  }
  auto views = merged_views({t, out}, 8);
  if (!views) {
    return unimplemented("copying a view of shape {} (strides {}) needs more than 8 dimensions",
                         shape_string(t.shape()), shape_string(t.strides()));
  }
  TESSEL_TRY(launch_kernel("copy8", {}, {(*views)[0], (*views)[1]}));
  return out;
}

Expected<View> rows_view(const Tensor& t) {
  const int64_t n = t.shape().empty() ? 1 : t.shape().back();
  const int64_t rows = n == 0 ? 0 : t.numel() / n;
  if (t.rank() >= 1 && (t.strides().back() == 1 || n == 1)) {
    // The leading dimensions merge into one when each steps exactly over the next non-trivial
    // one; the row stride is then that of the innermost non-trivial leading dimension.
    int64_t row_stride = n, inner_span = -1;
    bool mergeable = true;
    for (int64_t d = t.rank() - 2; d >= 0; --d) {
      if (t.shape()[d] == 1) continue;
      if (inner_span < 0)
        row_stride = t.strides()[d];
      else if (t.strides()[d] != inner_span)
        mergeable = false;
      inner_span = t.strides()[d] * t.shape()[d];
    }
    if (mergeable) return View{t, {rows, n}, {row_stride, 1}};
  }
  TESSEL_ASSIGN_OR_RETURN(Tensor c, contiguous_on_device(t));
  return View{c, {rows, n}, {n, 1}};
}

Expected<std::pair<Tensor, Tensor>> row_norm_grad(const std::string& kernel,
                                                  const KernelParams& params, const Tensor& x,
                                                  const Tensor& gamma, const Tensor& dy,
                                                  double eps) {
  TESSEL_ASSIGN_OR_RETURN(View xv, rows_view(x));
  TESSEL_ASSIGN_OR_RETURN(View gv, rows_view(dy));
  const int64_t m = xv.shape[0], n = xv.shape[1];
  TESSEL_ASSIGN_OR_RETURN(Tensor dx, empty_like_device(x.shape(), x.dtype(), x));
  TESSEL_ASSIGN_OR_RETURN(Tensor dy_xhat, empty_like_device({m, n}, DType::kF32, x));
  TESSEL_TRY(
      launch_kernel(kernel, params, {xv, gamma, gv, View{dx, {m, n}, {n, 1}}, dy_xhat, eps}));
  return std::make_pair(dx, dy_xhat);
}

bool kernel_writable_in_place(const Tensor& t) {
  return t.defined();
}

std::string tensor_summary(const Tensor& t) {
  if (!t.defined()) return "undefined";
  return shape_string(t.shape()) + " " + dtype_name(t.dtype()) + " on " + t.device()->id();
}

}  // namespace tessel::ops
