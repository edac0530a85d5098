// conv2d's algorithm choice points (ops/algorithm_choice.h): its forward pass, its input gradient
// and its weight gradient each run as an implicit gemm (CPU) or as im2col + gemm, the forward and
// weight gradient of a shallow layer also over unfolded columns, and the forward and input
// gradient of a 3x3 / stride 1 layer as Winograd F(4x4, 3x3) (ops/conv_winograd.h, every
// device). A launch's sizes are,
// in this order,
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

// Whether a layer can run as Winograd F(4x4, 3x3): a 3x3 window, stride 1, dilation 1, one group
// (any padding). `sizes` as above.
bool conv_winograd_fits(const std::vector<int64_t>& sizes);

}  // namespace tessel::ops
