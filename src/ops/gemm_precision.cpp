// The precision of gemm ops (see gemm_precision.h).
#include "ops/gemm_precision.h"

#include "ops/ops.h"

namespace tessel::ops {

bool is_float_operand(DType t) {
  return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16;
}

Expected<DType> gemm_compute_dtype(const std::string& op, const std::vector<TensorMeta>& operands,
                                   const Attrs& attrs) {
  DType half = DType::kF32;
  for (const TensorMeta& m : operands) {
    if (!is_float_operand(m.dtype))
      return invalid_argument("{}: operands are f32, f16 or bf16, got {}", op,
                              shapes_string(operands));
    if (m.dtype == DType::kF32) continue;
    if (half != DType::kF32 && half != m.dtype && !attrs.has("compute"))
      return invalid_argument(
          "{}: operands of two 16-bit dtypes ({}); cast one, or say which to compute in with the "
          "'compute' attr",
          op, shapes_string(operands));
    half = m.dtype;
  }
  if (!attrs.has("compute")) return half;
  const int64_t code = attrs.get_int("compute", 0);
  if (code < 0 || code >= kDTypeCount || !is_float_operand(static_cast<DType>(code)))
    return invalid_argument("{}: 'compute' must be the code of f32, f16 or bf16, got {}", op, code);
  return static_cast<DType>(code);
}

Expected<Tensor> gemm_operand(const Tensor& t, DType compute) {
  if (compute != DType::kF16) return t;
  return cast(t, DType::kF16);
}

std::pair<std::string, KernelParams> gemm_kernel(bool batched, const Tensor& a, const Tensor& b,
                                                 DType compute, KernelParams params) {
  std::string name = batched ? "batched_gemm" : "gemm";
  if (a.dtype() == DType::kF32 && b.dtype() == DType::kF32 && compute == DType::kF32)
    return {name, std::move(params)};
  params["T"] = dtype_name(a.dtype());
  params["TB"] = dtype_name(b.dtype());
  // f16 operands (cast by gemm_operand) are staged exactly as f32: the CPU has no f16 multiply.
  params["P"] = compute == DType::kBF16 ? "bf16" : "f32";
  return {name + "_rounded", std::move(params)};
}

double round_to(double v, DType compute) {
  const float f = static_cast<float>(v);
  if (compute == DType::kBF16) return static_cast<float>(BFloat16(f));
  if (compute == DType::kF16) return static_cast<float>(Half(f));
  return v;
}

}  // namespace tessel::ops
