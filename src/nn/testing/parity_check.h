// What the PyTorch parity tests (gpt_parity_test.cpp, image_parity_test.cpp) share: where the
// committed fixtures are, the devices to compare on, and a tensor-by-tensor comparison that
// reports the first misses and the largest differences. Test-only (includes GoogleTest).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "autograd/variable.h"
#include "io/safetensors.h"
#include "nn/module.h"
#include "ops/testing/every_device.h"
#include "runtime/device.h"
#include "support/log.h"

namespace tessel::nn::parity {

// src/nn/testdata/<name>: ctest sets TESSEL_SOURCE_DIR; run by hand, the source tree is where
// this header was compiled from.
inline std::string fixture_path(const std::string& name) {
  const char* source = std::getenv("TESSEL_SOURCE_DIR");
  std::filesystem::path root = source ? std::filesystem::path(source)
                                      : std::filesystem::path(__FILE__).parent_path() / "../../..";
  return (root / "src" / "nn" / "testdata" / name).string();
}

// Every device here, or those $TESSEL_TEST_DEVICES names (the op library launches on all of
// them); `what` names the test in the warning printed when only the CPU is left.
inline std::vector<Device*> devices(const std::string& what) {
  std::vector<Device*> list = ops::testing::test_devices_here();
  if (list.size() == 1) log_warn("{}: no OpenCL device here, testing cpu only", what);
  return list;
}

// The largest differences seen in a group of tensors, for the summary line.
struct Worst {
  double abs = 0;
  double rel = 0;  // |got - want| / |want| over elements with |want| > 1e-3 (smaller ones are
                   // judged by the absolute part)
};

// Every element within abs_tol + rel_tol |want|; the first three misses are named.
inline void compare(const std::string& what, const Tensor& got_tensor, const Tensor& want_tensor,
                    double abs_tol, double rel_tol, Worst& worst) {
  ASSERT_EQ(got_tensor.shape(), want_tensor.shape()) << what;
  Expected<std::vector<float>> got_values = got_tensor.to_vector<float>();
  Expected<std::vector<float>> want_values = want_tensor.to_vector<float>();
  ASSERT_TRUE(got_values.ok() && want_values.ok()) << what;
  const std::vector<float>& got = *got_values;
  const std::vector<float>& want = *want_values;
  int misses = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    double err = std::fabs(static_cast<double>(got[i]) - want[i]);
    worst.abs = std::max(worst.abs, err);
    if (std::fabs(want[i]) > 1e-3) worst.rel = std::max(worst.rel, err / std::fabs(want[i]));
    if (!(err <= abs_tol + rel_tol * std::fabs(want[i])) && ++misses <= 3)
      ADD_FAILURE() << what << "[" << i << "] is " << got[i] << ", PyTorch " << want[i];
  }
  EXPECT_EQ(misses, 0) << what << ": " << misses << " of " << got.size() << " out of tolerance";
}

// How many fixture tensors are named "<prefix>...".
inline size_t count_prefixed(const NamedTensors& fx, const std::string& prefix) {
  return size_t(std::count_if(fx.begin(), fx.end(),
                              [&](const auto& kv) { return kv.first.rfind(prefix, 0) == 0; }));
}

// Every parameter from the fixture's "param.<name>" (same shape: weights are stored as PyTorch
// holds them on both sides), and no fixture parameter left over. Use under
// ASSERT_NO_FATAL_FAILURE.
inline void load_parameters(const NamedTensors& fx, FlatParameters& params) {
  size_t loaded = 0;
  for (const FlatParameters::Entry& e : params.entries()) {
    auto it = fx.find("param." + e.name);
    ASSERT_NE(it, fx.end()) << "fixture has no param." << e.name;
    ASSERT_EQ(it->second.shape(), e.parameter->shape) << e.name;
    Tensor value = e.parameter->variable.data();  // a view of the flat buffer
    ASSERT_TRUE(value.copy_from(it->second).ok()) << e.name;
    ++loaded;
  }
  ASSERT_EQ(loaded, count_prefixed(fx, "param.")) << "the fixture has parameters the model lacks";
}

inline float scalar(const autograd::Variable& v) {
  return v.data().to_vector<float>().value()[0];
}

}  // namespace tessel::nn::parity
