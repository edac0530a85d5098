// conv2d's algorithm choice points (ops/algorithm_choice.h): its forward pass, its input gradient
// and its weight gradient each run as an implicit gemm (CPU) or as im2col + gemm, and the
// forward of a shallow layer also over unfolded columns. A launch's sizes are, in this order,
//   N C H W O | KH KW SH SW PH PW DH DW G
// (batch, input channels, height, width, output channels | window, strides, padding, dilation,
// groups): the first five are the key's shape, the rest its fixed part.
#pragma once

#include <vector>

#include "ops/algorithm_choice.h"

namespace tessel::ops {

const AlgorithmPoint& conv_forward_point();
const AlgorithmPoint& conv_input_grad_point();
const AlgorithmPoint& conv_weight_grad_point();
std::vector<const AlgorithmPoint*> conv_algorithm_points();

// Whether a layer can run over unfolded columns (relayout's `unfold`): one group, a window more
// than one column wide, no column dilation.
bool conv_can_unfold(int64_t groups, int64_t kw, int64_t dw);

}  // namespace tessel::ops
