// scaled_dot_product_attention with dropout (ops/attention_ops.cpp): attention weights dropped
// after the softmax as PyTorch's dropout_p does, the kept ones scaled by 1 / (1 - p), p = 1
// giving zeros. The mask is the dropout op's hash of (seed, position in [..., Hq, L, S]), so a
// seed gives the same mask on every device and backward makes it again. ops.h's overloads
// without a seed refuse dropout_p > 0.
#pragma once

#include "ops/ops.h"

namespace tessel::ops {

Expected<Tensor> scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                              const AttentionOptions& options, int64_t seed);
Expected<Attrs> attention_attrs(const AttentionOptions& options, int64_t seed);

}  // namespace tessel::ops
