// The precision of the ops that run on a gemm (matmul, linear, conv2d): which dtype their
// multiplies run in, and how operands of other dtypes are brought to it.
//
// An op's "compute" attr (a dtype code, as cast's "dtype") names the multiply's dtype: f32, bf16
// or f16; without it, the 16-bit dtype among the operands (one at most), else f32. Accumulation
// and results are always f32; a gradient has its input's dtype.
//   bf16: operands of any float dtype are rounded to bf16 as the gemm stages them
//         (gemm_rounded, batched_gemm_rounded), so an f32 operand is never cast in a pass of its
//         own: on a CPU the rounding is part of packing, which the gemm does anyway.
//   f16:  operands are cast to f16 first (the CPU stages f16 as f32, so only a cast rounds).
//   f32:  16-bit operands are widened as they are staged.
// autograd's autocast (autograd/autocast.h) sets the attr; the ops themselves have no policy.
#pragma once

#include <string>
#include <vector>

#include "ops/kernel_cache.h"
#include "ops/op.h"

namespace tessel::ops {

bool is_float_operand(DType t);  // f32, f16 or bf16

// The compute dtype of a gemm op call (see above); an error names the op and the inputs.
Expected<DType> gemm_compute_dtype(const std::string& op, const std::vector<TensorMeta>& operands,
                                   const Attrs& attrs);

// `t` ready to be a gemm operand of compute dtype `compute`: cast to f16 when it computes in f16,
// else as it is (the gemm rounds or widens it).
Expected<Tensor> gemm_operand(const Tensor& t, DType compute);

// The kernel and compile-time parameters of a gemm (or batched gemm, `batched`) of `a` and `b`
// computing in `compute`: the f32 kernels when all three are f32, else the _rounded ones.
std::pair<std::string, KernelParams> gemm_kernel(bool batched, const Tensor& a, const Tensor& b,
                                                 DType compute, KernelParams params);

// The CPU block sizes of a gemm launch of `batch` products of [m, k] @ [k, n] on `threads`
// threads, when the op has no reason of its own: the kernels' defaults (192 x 256 x 256, empty
// params) while they give every thread at least two blocks, else smaller blocks, BM halved down
// to 48 first, then BN down to 64, until they do. A tuning database's choice still overrides it.
KernelParams cpu_gemm_blocks(int64_t batch, int64_t m, int64_t n, int threads);

// The block sizes matmul and linear pass for such a launch on a device of `kind`: the CPU's
// cpu_gemm_blocks on the global pool's threads; OpenCL keeps the kernels' `on opencl` blocks
// (measured on PoCL); CUDA takes small blocks that fit any GPU's registers and shared memory
// (kernels/gpu.txt lists them). `tessel tune gemm --shape` tunes against these.
KernelParams gemm_launch_blocks(DeviceKind kind, int64_t batch, int64_t m, int64_t n);

// A reference value rounded as the compute dtype rounds operands (tests only).
double round_to(double v, DType compute);

}  // namespace tessel::ops
