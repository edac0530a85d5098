// A test's comparison of an op's result with a double-precision reference: the worst
// |got - want| / (1 + |want|) over the elements must stay within `tol` (relative for large
// values, absolute near zero); a failure names the element and both values.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <string>
#include <vector>

namespace tessel::ops::testing {

inline void expect_close(const std::vector<double>& got, const std::vector<double>& want,
                         double tol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::abs(got[i] - want[i]) / (1.0 + std::abs(want[i]));
    if (!(err <= worst)) {  // a NaN is the worst
      worst = err;
      at = i;
    }
  }
  EXPECT_LE(worst, tol) << what << " at " << at << ": " << got[at] << " vs " << want[at];
}

}  // namespace tessel::ops::testing
