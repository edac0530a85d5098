// The architecture-specific half of CPU detection, one implementation per architecture
// (cpu_arch_x86.cpp, cpu_arch_arm.cpp, cpu_arch_other.cpp; each compiles to nothing elsewhere).
// Private to hw/: callers use hw/cpu_info.h.
#pragma once

#include <string>

#include "hw/cpu_info.h"

namespace tessel::hw_detail {

struct CpuIdentity {
  std::string vendor;
  std::string model;
  int family = 0;
  int model_number = 0;
  int stepping = 0;
};

CpuIdentity detect_cpu_identity();

// Cache sizes from the CPU itself (cpuid on x86), the fallback when sysfs has none. Empty
// (source "") where the architecture offers no such query.
CacheSizes detect_cache_sizes_from_cpu();

}  // namespace tessel::hw_detail
