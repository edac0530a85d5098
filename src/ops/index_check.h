// Bounds checks of integer ids (embedding rows, class targets, gather indices) on the device that
// holds them, so that no op reads outside a table and returns a value for a bad id.
//
//   TESSEL_TRY(check_indices("embedding", "id", ids, 0, vocabulary));
#pragma once

#include <climits>
#include <string>

#include "runtime/tensor.h"
#include "support/status.h"

namespace tessel::ops {

// out_of_range naming the first id outside [lo, hi) that is not `skip` and its position:
// "cross_entropy: target 5 at position 2 is outside [0, 5)". Ids in host memory are read where
// they lie; elsewhere a kernel (kernels/index.tile) flags them and only the flags' maximum comes
// back to the host (the ids follow only when one is bad).
Status check_indices(const std::string& op, const std::string& noun, const Tensor& ids, int64_t lo,
                     int64_t hi, int64_t skip = INT64_MIN);

}  // namespace tessel::ops
