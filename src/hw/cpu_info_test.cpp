// CPU detection checked against the kernel's view of this machine, read here independently:
// /proc/cpuinfo for features, model and vendor; sysfs core_id/physical_package_id for the
// topology (the code under test uses the sibling lists instead); sysfs cache entries; meminfo.
#include "hw/cpu_info.h"

#include <gtest/gtest.h>
#include <sched.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <utility>

#include "hw/cpu_arch.h"

namespace tessel {
namespace {

// The value of the first "key : value" line in /proc/cpuinfo.
std::string proc_cpuinfo_value(const std::string& key) {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string k = line.substr(0, colon);
    k.erase(k.find_last_not_of(" \t") + 1);
    if (k != key) continue;
    std::string v = line.substr(colon + 1);
    v.erase(0, v.find_first_not_of(" \t"));
    return v;
  }
  return {};
}

std::set<std::string> proc_cpuinfo_flags() {
  std::string flags = proc_cpuinfo_value("flags");            // x86
  if (flags.empty()) flags = proc_cpuinfo_value("Features");  // arm64
  std::set<std::string> out;
  std::istringstream ss(flags);
  for (std::string f; ss >> f;)
    out.insert(f);
  return out;
}

std::string read_line(const std::string& path) {
  std::ifstream in(path);
  std::string s;
  std::getline(in, s);
  return s;
}

// Expands "0-2,5" the simple way: every comma part is "a" or "a-b".
std::vector<int> expand(const std::string& list) {
  std::vector<int> out;
  std::istringstream ss(list);
  for (std::string part; std::getline(ss, part, ',');) {
    int a = 0, b = 0;
    if (std::sscanf(part.c_str(), "%d-%d", &a, &b) == 2) {
      for (int i = a; i <= b; ++i)
        out.push_back(i);
    } else if (std::sscanf(part.c_str(), "%d", &a) == 1) {
      out.push_back(a);
    }
  }
  return out;
}

TEST(CpuInfo, FeaturesMatchProcCpuinfoFlagsBothWays) {
  std::set<std::string> flags = proc_cpuinfo_flags();
  ASSERT_FALSE(flags.empty()) << "/proc/cpuinfo has no flags/Features line";
  CpuFeatureSet detected = detect_cpu_features();
  for (CpuFeature f : all_cpu_features()) {
    std::string name = cpu_feature_name(f);
    EXPECT_EQ(detected.has(f), flags.count(name) == 1)
        << name
        << (detected.has(f) ? " detected but not in /proc/cpuinfo"
                            : " in /proc/cpuinfo but not detected");
  }
}

TEST(CpuInfo, FeatureNamesRoundTrip) {
  for (CpuFeature f : all_cpu_features())
    EXPECT_EQ(cpu_feature_from_name(cpu_feature_name(f)), f) << cpu_feature_name(f);
  EXPECT_FALSE(cpu_feature_from_name("no_such_feature").has_value());
}

TEST(CpuInfo, VendorAndModelMatchProcCpuinfo) {
  CpuInfo info = detect_cpu_info();
  EXPECT_FALSE(info.vendor.empty());
  EXPECT_FALSE(info.model.empty());
#if defined(__x86_64__)
  EXPECT_EQ(info.architecture, "x86_64");
  EXPECT_EQ(info.vendor, proc_cpuinfo_value("vendor_id"));
  EXPECT_EQ(info.model, proc_cpuinfo_value("model name"));
  EXPECT_EQ(info.family, std::stoi(proc_cpuinfo_value("cpu family")));
  EXPECT_EQ(info.model_number, std::stoi(proc_cpuinfo_value("model")));
  EXPECT_EQ(info.stepping, std::stoi(proc_cpuinfo_value("stepping")));
#elif defined(__aarch64__)
  EXPECT_EQ(info.model_number, std::stoi(proc_cpuinfo_value("CPU part"), nullptr, 0));
#endif
}

TEST(CpuInfo, TopologyMatchesSysfsCoreIds) {
  // Cores counted as distinct (package, core_id) pairs over the online CPUs.
  std::vector<int> online = expand(read_line("/sys/devices/system/cpu/online"));
  if (online.empty()) GTEST_SKIP() << "no /sys/devices/system/cpu/online here";
  std::set<std::pair<std::string, std::string>> cores;
  std::set<std::string> packages;
  for (int c : online) {
    std::string dir = "/sys/devices/system/cpu/cpu" + std::to_string(c) + "/topology/";
    std::string package = read_line(dir + "physical_package_id");
    std::string die = read_line(dir + "die_id");  // core_id is unique per die on multi-die parts
    cores.insert({package + "/" + die, read_line(dir + "core_id")});
    packages.insert(package);
  }
  CpuTopology t = detect_cpu_topology();
  EXPECT_EQ(t.source, "sysfs");
  EXPECT_EQ(t.threads, static_cast<int>(online.size()));
  EXPECT_EQ(t.threads, sysconf(_SC_NPROCESSORS_ONLN));
  EXPECT_EQ(t.cores, static_cast<int>(cores.size()));
  EXPECT_EQ(t.packages, static_cast<int>(packages.size()));

  cpu_set_t mask;
  CPU_ZERO(&mask);
  ASSERT_EQ(sched_getaffinity(0, sizeof mask, &mask), 0);
  EXPECT_EQ(t.usable_threads, CPU_COUNT(&mask));
  EXPECT_LE(t.usable_cores, t.cores);
  EXPECT_EQ(t.usable_cores, static_cast<int>(t.one_cpu_per_usable_core.size()));
  for (int c : t.one_cpu_per_usable_core)
    EXPECT_TRUE(CPU_ISSET(c, &mask)) << "cpu " << c;
}

TEST(CpuInfo, UsableCountsFollowTheAffinityMask) {
  CpuTopology full = detect_cpu_topology();
  ASSERT_FALSE(full.usable_cpus.empty());
  int only = full.usable_cpus.back();
  CpuTopology pinned;
  // Affinity is per thread on Linux: pin a fresh thread to one CPU and detect from there.
  std::thread worker([&] {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(only, &one);
    if (sched_setaffinity(0, sizeof one, &one) == 0) pinned = detect_cpu_topology();
  });
  worker.join();
  EXPECT_EQ(pinned.usable_threads, 1);
  EXPECT_EQ(pinned.usable_cores, 1);
  EXPECT_EQ(pinned.one_cpu_per_usable_core, std::vector<int>{only});
  EXPECT_EQ(pinned.threads, full.threads);  // the machine did not shrink
  EXPECT_EQ(pinned.cores, full.cores);
}

// Size in bytes of the first data/unified cache of `level` listed under cpu0 in sysfs.
long long sysfs_cache_bytes(int level) {
  for (int i = 0; i < 16; ++i) {
    std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i) + "/";
    std::string lvl = read_line(dir + "level");
    if (lvl.empty()) break;
    if (std::stoi(lvl) != level || read_line(dir + "type") == "Instruction") continue;
    std::string size = read_line(dir + "size");
    long long n = std::stoll(size);
    if (size.back() == 'K') n *= 1024;
    if (size.back() == 'M') n *= 1024 * 1024;
    return n;
  }
  return 0;
}

