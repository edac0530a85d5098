// conv3d (ops/conv3d_ops.cpp) as torch.nn.functional.conv3d: x [N, C, D, H, W], weight
// [O, C / groups, KD, KH, KW], bias [O]; stride, padding, dilation {d, h, w} (or one value for
// all three). It runs as one conv2d over the depth taps, forward and backward.
#pragma once

#include <vector>

#include "ops/op.h"

namespace tessel::ops {

Expected<Tensor> conv3d(const Tensor& x, const Tensor& weight, const Tensor& bias,
                        std::vector<int64_t> stride = {1, 1, 1},
                        std::vector<int64_t> padding = {0, 0, 0},
                        std::vector<int64_t> dilation = {1, 1, 1}, int64_t groups = 1);

// Registers conv3d (after conv2d, which it runs).
void add_conv3d_ops(std::vector<OpDef>& ops);

}  // namespace tessel::ops
