// The CPU instruction-set features that tessel's kernels dispatch on, spelled exactly as Linux
// spells them in /proc/cpuinfo ("avx512f", "avx512_bf16", "asimd"), so a name printed by
// `tessel info` can be checked against the kernel's own view of the machine.
//
//   CpuFeatureSet f = detect_cpu_features();
//   if (f.has(CpuFeature::kAvx512Bf16)) run_bf16_kernel();
//
// A feature is reported only when the CPU has it *and* the operating system saves the register
// state it needs (XGETBV on x86), which is also the rule Linux applies before it lists a flag.
#pragma once

#include <bitset>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "support/status.h"

namespace tessel {

// X(enumerator, linux name). x86 first, then arm64. The order is the order of `tessel info`.
#define TESSEL_CPU_FEATURES(X)  \
  X(kSse4_2, "sse4_2")          \
  X(kAvx, "avx")                \
  X(kAvx2, "avx2")              \
  X(kFma, "fma")                \
  X(kF16c, "f16c")              \
  X(kAvx512f, "avx512f")        \
  X(kAvx512dq, "avx512dq")      \
  X(kAvx512bw, "avx512bw")      \
  X(kAvx512vl, "avx512vl")      \
  X(kAvx512Vnni, "avx512_vnni") \
  X(kAvx512Bf16, "avx512_bf16") \
  X(kAvx512Fp16, "avx512_fp16") \
  X(kAvxVnni, "avx_vnni")       \
  X(kAmxTile, "amx_tile")       \
  X(kAmxBf16, "amx_bf16")       \
  X(kAmxInt8, "amx_int8")       \
  X(kAsimd, "asimd")            \
  X(kAsimdHp, "asimdhp")        \
  X(kAsimdDp, "asimddp")        \
  X(kI8mm, "i8mm")              \
  X(kBf16, "bf16")              \
  X(kSve, "sve")                \
  X(kSve2, "sve2")

enum class CpuFeature {
#define TESSEL_CPU_FEATURE_ENUM(e, name) e,
  TESSEL_CPU_FEATURES(TESSEL_CPU_FEATURE_ENUM)
#undef TESSEL_CPU_FEATURE_ENUM
      kCount
};

inline constexpr std::size_t kCpuFeatureCount = static_cast<std::size_t>(CpuFeature::kCount);

// "avx512_bf16" for CpuFeature::kAvx512Bf16.
const char* cpu_feature_name(CpuFeature feature);
// The feature Linux calls `name`, or nothing when tessel does not track it.
std::optional<CpuFeature> cpu_feature_from_name(std::string_view name);
// Every tracked feature, in declaration order.
const std::vector<CpuFeature>& all_cpu_features();

class CpuFeatureSet {
 public:
  bool has(CpuFeature f) const { return bits_.test(index(f)); }
  void set(CpuFeature f, bool on = true) { bits_.set(index(f), on); }
  bool empty() const { return bits_.none(); }
  bool operator==(const CpuFeatureSet&) const = default;
  // Linux names of the features present, in declaration order.
  std::vector<std::string> names() const;

 private:
  static std::size_t index(CpuFeature f) { return static_cast<std::size_t>(f); }
  std::bitset<kCpuFeatureCount> bits_;
};

// The features of the CPU this process runs on, with OS support checked.
CpuFeatureSet detect_cpu_features();

// AMX tile data is off for a Linux process until it asks for it (arch_prctl
// ARCH_REQ_XCOMP_PERM); a kernel that uses AMX calls this once first. Unavailable where the CPU
// or kernel has no AMX.
Status enable_amx_for_process();

}  // namespace tessel
