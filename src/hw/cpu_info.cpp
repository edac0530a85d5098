// The architecture-neutral half of CPU detection: topology and caches from sysfs (the kernel's
// own view, which already accounts for offline CPUs and virtual machines), the process's
// affinity mask, and memory from /proc/meminfo.
#include "hw/cpu_info.h"

#include <sched.h>
#include <sys/sysinfo.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "hw/cpu_arch.h"

namespace tessel {
namespace {

const char* const kCpuSysfs = "/sys/devices/system/cpu";

std::optional<std::string> read_first_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  if (!in || !std::getline(in, line)) return std::nullopt;
  return line;
}

// "0-3,8,10-11" -> {0,1,2,3,8,10,11}; the format of /sys cpu lists.
std::vector<int> parse_cpu_list(const std::string& text) {
  std::vector<int> cpus;
  std::stringstream ss(text);
  std::string range;
  while (std::getline(ss, range, ',')) {
    if (range.empty() || range == "\n") continue;
    try {
      std::size_t dash = range.find('-');
      int lo = std::stoi(range.substr(0, dash));
      int hi = dash == std::string::npos ? lo : std::stoi(range.substr(dash + 1));
      for (int c = lo; c <= hi; ++c)
        cpus.push_back(c);
    } catch (...) {
      return {};
    }
  }
  return cpus;
}

// "48K" -> 49152. sysfs writes cache sizes in K; M and G appear on some architectures.
std::int64_t parse_size(const std::string& text) {
  if (text.empty()) return 0;
  std::int64_t value = 0;
  try {
    value = std::stoll(text);
  } catch (...) {
    return 0;
  }
  switch (text.back()) {
    case 'K':
      return value << 10;
    case 'M':
      return value << 20;
    case 'G':
      return value << 30;
    default:
      return value;
  }
}

// The CPUs this process may run on (sched_getaffinity), sized for machines with >1024 CPUs.
std::vector<int> affinity_cpus() {
  for (int ncpus = 1024; ncpus <= (1 << 20); ncpus *= 2) {
    cpu_set_t* set = CPU_ALLOC(ncpus);
    std::size_t bytes = CPU_ALLOC_SIZE(ncpus);
    if (sched_getaffinity(0, bytes, set) == 0) {
      std::vector<int> cpus;
      for (int c = 0; c < ncpus; ++c)
        if (CPU_ISSET_S(c, bytes, set)) cpus.push_back(c);
      CPU_FREE(set);
      return cpus;
    }
    CPU_FREE(set);
    if (errno != EINVAL) break;
  }
  return {};
}

}  // namespace

CpuTopology detect_cpu_topology() {
  CpuTopology t;
  std::vector<int> online;
  if (auto line = read_first_line(std::string(kCpuSysfs) + "/online"))
    online = parse_cpu_list(*line);

  std::vector<int> allowed = affinity_cpus();
  std::set<int> allowed_set(allowed.begin(), allowed.end());
  for (int c : online)
    if (allowed_set.count(c)) t.usable_cpus.push_back(c);
  if (online.empty()) t.usable_cpus = allowed;

  // A physical core is identified by its list of sibling threads, which sysfs writes the same
  // way for every thread of the core. Newer kernels call it core_cpus_list.
  std::map<int, std::vector<int>> core_by_first_cpu;
  std::set<std::string> packages;
  bool have_topology = !online.empty();
  for (int c : online) {
    std::string dir = fmt::format("{}/cpu{}/topology/", kCpuSysfs, c);
    auto siblings = read_first_line(dir + "core_cpus_list");
    if (!siblings) siblings = read_first_line(dir + "thread_siblings_list");
    auto package = read_first_line(dir + "physical_package_id");
    std::vector<int> sibling_cpus = siblings ? parse_cpu_list(*siblings) : std::vector<int>{};
    if (sibling_cpus.empty() || !package) {
      have_topology = false;
      break;
    }
    core_by_first_cpu[sibling_cpus.front()] = sibling_cpus;
    packages.insert(*package);
  }

  if (have_topology) {
    t.source = "sysfs";
    t.threads = static_cast<int>(online.size());
    t.cores = static_cast<int>(core_by_first_cpu.size());
    t.packages = static_cast<int>(packages.size());
    for (const auto& [first, siblings] : core_by_first_cpu) {
      for (int c : siblings) {
        if (allowed_set.count(c)) {
          t.one_cpu_per_usable_core.push_back(c);
          break;
        }
      }
    }
  } else {
    // No topology (some containers hide /sys): count logical CPUs and assume one thread per core.
    t.source = "sysconf";
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    t.threads = t.cores = n > 0 ? static_cast<int>(n) : 1;
    t.packages = 1;
    if (t.usable_cpus.empty())
      for (int c = 0; c < t.threads; ++c)
        t.usable_cpus.push_back(c);
    t.one_cpu_per_usable_core = t.usable_cpus;
  }
  t.usable_threads = static_cast<int>(t.usable_cpus.size());
  t.usable_cores = static_cast<int>(t.one_cpu_per_usable_core.size());
  return t;
}

CacheSizes detect_cache_sizes() {
  CacheSizes sizes;
  for (int index = 0; index < 16; ++index) {
    std::string dir = fmt::format("{}/cpu0/cache/index{}/", kCpuSysfs, index);
    auto level = read_first_line(dir + "level");
    auto type = read_first_line(dir + "type");
    auto size = read_first_line(dir + "size");
    if (!level || !type || !size) break;
    if (*type == "Instruction") continue;
    std::int64_t bytes = parse_size(*size);
    auto shared = read_first_line(dir + "shared_cpu_list");
    int shared_by = shared ? static_cast<int>(parse_cpu_list(*shared).size()) : 0;
    if (*level == "1") {
      sizes.l1d_bytes = bytes;
      if (auto line = read_first_line(dir + "coherency_line_size"))
        sizes.line_bytes = std::atoi(line->c_str());
    } else if (*level == "2") {
      sizes.l2_bytes = bytes;
      sizes.l2_shared_by = shared_by;
    } else if (*level == "3") {
      sizes.l3_bytes = bytes;
      sizes.l3_shared_by = shared_by;
    }
  }
  if (sizes.l1d_bytes > 0) {
    sizes.source = "sysfs";
    return sizes;
  }
  return hw_detail::detect_cache_sizes_from_cpu();
}

std::int64_t detect_memory_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("MemTotal:", 0) != 0) continue;
    std::int64_t kib = std::atoll(line.c_str() + 9);  // "MemTotal:   24683652 kB"
    if (kib > 0) return kib * 1024;
  }
  struct sysinfo si {};
  if (sysinfo(&si) == 0) return static_cast<std::int64_t>(si.totalram) * si.mem_unit;
  return 0;
}

CpuInfo detect_cpu_info() {
  CpuInfo info;
#if defined(__x86_64__)
  info.architecture = "x86_64";
#elif defined(__aarch64__)
  info.architecture = "aarch64";
#elif defined(__i386__)
  info.architecture = "i386";
#else
  info.architecture = "unknown";
#endif
  hw_detail::CpuIdentity id = hw_detail::detect_cpu_identity();
  info.vendor = id.vendor;
  info.model = id.model;
  info.family = id.family;
  info.model_number = id.model_number;
  info.stepping = id.stepping;
  info.topology = detect_cpu_topology();
  info.caches = detect_cache_sizes();
  info.memory_bytes = detect_memory_bytes();
  info.features = detect_cpu_features();
  return info;
}

const CpuInfo& host_cpu_info() {
  static const CpuInfo info = detect_cpu_info();
  return info;
}

}  // namespace tessel
