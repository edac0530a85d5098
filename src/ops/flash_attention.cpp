// Launching kernels/flash_attention.tile (see flash_attention.h).
#include "ops/flash_attention.h"

#include <string>

#include "ops/kernel_util.h"
#include "support/thread_pool.h"

namespace tessel::ops {
namespace {

// The kernels' tile width D for head size e: the next of a few sizes, so that a handful of
// specialisations serve every model (columns past e are zeros that are never stored).
int64_t tile_width(int64_t e) {
  int64_t d = 16;
  while (d < e)
    d *= 2;
  return d;
}

KernelParams params_for(int64_t e) {
  return {{"D", std::to_string(tile_width(e))}};
}

}  // namespace

bool flash_attention_supported(const Device* device, int64_t e) {
  if (device == nullptr || e < 1) return false;
  return e <= (device->kind() == DeviceKind::kCpu ? 256 : 64);
}

Status flash_attention_forward(const AttentionHeads& in, const View& o, const View& lse,
                               double scale) {
  return launch_kernel("flash_attention", params_for(in.q.shape[3]),
                       {in.q, in.k, in.v, o, lse, scale});
}

FlashBackward flash_backward_choice(const Device* device, int64_t batch_heads) {
  // A block of the per-head kernel is a whole (batch, head): it does 5 block gemms per block pair
  // where the split kernels do 7, but it has only B H blocks. From two per thread the threads'
  // uneven shares (at worst one block in three) cost less than the split kernels' extra gemms;
  // GPUs want the split kernels' many small blocks.
  if (device == nullptr || device->kind() != DeviceKind::kCpu) return FlashBackward::kSplit;
  return batch_heads >= 2 * ThreadPool::global().num_threads() ? FlashBackward::kPerHead
                                                               : FlashBackward::kSplit;
}

Status flash_attention_backward(const AttentionHeads& in, const View& o, const View& d_o,
                                const View& lse, const AttentionHeads& grads, double scale,
                                std::optional<FlashBackward> choice) {
  const KernelParams params = params_for(in.q.shape[3]);
  TESSEL_ASSIGN_OR_RETURN(Tensor d_rows, empty_like_device(lse.shape, DType::kF32, lse.tensor));
  const View dv{d_rows, lse.shape, {lse.shape[1] * lse.shape[2], lse.shape[2], 1}};
  const FlashBackward how =
      choice ? *choice : flash_backward_choice(lse.tensor.device(), in.q.shape[0] * in.q.shape[1]);
  if (how == FlashBackward::kPerHead) {
    TESSEL_TRY(launch_kernel("flash_attention_rowdot", params, {o, d_o, dv}));
    return launch_kernel("flash_attention_grad", params,
                         {in.q, in.k, in.v, d_o, lse, dv, grads.q, grads.k, grads.v, scale});
  }
  TESSEL_TRY(launch_kernel("flash_attention_grad_q", params,
                           {in.q, in.k, in.v, o, d_o, lse, dv, grads.q, scale}));
  return launch_kernel("flash_attention_grad_kv", params,
                       {in.q, in.k, in.v, d_o, lse, dv, grads.k, grads.v, scale});
}

std::optional<View> heads_view(const Tensor& t) {
  const int64_t r = t.rank();
  if (r < 2) return std::nullopt;
  const Shape& s = t.shape();
  const Strides& st = t.strides();
  if (r == 2) return View{t, {1, 1, s[0], s[1]}, {0, 0, st[0], st[1]}};
  if (r == 3) return View{t, {1, s[0], s[1], s[2]}, {0, st[0], st[1], st[2]}};
  // Leading dimensions [0, r - 3) merge into B when each (of size > 1) steps over the next
  // whole; B's stride is the innermost one's.
  int64_t b = 1, b_stride = 0, inner_size = 0;
  for (int64_t i = r - 4; i >= 0; --i) {
    if (s[i] == 1) continue;
    if (inner_size != 0 && st[i] != b_stride * inner_size) return std::nullopt;
    if (inner_size == 0) b_stride = st[i];
    inner_size = inner_size == 0 ? s[i] : inner_size * s[i];
    b *= s[i];
  }
  return View{t, {b, s[r - 3], s[r - 2], s[r - 1]}, {b_stride, st[r - 3], st[r - 2], st[r - 1]}};
}

}  // namespace tessel::ops
