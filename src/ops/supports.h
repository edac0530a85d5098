// Whether a device runs an op (ggml's supports_op): asked before an op is run where it might not
// work, so that a caller (the op tests, a scheduler) can skip or fall back for that op alone
// instead of giving up on the device.
//
//   if (Status s = supports(*find_op("gelu").value(), {DType::kF32}, *device); !s.ok()) ...
#pragma once

#include <vector>

#include "ops/op.h"
#include "runtime/device.h"
#include "support/status.h"

namespace tessel::ops {

// ok, or unimplemented saying why not: the op library does not launch on the device's kind yet
// (launches_on), or an input dtype the device cannot compute in (f64 where the device has no
// double precision). An op that only makes a view launches nothing and runs everywhere.
Status supports(const OpDef& op, const std::vector<DType>& input_dtypes, const Device& device);

}  // namespace tessel::ops
