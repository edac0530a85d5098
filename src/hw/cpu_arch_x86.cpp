// x86 CPU detection through cpuid: vendor, brand string, family/model, ISA features with the
// operating system's register-state support checked through XGETBV, and cache sizes (the
// fallback for machines without /sys cache information).
#if defined(__x86_64__) || defined(__i386__)

#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>

#include "hw/cpu_arch.h"
#include "support/status.h"

namespace tessel {
namespace {

struct Regs {
  std::uint32_t eax = 0, ebx = 0, ecx = 0, edx = 0;
};

// cpuid(leaf, subleaf); all zero when the leaf is beyond what the CPU implements.
Regs cpuid(std::uint32_t leaf, std::uint32_t subleaf = 0) {
  Regs r;
  std::uint32_t max_leaf = __get_cpuid_max(leaf & 0x80000000u, nullptr);
  if (max_leaf < leaf) return r;
  __cpuid_count(leaf, subleaf, r.eax, r.ebx, r.ecx, r.edx);
  return r;
}

bool bit(std::uint32_t word, int n) {
  return (word >> n) & 1u;
}

// XCR0: which register states the OS saves on a context switch. Read with the raw opcode so
// this file needs no -mxsave.
std::uint64_t read_xcr0() {
  std::uint32_t lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<std::uint64_t>(hi) << 32) | lo;
}

// XCR0 bits (Intel SDM vol. 1, 13.1).
constexpr std::uint64_t kXcr0Sse = 1u << 1;
constexpr std::uint64_t kXcr0Avx = 1u << 2;
constexpr std::uint64_t kXcr0Opmask = 1u << 5;
constexpr std::uint64_t kXcr0ZmmHi256 = 1u << 6;
constexpr std::uint64_t kXcr0Hi16Zmm = 1u << 7;
constexpr std::uint64_t kXcr0TileCfg = 1u << 17;
constexpr std::uint64_t kXcr0TileData = 1u << 18;

std::string trim(std::string s) {
  std::size_t b = s.find_first_not_of(" \t");
  std::size_t e = s.find_last_not_of(" \t");
  return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}

std::string vendor_string() {
  Regs r = cpuid(0);
  char v[13] = {};
  std::memcpy(v + 0, &r.ebx, 4);
  std::memcpy(v + 4, &r.edx, 4);
  std::memcpy(v + 8, &r.ecx, 4);
  return v;
}

std::string brand_string() {
  if (__get_cpuid_max(0x80000000u, nullptr) < 0x80000004u) return {};
  char brand[49] = {};
  for (std::uint32_t i = 0; i < 3; ++i) {
    Regs r = cpuid(0x80000002u + i);
    std::memcpy(brand + 16 * i + 0, &r.eax, 4);
    std::memcpy(brand + 16 * i + 4, &r.ebx, 4);
    std::memcpy(brand + 16 * i + 8, &r.ecx, 4);
    std::memcpy(brand + 16 * i + 12, &r.edx, 4);
  }
  return trim(brand);
}

// One cache described by cpuid leaf 4 (Intel) or 0x8000001D (AMD), which share a layout.
struct CacheLeaf {
  int type = 0;  // 1 data, 2 instruction, 3 unified, 0 no more caches
  int level = 0;
  std::int64_t bytes = 0;
  int shared_by = 0;
  int line = 0;
};

CacheLeaf decode_cache_leaf(const Regs& r) {
  CacheLeaf c;
  c.type = static_cast<int>(r.eax & 0x1f);
  c.level = static_cast<int>((r.eax >> 5) & 0x7);
  c.shared_by = static_cast<int>((r.eax >> 14) & 0xfff) + 1;
  std::int64_t line = (r.ebx & 0xfff) + 1;
  std::int64_t partitions = ((r.ebx >> 12) & 0x3ff) + 1;
  std::int64_t ways = ((r.ebx >> 22) & 0x3ff) + 1;
  std::int64_t sets = static_cast<std::int64_t>(r.ecx) + 1;
  c.bytes = ways * partitions * line * sets;
  c.line = static_cast<int>(line);
  return c;
}

}  // namespace

