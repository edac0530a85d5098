// Bounds checks of ids where they live (see index_check.h).
#include "ops/index_check.h"

#include "ops/kernel_util.h"

namespace tessel::ops {
namespace {

Status first_bad(const std::string& op, const std::string& noun, const std::vector<int64_t>& ids,
                 int64_t lo, int64_t hi, int64_t skip) {
  for (size_t i = 0; i < ids.size(); ++i)
    if ((ids[i] < lo || ids[i] >= hi) && ids[i] != skip)
      return out_of_range("{}: {} {} at position {} is outside [{}, {})", op, noun, ids[i], i, lo,
                          hi);
  return ok_status();
}

}  // namespace

Status check_indices(const std::string& op, const std::string& noun, const Tensor& ids, int64_t lo,
                     int64_t hi, int64_t skip) {
  if (ids.numel() == 0) return ok_status();
  if (ids.dtype() != DType::kI64)
    return invalid_argument("{}: {}s must be i64, got {}", op, noun, tensor_summary(ids));
  if (ids.storage()->host_address() != nullptr) {
    TESSEL_ASSIGN_OR_RETURN(std::vector<int64_t> values, ids.to_vector<int64_t>());
    return first_bad(op, noun, values, lo, hi, skip);
  }
  TESSEL_ASSIGN_OR_RETURN(Tensor flat, contiguous_on_device(ids));
  const int64_t n = flat.numel();
  TESSEL_ASSIGN_OR_RETURN(Tensor flags, empty_like_device({n}, DType::kF32, flat));
  TESSEL_TRY(
      launch_kernel("index_flags", {{"T", "f32"}}, {View{flat, {n}, {1}}, flags, lo, hi, skip}));
  TESSEL_ASSIGN_OR_RETURN(Tensor any, empty_like_device({1}, DType::kF32, flat));
  TESSEL_TRY(launch_kernel("reduce_rows", {{"OP", "1"}}, {View{flags, {1, n}, {n, 1}}, any}));
  TESSEL_ASSIGN_OR_RETURN(std::vector<float> verdict, any.to_vector<float>());
  if (verdict[0] == 0.0f) return ok_status();
  TESSEL_ASSIGN_OR_RETURN(std::vector<int64_t> values, flat.to_vector<int64_t>());
  return first_bad(op, noun, values, lo, hi, skip);
}

}  // namespace tessel::ops
