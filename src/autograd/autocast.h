// Mixed precision for recorded ops: inside an Autocast scope the gemm ops (linear, matmul,
// conv2d) multiply in a 16-bit dtype with f32 accumulation; every other op (softmax, norms,
// losses, reductions, element-wise) runs in f32 as it would outside the scope.
//
//   {
//     autograd::Autocast autocast(DType::kBF16);        // per thread, like NoGrad
//     TESSEL_ASSIGN_OR_RETURN(Variable logits, model.forward(x));
//     TESSEL_ASSIGN_OR_RETURN(Variable loss, cross_entropy(logits, y));
//     TESSEL_TRY(loss.backward());   // backward's gemms compute as their forward did
//   }
//
// How: the scope's dtype becomes the op's "compute" attr (ops/gemm_precision.h), recorded on the
// tape with the op, so its backward gemms use it too. Weights and gradients stay f32: the
// operands are rounded to 16 bits as the gemm stages them (on a CPU, while packing, a copy the
// gemm makes anyway), so there is no 16-bit copy of a weight to keep in step with the f32
// master, and gradients reach the f32 master weights unrounded. The activations the tape keeps
// for backward are kept as 16-bit copies (autograd/saved_precision.h: which ones, and why), since
// they are most of a training step's peak memory. docs/DESIGN.md, "Mixed precision", has the
// policy and the reasons.
#pragma once

#include "support/dtype.h"

namespace tessel::autograd {

class Autocast {
 public:
  // f32 turns mixed precision off inside the scope; bf16 or f16 turn it on.
  explicit Autocast(DType compute);
  ~Autocast();
  Autocast(const Autocast&) = delete;
  Autocast& operator=(const Autocast&) = delete;

 private:
  DType previous_;
};

// The gemm ops' compute dtype on this thread: f32 outside any Autocast scope.
DType autocast_dtype();

}  // namespace tessel::autograd
