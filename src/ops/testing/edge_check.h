// Helpers of the op edge-case tests (src/ops/coverage_*_test.cpp), beside every_device.h's device
// loop: small tensors from literals, values back on the host, an expected error, and one
// op's backward rule run directly on given inputs and output gradient.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "ops/op.h"
#include "ops/testing/every_device.h"

namespace tessel::ops::testing {

inline Tensor floats(Device* d, std::vector<float> v, const Shape& shape) {
  return Tensor::from_vector(v, shape, d).value();
}
inline Tensor longs(Device* d, std::vector<int64_t> v, const Shape& shape) {
  return Tensor::from_vector(v, shape, d).value();
}
inline Tensor bools(Device* d, std::vector<bool> v, const Shape& shape) {
  return Tensor::from_vector(v, shape, d).value();
}

// A float result on the host (empty, with a test failure, when it is an error).
inline std::vector<float> host(const Expected<Tensor>& t) {
  EXPECT_TRUE(t.ok()) << t.status().to_string();
  if (!t.ok()) return {};
  return t->to_vector<float>().value();
}

// 0, 1, 2, ... (from `start`) as floats: distinct values whose positions a test can check.
inline std::vector<float> iota(int64_t n, float start = 0) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i)
    v[i] = start + static_cast<float>(i);
  return v;
}

inline void expect_error(const Expected<Tensor>& r, Code code,
                         const std::vector<std::string>& says) {
  ASSERT_FALSE(r.ok()) << "expected an error";
  EXPECT_EQ(r.status().code(), code) << r.status().to_string();
  for (const std::string& s : says)
    EXPECT_NE(r.status().message().find(s), std::string::npos)
        << "'" << s << "' not in: " << r.status().message();
}

// The gradients `name`'s backward rule gives for inputs `in` and output gradient `g` (every
// differentiable input asks for one; the output is recomputed for rules that read it).
inline std::vector<Tensor> backward_of(const std::string& name, const std::vector<Tensor>& in,
                                       const Tensor& g, const Attrs& attrs = {}) {
  const OpDef& op = *find_op(name).value();
  BackwardArgs args{{}, {}, {}, attrs, g, {}, {}};
  for (size_t i = 0; i < in.size(); ++i) {
    args.inputs.push_back(in[i]);
    args.input_meta.push_back({in[i].shape(), in[i].dtype()});
    args.needs_grad.push_back(op.differentiable[i]);
  }
  if (op.save_output) args.output = run(op, in, attrs).value();
  Expected<std::vector<Tensor>> grads = op.backward(args);
  EXPECT_TRUE(grads.ok()) << grads.status().to_string();
  return grads.ok() ? *grads : std::vector<Tensor>(in.size());
}

}  // namespace tessel::ops::testing
