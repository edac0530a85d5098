// The JSON and text forms of the hardware report: every field the project promises is there with
// the right type, and the values are this machine's (checked against /proc and sysfs here, not
// against the detection code). The measured figures are given, not measured: speed is not tested.
#include "hw/hardware_report.h"

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <set>
#include <sstream>

namespace tessel {
namespace {

HardwareReport report_with_given_figures() {
  HardwareReport r;
  r.cpu = detect_cpu_info();
  r.measured.figures.bandwidth_gbs = 40.5;
  r.measured.figures.peak_f32_gflops = 500.25;
  r.measured.figures.threads = 2;
  r.opencl = list_opencl_devices();
  r.cuda = list_cuda_devices();
  r.nvrtc = nvrtc_info();
  return r;
}

std::string meminfo_total_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key, kib;
  in >> key >> kib;  // "MemTotal:  24683652 kB" is the first line
  return std::to_string(std::stoll(kib) * 1024);
}

TEST(HardwareReport, JsonHasTheDocumentedFields) {
  HardwareReport r = report_with_given_figures();
  // Through text, as a script would read it.
  nlohmann::json j = nlohmann::json::parse(hardware_report_json(r).dump());

  ASSERT_TRUE(j["cpu"].is_object());
  EXPECT_TRUE(j["cpu"]["model"].is_string());
  EXPECT_TRUE(j["cpu"]["vendor"].is_string());
  EXPECT_EQ(j["cpu"]["threads"].get<long>(), sysconf(_SC_NPROCESSORS_ONLN));
  EXPECT_GE(j["cpu"]["cores"].get<int>(), 1);
  EXPECT_LE(j["cpu"]["cores"].get<int>(), j["cpu"]["threads"].get<int>());

  ASSERT_TRUE(j["isa"].is_array());
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::stringstream text;
  text << cpuinfo.rdbuf();
  for (const auto& name : j["isa"]) {
    ASSERT_TRUE(name.is_string());
    std::string n = name.get<std::string>();
    EXPECT_TRUE(std::none_of(n.begin(), n.end(), ::isupper)) << n << " is not lower-case";
    EXPECT_NE(text.str().find(" " + n), std::string::npos) << n << " not in /proc/cpuinfo";
  }

  for (const char* level : {"l1d", "l2", "l3"})
    EXPECT_TRUE(j["caches"][level].is_number_integer());
  EXPECT_GT(j["caches"]["l1d"].get<long>(), 0);
  EXPECT_EQ(std::to_string(j["memory_bytes"].get<long long>()), meminfo_total_bytes());

  EXPECT_EQ(j["measured"]["bandwidth_gbs"].get<double>(), 40.5);
  EXPECT_EQ(j["measured"]["peak_f32_gflops"].get<double>(), 500.25);
  EXPECT_TRUE(j["measured"]["peak_bf16_gflops"].is_null());  // none given

  ASSERT_TRUE(j["opencl"].is_array());
  for (const auto& d : j["opencl"]) {
    for (const char* key : {"name", "type", "platform"})
      EXPECT_TRUE(d[key].is_string()) << key;
    for (const char* key :
         {"compute_units", "global_mem_bytes", "local_mem_bytes", "max_work_group_size"})
      EXPECT_TRUE(d[key].is_number_unsigned()) << key;
  }
  ASSERT_TRUE(j["cuda"].is_array());
  EXPECT_TRUE(j["cuda_status"].is_string());
  EXPECT_TRUE(j["nvrtc"]["available"].is_boolean());
}

TEST(HardwareReport, TextNamesTheCpuAndExplainsAbsentDevices) {
  HardwareReport r = report_with_given_figures();
  std::string text = hardware_report_text(r);
  EXPECT_NE(text.find(r.cpu.model), std::string::npos) << text;
  EXPECT_NE(text.find("triad 40.5 GB/s"), std::string::npos) << text;
  EXPECT_NE(text.find("f32 fma 500 GFLOP/s"), std::string::npos) << text;
  void* cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!cuda) {
    EXPECT_NE(text.find("CUDA     no CUDA device"), std::string::npos) << text;
  } else {
    dlclose(cuda);
  }
}

}  // namespace
}  // namespace tessel
