// Helpers the op definitions share for fitting N-d tensors to the fixed ranks the kernels declare:
// merging dimensions that are contiguous with each other in every operand, copying a view to a
// contiguous tensor on its device, and viewing a tensor as a matrix.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "ops/kernel_cache.h"
#include "runtime/tensor.h"

namespace tessel::ops {

// Views of tensors of one shape (broadcast operands already expanded) with the fewest
// dimensions: size-1 dimensions dropped, neighbours merged where every operand allows, then
// padded with leading 1s to `rank`. nullopt when more than `rank` dimensions remain.
std::optional<std::vector<View>> merged_views(const std::vector<Tensor>& tensors, size_t rank);

// Launches an element-wise kernel over tensors of one shape (broadcast inputs already expanded),
// merging dimensions to the kernel's [D0, D1, D2]; inputs that keep more than 3 are copied
// contiguous first. `scalars` follow the tensors.
Status launch_elementwise(const std::string& kernel, const KernelParams& params,
                          std::vector<Tensor> tensors, const std::vector<KernelArg>& scalars);

// `t` itself when contiguous, else a contiguous copy made on its device (the copy4 kernel).
Expected<Tensor> contiguous_on_device(const Tensor& t);

// Always a new contiguous tensor with t's elements, copied on t's device.
Expected<Tensor> copy_on_device(const Tensor& t);

// `t` ([..., n]) as a [rows, n] view with unit column stride, copying only when the leading
// dimensions do not merge.
Expected<View> rows_view(const Tensor& t);

// A row-normalisation gradient kernel (layernorm_grad, rmsnorm_grad) over x [..., N] as rows:
// (dx, dy * xhat [rows, N]) from x, gamma [N] and the output gradient dy; the caller sums the
// second over rows for gamma's gradient.
Expected<std::pair<Tensor, Tensor>> row_norm_grad(const std::string& kernel,
                                                  const KernelParams& params, const Tensor& x,
                                                  const Tensor& gamma, const Tensor& dy,
                                                  double eps);

// Whether a kernel can write into `t` where it lies: any defined tensor, on every device, since
// kernels take buffer + offset (launch_kernel). In-place accumulation (add_into, gemm with
// beta = 1) needs it.
bool kernel_writable_in_place(const Tensor& t);

// "[2, 3] f32 on cpu" (or "undefined") for error messages.
std::string tensor_summary(const Tensor& t);

// An uninitialised contiguous tensor on `like`'s device.
Expected<Tensor> empty_like_device(const Shape& shape, DType dtype, const Tensor& like);

}  // namespace tessel::ops