CpuFeatureSet detect_cpu_features() {
  CpuFeatureSet f;
  Regs l1 = cpuid(1);
  Regs l7 = cpuid(7, 0);
  // Sub-leaf 1 exists only where leaf 7 says so (EAX = highest sub-leaf).
  Regs l7s1 = l7.eax >= 1 ? cpuid(7, 1) : Regs{};

  bool osxsave = bit(l1.ecx, 27);
  std::uint64_t xcr0 = osxsave ? read_xcr0() : 0;
  bool os_avx = (xcr0 & (kXcr0Sse | kXcr0Avx)) == (kXcr0Sse | kXcr0Avx);
  bool os_avx512 = os_avx && (xcr0 & (kXcr0Opmask | kXcr0ZmmHi256 | kXcr0Hi16Zmm)) ==
                                 (kXcr0Opmask | kXcr0ZmmHi256 | kXcr0Hi16Zmm);
  bool os_amx = (xcr0 & (kXcr0TileCfg | kXcr0TileData)) == (kXcr0TileCfg | kXcr0TileData);

  f.set(CpuFeature::kSse4_2, bit(l1.ecx, 20));
  bool avx = os_avx && bit(l1.ecx, 28);
  f.set(CpuFeature::kAvx, avx);
  // FMA and F16C are VEX-encoded and use the YMM state, so they need AVX's OS support too.
  f.set(CpuFeature::kFma, avx && bit(l1.ecx, 12));
  f.set(CpuFeature::kF16c, avx && bit(l1.ecx, 29));
  f.set(CpuFeature::kAvx2, avx && bit(l7.ebx, 5));
  f.set(CpuFeature::kAvxVnni, avx && bit(l7s1.eax, 4));

  bool avx512f = os_avx512 && bit(l7.ebx, 16);
  f.set(CpuFeature::kAvx512f, avx512f);
  f.set(CpuFeature::kAvx512dq, avx512f && bit(l7.ebx, 17));
  f.set(CpuFeature::kAvx512bw, avx512f && bit(l7.ebx, 30));
  f.set(CpuFeature::kAvx512vl, avx512f && bit(l7.ebx, 31));
  f.set(CpuFeature::kAvx512Vnni, avx512f && bit(l7.ecx, 11));
  f.set(CpuFeature::kAvx512Fp16, avx512f && bit(l7.edx, 23));
  f.set(CpuFeature::kAvx512Bf16, avx512f && bit(l7s1.eax, 5));

  bool amx_tile = os_amx && bit(l7.edx, 24);
  f.set(CpuFeature::kAmxTile, amx_tile);
  f.set(CpuFeature::kAmxBf16, amx_tile && bit(l7.edx, 22));
  f.set(CpuFeature::kAmxInt8, amx_tile && bit(l7.edx, 25));
  return f;
}

Status enable_amx_for_process() {
  if (!detect_cpu_features().has(CpuFeature::kAmxTile))
    return unavailable("AMX: this CPU or operating system has no AMX tile support");
#if defined(__x86_64__)
  constexpr long kArchReqXcompPerm = 0x1023;  // arch/x86/include/uapi/asm/prctl.h
  constexpr long kXfeatureXtileData = 18;
  if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtileData) != 0)
    return errno_error("AMX: arch_prctl(ARCH_REQ_XCOMP_PERM, XTILEDATA)");
  return ok_status();
#else
  return unavailable("AMX: needs a 64-bit process");
#endif
}

namespace hw_detail {

CpuIdentity detect_cpu_identity() {
  CpuIdentity id;
  id.vendor = vendor_string();
  id.model = brand_string();
  Regs l1 = cpuid(1);
  int base_family = static_cast<int>((l1.eax >> 8) & 0xf);
  int base_model = static_cast<int>((l1.eax >> 4) & 0xf);
  id.family =
      base_family == 0xf ? base_family + static_cast<int>((l1.eax >> 20) & 0xff) : base_family;
  id.model_number = (base_family == 0x6 || base_family == 0xf)
                        ? base_model + (static_cast<int>((l1.eax >> 16) & 0xf) << 4)
                        : base_model;
  id.stepping = static_cast<int>(l1.eax & 0xf);
  return id;
}

CacheSizes detect_cache_sizes_from_cpu() {
  CacheSizes sizes;
  std::string vendor = vendor_string();
  bool amd_like = vendor == "AuthenticAMD" || vendor == "HygonGenuine";
  bool amd_topoext = amd_like && bit(cpuid(0x80000001u).ecx, 22);
  std::uint32_t leaf = 0;
  if (!amd_like && __get_cpuid_max(0, nullptr) >= 4) leaf = 4;
  if (amd_topoext) leaf = 0x8000001Du;

  if (leaf != 0) {
    for (std::uint32_t i = 0; i < 16; ++i) {
      CacheLeaf c = decode_cache_leaf(cpuid(leaf, i));
      if (c.type == 0) break;
      if (c.type == 2) continue;  // instruction cache
      if (c.level == 1) sizes.l1d_bytes = c.bytes;
      if (c.level == 2) {
        sizes.l2_bytes = c.bytes;
        sizes.l2_shared_by = c.shared_by;
      }
      if (c.level == 3) {
        sizes.l3_bytes = c.bytes;
        sizes.l3_shared_by = c.shared_by;
      }
      if (c.level == 1) sizes.line_bytes = c.line;
    }
  } else if (amd_like) {
    // Older AMD parts: L1d KiB in 0x80000005 ECX[31:24], L2 KiB in 0x80000006 ECX[31:16],
    // L3 in 512 KiB units in 0x80000006 EDX[31:18].
    Regs l5 = cpuid(0x80000005u);
    Regs l6 = cpuid(0x80000006u);
    sizes.l1d_bytes = static_cast<std::int64_t>(l5.ecx >> 24) * 1024;
    sizes.line_bytes = static_cast<int>(l5.ecx & 0xff);
    sizes.l2_bytes = static_cast<std::int64_t>(l6.ecx >> 16) * 1024;
    sizes.l3_bytes = static_cast<std::int64_t>(l6.edx >> 18) * 512 * 1024;
  }
  if (sizes.l1d_bytes > 0) sizes.source = "cpuid";
  return sizes;
}

}  // namespace hw_detail
}  // namespace tessel

#endif  // x86
