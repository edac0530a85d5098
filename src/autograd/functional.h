// The ops of ops/ops.h on Variables, recorded for backward. Each is apply() with the op's name
// and attributes; see ops/ops.h for what each computes.
//
//   TESSEL_ASSIGN_OR_RETURN(Variable h, relu(linear(x, w1, b1)));   // Expected<Variable> chains
#pragma once

#include "autograd/variable.h"

namespace tessel::autograd {

Expected<Variable> add(const Variable& a, const Variable& b);
Expected<Variable> sub(const Variable& a, const Variable& b);
Expected<Variable> mul(const Variable& a, const Variable& b);
Expected<Variable> div(const Variable& a, const Variable& b);
Expected<Variable> relu(const Variable& x);
Expected<Variable> gelu(const Variable& x);
Expected<Variable> tanh(const Variable& x);
Expected<Variable> sigmoid(const Variable& x);
Expected<Variable> scale(const Variable& x, double factor);
Expected<Variable> matmul(const Variable& a, const Variable& b);
Expected<Variable> linear(const Variable& x, const Variable& weight, const Variable& bias);
Expected<Variable> sum(const Variable& x, std::vector<int64_t> axes = {}, bool keepdim = false);
Expected<Variable> mean(const Variable& x, std::vector<int64_t> axes = {}, bool keepdim = false);
Expected<Variable> softmax(const Variable& x);
Expected<Variable> log_softmax(const Variable& x);
Expected<Variable> cross_entropy(const Variable& logits, const Variable& target,
                                 int64_t ignore_index = -100, double label_smoothing = 0.0,
                                 int reduction = 0);
Expected<Variable> layer_norm(const Variable& x, const Variable& weight, const Variable& bias,
                              double eps = 1e-5);
Expected<Variable> embedding(const Variable& weight, const Variable& ids);
Expected<Variable> reshape(const Variable& x, const Shape& shape);
Expected<Variable> permute(const Variable& x, const std::vector<int64_t>& order);
Expected<Variable> slice(const Variable& x, int64_t dim, int64_t start, int64_t end,
                         int64_t step = 1);

}  // namespace tessel::autograd