TEST(CpuInfo, CacheSizesMatchSysfs) {
  if (read_line("/sys/devices/system/cpu/cpu0/cache/index0/size").empty())
    GTEST_SKIP() << "no cache information in sysfs here";
  CacheSizes c = detect_cache_sizes();
  EXPECT_EQ(c.source, "sysfs");
  EXPECT_EQ(c.l1d_bytes, sysfs_cache_bytes(1));
  EXPECT_EQ(c.l2_bytes, sysfs_cache_bytes(2));
  EXPECT_EQ(c.l3_bytes, sysfs_cache_bytes(3));
  EXPECT_GT(c.l1d_bytes, 0);
  EXPECT_GT(c.line_bytes, 0);
}

#if defined(__x86_64__)
TEST(CpuInfo, CpuidCacheFallbackAgreesWithSysfs) {
  // Linux fills sysfs from the same cpuid leaves, so the fallback must give the same sizes.
  if (read_line("/sys/devices/system/cpu/cpu0/cache/index0/size").empty())
    GTEST_SKIP() << "no cache information in sysfs here";
  CacheSizes c = hw_detail::detect_cache_sizes_from_cpu();
  EXPECT_EQ(c.source, "cpuid");
  EXPECT_EQ(c.l1d_bytes, sysfs_cache_bytes(1));
  EXPECT_EQ(c.l2_bytes, sysfs_cache_bytes(2));
  EXPECT_EQ(c.l3_bytes, sysfs_cache_bytes(3));
}
#endif

TEST(CpuInfo, MemoryMatchesMeminfo) {
  std::ifstream in("/proc/meminfo");
  std::string line;
  long long kib = 0;
  while (std::getline(in, line))
    if (std::sscanf(line.c_str(), "MemTotal: %lld kB", &kib) == 1) break;
  ASSERT_GT(kib, 0);
  EXPECT_EQ(detect_memory_bytes(), kib * 1024);
}

}  // namespace
}  // namespace tessel
