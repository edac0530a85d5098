// CPU detection for architectures tessel has no specific code for: no ISA features (the portable
// kernels run), identity from the compiler's idea of the target.
#if !defined(__x86_64__) && !defined(__i386__) && !defined(__aarch64__)

#include "hw/cpu_arch.h"

namespace tessel {

CpuFeatureSet detect_cpu_features() {
  return {};
}

Status enable_amx_for_process() {
  return unavailable("AMX: an x86 feature; this CPU is not x86");
}

namespace hw_detail {

CpuIdentity detect_cpu_identity() {
  return {"unknown", "unknown", 0, 0, 0};
}

CacheSizes detect_cache_sizes_from_cpu() {
  return {};
}

}  // namespace hw_detail
}  // namespace tessel

#endif
