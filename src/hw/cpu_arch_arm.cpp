// arm64 CPU detection: ISA features from the kernel's hardware capability bits
// (getauxval(AT_HWCAP/AT_HWCAP2), the interface Linux documents for user space), vendor and
// model from the MIDR fields in /proc/cpuinfo. arm64 has no user-space cache query that is
// reliable across vendors, so cache sizes come from sysfs alone (cpu_info.cpp).
#if defined(__aarch64__)

#include <fmt/format.h>
#include <sys/auxv.h>

#include <cstdint>
#include <fstream>
#include <string>

#include "hw/cpu_arch.h"

namespace tessel {
namespace {

// Bits from arch/arm64/include/uapi/asm/hwcap.h, spelled out so old headers still compile.
constexpr unsigned long kHwcapAsimd = 1ul << 1;
constexpr unsigned long kHwcapAsimdHp = 1ul << 10;
constexpr unsigned long kHwcapAsimdDp = 1ul << 20;
constexpr unsigned long kHwcapSve = 1ul << 22;
constexpr unsigned long kHwcap2Sve2 = 1ul << 1;
constexpr unsigned long kHwcap2I8mm = 1ul << 13;
constexpr unsigned long kHwcap2Bf16 = 1ul << 14;

// The value of the first "key : value" line of /proc/cpuinfo whose key is `key`.
std::string cpuinfo_field(const std::string& key) {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    std::size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string k = line.substr(0, colon);
    while (!k.empty() && (k.back() == ' ' || k.back() == '\t'))
      k.pop_back();
    if (k != key) continue;
    std::size_t v = line.find_first_not_of(" \t", colon + 1);
    return v == std::string::npos ? std::string() : line.substr(v);
  }
  return {};
}

int parse_int(const std::string& s) {
  try {
    return static_cast<int>(std::stol(s, nullptr, 0));
  } catch (...) {
    return 0;
  }
}

const char* implementer_name(int implementer) {
  switch (implementer) {
    case 0x41:
      return "ARM";
    case 0x42:
      return "Broadcom";
    case 0x46:
      return "Fujitsu";
    case 0x48:
      return "HiSilicon";
    case 0x4e:
      return "NVIDIA";
    case 0x51:
      return "Qualcomm";
    case 0x61:
      return "Apple";
    case 0xc0:
      return "Ampere";
    default:
      return nullptr;
  }
}

// Core names for the parts tessel is most likely to meet; others print as their MIDR numbers.
const char* part_name(int implementer, int part) {
  struct Part {
    int implementer, part;
    const char* name;
  };
  static const Part kParts[] = {
      {0x41, 0xd03, "Cortex-A53"},  {0x41, 0xd05, "Cortex-A55"},  {0x41, 0xd08, "Cortex-A72"},
      {0x41, 0xd0b, "Cortex-A76"},  {0x41, 0xd0c, "Neoverse-N1"}, {0x41, 0xd40, "Neoverse-V1"},
      {0x41, 0xd41, "Cortex-A78"},  {0x41, 0xd44, "Cortex-X1"},   {0x41, 0xd47, "Cortex-A710"},
      {0x41, 0xd49, "Neoverse-N2"}, {0x41, 0xd4f, "Neoverse-V2"}, {0x41, 0xd84, "Neoverse-V3"},
      {0x41, 0xd8e, "Neoverse-N3"}, {0x46, 0x001, "A64FX"},       {0x48, 0xd01, "Kunpeng-920"},
      {0xc0, 0xac3, "Ampere-1"},    {0xc0, 0xac4, "Ampere-1a"},
  };
  for (const Part& p : kParts)
    if (p.implementer == implementer && p.part == part) return p.name;
  return nullptr;
}

}  // namespace

CpuFeatureSet detect_cpu_features() {
  CpuFeatureSet f;
  unsigned long hwcap = getauxval(AT_HWCAP);
  unsigned long hwcap2 = getauxval(AT_HWCAP2);
  f.set(CpuFeature::kAsimd, hwcap & kHwcapAsimd);
  f.set(CpuFeature::kAsimdHp, hwcap & kHwcapAsimdHp);
  f.set(CpuFeature::kAsimdDp, hwcap & kHwcapAsimdDp);
  f.set(CpuFeature::kSve, hwcap & kHwcapSve);
  f.set(CpuFeature::kSve2, hwcap2 & kHwcap2Sve2);
  f.set(CpuFeature::kI8mm, hwcap2 & kHwcap2I8mm);
  f.set(CpuFeature::kBf16, hwcap2 & kHwcap2Bf16);
  return f;
}

Status enable_amx_for_process() {
  return unavailable("AMX: an x86 feature; this CPU is arm64");
}

namespace hw_detail {

CpuIdentity detect_cpu_identity() {
  CpuIdentity id;
  int implementer = parse_int(cpuinfo_field("CPU implementer"));
  int part = parse_int(cpuinfo_field("CPU part"));
  const char* vendor = implementer_name(implementer);
  id.vendor = vendor ? vendor : fmt::format("implementer 0x{:02x}", implementer);
  const char* name = part_name(implementer, part);
  // Some kernels and SoCs do print a model name; prefer the core name when we know it.
  std::string model_name = cpuinfo_field("model name");
  id.model = name ? name : !model_name.empty() ? model_name : fmt::format("part 0x{:03x}", part);
  id.family = implementer;
  id.model_number = part;
  id.stepping = parse_int(cpuinfo_field("CPU revision"));
  return id;
}

CacheSizes detect_cache_sizes_from_cpu() {
  return {};
}

}  // namespace hw_detail
}  // namespace tessel

#endif  // __aarch64__
