// For the op definitions (elementwise_ops.cpp, math_ops.cpp, integer_ops.cpp): PyTorch's type
// promotion, conversions and the integer kernels of kernels/integer.tile (i8, u8, i16, i32, i64).
// An op infers its result type with result_type(), then either runs an integer kernel on the
// operands as they are or converts them to the float result type and runs its float kernel.
// Integer results wrap around on overflow, as PyTorch's. The typed functions are in ops/ops.h.
//
//   TESSEL_ASSIGN_OR_RETURN(TensorMeta out, infer_promoted("add", in));  // dtype and shape

#pragma once

#include <string>
#include <vector>

#include "ops/op.h"

namespace tessel::ops {

// i8, u8, i16, i32, i64 (bool is not an integer here).
bool is_integer(DType t);

// torch.result_type for an element-wise op: integers promote among themselves (the wider type,
// signed when either is; u8 with i8 gives i16), an integer with a float gives the float, two
// floats the wider (f16 with bf16: f32); a 0-d tensor only decides when its kind (integer <
// float) is higher than every other operand's. Bool operands, and f64 with another float, are
// errors naming `op`.
Expected<DType> result_type(const std::string& op, const std::vector<TensorMeta>& in);

// The op's inputs' metadata joined: result_type and the broadcast shape.
Expected<TensorMeta> infer_promoted(const std::string& op, const std::vector<TensorMeta>& in);

// `t` converted to `to` on its device (the `cast` op, so it is recorded for autograd).
Expected<Tensor> convert(const Tensor& t, DType to);

// int_binary's op numbers (kernels/integer.tile).
enum class IntBinary {
  kAdd = 0,
  kSub = 1,
  kMul = 2,
  kFloorDiv = 3,
  kTruncDiv = 4,
  kRemainder = 5,
  kMaximum = 6,
  kMinimum = 7,
  kPow = 8  // PyTorch's integer pow: by squaring, wrapping; a negative exponent gives 0 but for +-1
};

// a op b broadcast to out.shape, computed as int_binary with out.dtype (an integer type). The
// division family fails with "<op>: integer division by zero" when any divisor is 0.
Expected<Tensor> int_binary(const std::string& op, IntBinary kind, const Tensor& a, const Tensor& b,
                            const TensorMeta& out);
// abs (0) or neg (1) of an integer tensor.
Expected<Tensor> int_unary(int kind, const Tensor& x);
// clamp of an integer tensor to integer bounds.
Expected<Tensor> int_clamp(const Tensor& x, int64_t lo, int64_t hi);
// a op b (0 ==, 1 !=, 2 <, 3 <=, 4 >, 5 >=) of two integer tensors as bool, out.shape.
Expected<Tensor> int_compare(int kind, const Tensor& a, const Tensor& b, const TensorMeta& out);
// where(c, a, b) of two integer tensors, out.dtype their promoted type.
Expected<Tensor> int_where(const Tensor& c, const Tensor& a, const Tensor& b,
                           const TensorMeta& out);

}  // namespace tessel::ops
