// What the host CPU is: vendor and model, how many cores and hardware threads (all of them, and
// those this process may run on), its cache sizes, the machine's memory and the ISA features.
// Everything here is read, not measured; hw/measure.h holds the measured figures.
//
//   const CpuInfo& cpu = host_cpu_info();   // detected once per process
//   int workers = cpu.usable_cores;
//   if (cpu.features.has(CpuFeature::kAvx2)) ...
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "hw/cpu_features.h"

namespace tessel {

struct CacheSizes {
  // Bytes of one instance of each cache (what one core sees), 0 when unknown.
  std::int64_t l1d_bytes = 0;
  std::int64_t l2_bytes = 0;
  std::int64_t l3_bytes = 0;
  // Hardware threads sharing one instance of the cache (1 for a private cache), 0 when unknown.
  int l2_shared_by = 0;
  int l3_shared_by = 0;
  int line_bytes = 0;
  // Where the sizes came from: "sysfs" or "cpuid".
  std::string source;
};

struct CpuTopology {
  int packages = 0;  // sockets
  int cores = 0;     // physical cores online
  int threads = 0;   // hardware threads (logical CPUs) online
  // The affinity mask is the calling thread's (sched_getaffinity(0)): the process's, as set by
  // taskset, numactl or a container's cpuset, unless this thread was pinned since.
  int usable_cores = 0;    // physical cores with at least one thread in the affinity mask
  int usable_threads = 0;  // logical CPUs in the affinity mask
  // One logical CPU id per usable physical core (its first usable sibling): where to pin one
  // worker per core.
  std::vector<int> one_cpu_per_usable_core;
  // Every logical CPU id in the affinity mask.
  std::vector<int> usable_cpus;
  // Where the counts came from: "sysfs" or "sysconf" (no topology information: cores == threads).
  std::string source;
};

struct CpuInfo {
  std::string architecture;  // "x86_64" or "aarch64"
  std::string vendor;        // "GenuineIntel", "AuthenticAMD", "ARM", ...
  std::string model;         // "AMD EPYC 9B45", "Neoverse-V2", ...
  // x86: cpuid family/model/stepping (family and model with their extended fields added).
  // arm64: implementer, part and revision from MIDR.
  int family = 0;
  int model_number = 0;
  int stepping = 0;
  CpuTopology topology;
  CacheSizes caches;
  std::int64_t memory_bytes = 0;  // physical memory (MemTotal)
  CpuFeatureSet features;
};

// Detects everything above. Never fails: what cannot be read is left at 0 / empty.
CpuInfo detect_cpu_info();

// detect_cpu_info() once per process.
const CpuInfo& host_cpu_info();

// The parts, for tests and for callers that need only one of them.
CpuTopology detect_cpu_topology();
CacheSizes detect_cache_sizes();
std::int64_t detect_memory_bytes();

}  // namespace tessel
