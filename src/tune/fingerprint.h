// What makes two devices the same for tuning: a tuned block size measured on one is trusted on
// another only when their fingerprints match.
//
//   cpu: "cpu AMD EPYC 9B45 | avx512bf16 | L1d 48K L2 1024K L3 32768K | 2 threads"
//   opencl/cuda: "opencl pthread-AMD EPYC | driver 3.1 | 2 CUs | local 64K"
#pragma once

#include <string>

#include "runtime/device.h"

namespace tessel::tune {

std::string device_fingerprint(Device* device);

}  // namespace tessel::tune
