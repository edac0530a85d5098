// The OpenCL loader and device list. The loader's failure paths are checked with libraries that
// cannot work; the device list is checked against the ICD files in /etc/OpenCL/vendors and, where
// the clinfo tool is installed, against its independent report of every device.
#include "hw/opencl_api.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>

#include "hw/opencl_devices.h"

namespace tessel {
namespace {

TEST(OpenClApi, MissingLoaderIsAClearStatus) {
  Expected<OpenClApi> api =
      load_opencl_api({"libtessel-no-such-opencl.so.1", "/nowhere/libOpenCL.so"});
  ASSERT_FALSE(api.ok());
  EXPECT_EQ(api.status().code(), Code::kUnavailable);
  const std::string& m = api.status().message();
  EXPECT_NE(m.find("OpenCL"), std::string::npos) << m;
  EXPECT_NE(m.find("libtessel-no-such-opencl.so.1"), std::string::npos) << m;
  EXPECT_NE(m.find("/nowhere/libOpenCL.so"), std::string::npos) << m;
  EXPECT_NE(m.find("LD_LIBRARY_PATH"), std::string::npos) << m;
}

TEST(OpenClApi, LibraryWithoutTheEntryPointsIsAClearStatus) {
  // zlib is always there (tessel links it) and has no OpenCL symbols.
  Expected<OpenClApi> api = load_opencl_api({"libz.so.1"});
  ASSERT_FALSE(api.ok());
  EXPECT_EQ(api.status().code(), Code::kNotFound);
  EXPECT_NE(api.status().message().find("libz.so.1 has no symbol clGetPlatformIDs"),
            std::string::npos)
      << api.status().message();
}

TEST(OpenClApi, ErrorCodesAreNamed) {
  EXPECT_STREQ(opencl_error_name(CL_BUILD_PROGRAM_FAILURE), "CL_BUILD_PROGRAM_FAILURE");
  EXPECT_STREQ(opencl_error_name(-61), "CL_INVALID_BUFFER_SIZE");
  EXPECT_TRUE(opencl_check(CL_SUCCESS, "clFinish").ok());
  Status s = opencl_check(CL_OUT_OF_HOST_MEMORY, "clCreateBuffer");
  EXPECT_EQ(s.code(), Code::kResourceExhausted);
  EXPECT_EQ(s.message(), "clCreateBuffer: CL_OUT_OF_HOST_MEMORY (-6)");
  EXPECT_EQ(opencl_check(CL_INVALID_KERNEL_NAME, "clCreateKernel").code(), Code::kInvalidArgument);
}

int icd_files() {
  int n = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/etc/OpenCL/vendors", ec))
    if (e.path().extension() == ".icd") ++n;
  return n;
}

// clinfo --raw prints "[PLAT/IDX]  CL_DEVICE_NAME  value" lines; returns key -> value for device
// `index` of the platform listed first.
std::map<std::string, std::string> clinfo_device(int index) {
  std::map<std::string, std::string> out;
  std::unique_ptr<FILE, int (*)(FILE*)> p(popen("clinfo --raw 2>/dev/null", "r"), pclose);
  if (!p) return out;
  char line[4096];
  std::string prefix;
  while (std::fgets(line, sizeof line, p.get())) {
    std::string s(line);
    if (s.size() < 3 || s[0] != '[') continue;
    std::size_t close = s.find(']');
    std::string tag = s.substr(1, close - 1);  // "POCL/0"
    std::size_t slash = tag.find('/');
    if (slash == std::string::npos || tag.substr(slash + 1) != std::to_string(index)) continue;
    if (prefix.empty()) prefix = tag.substr(0, slash);
    if (tag.substr(0, slash) != prefix) continue;
    std::size_t key_begin = s.find_first_not_of(' ', close + 1);
    std::size_t key_end = s.find(' ', key_begin);
    std::size_t value_begin = s.find_first_not_of(' ', key_end);
    std::string value = value_begin == std::string::npos ? "" : s.substr(value_begin);
    while (!value.empty() && (value.back() == '\n' || value.back() == ' '))
      value.pop_back();
    out.emplace(s.substr(key_begin, key_end - key_begin), value);
  }
  return out;
}

TEST(OpenClDevices, ListsTheInstalledDriversDevices) {
  if (icd_files() == 0) GTEST_SKIP() << "no OpenCL driver in /etc/OpenCL/vendors";
  Expected<std::vector<OpenClDeviceInfo>> devices = list_opencl_devices();
  ASSERT_TRUE(devices.ok()) << devices.status().to_string();
  ASSERT_FALSE(devices->empty()) << "an ICD file is installed but no device is listed";
  for (const OpenClDeviceInfo& d : *devices) {
    SCOPED_TRACE(d.name);
    EXPECT_FALSE(d.name.empty());
    EXPECT_FALSE(d.platform_name.empty());
    EXPECT_NE(d.version.find("OpenCL"), std::string::npos);
    EXPECT_GE(d.compute_units, 1u);
    EXPECT_GT(d.global_mem_bytes, 0u);
    EXPECT_GT(d.local_mem_bytes, 0u);
    EXPECT_LE(d.max_alloc_bytes, d.global_mem_bytes);
    EXPECT_GE(d.max_work_group_size, 1u);
    ASSERT_FALSE(d.max_work_item_sizes.empty());
    EXPECT_LE(d.max_work_item_sizes[0], d.max_work_group_size * 64);
    if (d.type == "cpu") {
      EXPECT_LE(d.compute_units, static_cast<unsigned>(sysconf(_SC_NPROCESSORS_ONLN)));
    }
  }
}

TEST(OpenClDevices, AgreeWithClinfo) {
  if (icd_files() == 0) GTEST_SKIP() << "no OpenCL driver in /etc/OpenCL/vendors";
  std::map<std::string, std::string> ref = clinfo_device(0);
  if (ref.empty()) GTEST_SKIP() << "clinfo is not installed";
  Expected<std::vector<OpenClDeviceInfo>> devices = list_opencl_devices();
  ASSERT_TRUE(devices.ok() && !devices->empty());
  const OpenClDeviceInfo& d = devices->front();
  EXPECT_EQ(d.name, ref["CL_DEVICE_NAME"]);
  EXPECT_EQ(std::to_string(d.compute_units), ref["CL_DEVICE_MAX_COMPUTE_UNITS"]);
  EXPECT_EQ(std::to_string(d.global_mem_bytes), ref["CL_DEVICE_GLOBAL_MEM_SIZE"]);
  EXPECT_EQ(std::to_string(d.local_mem_bytes), ref["CL_DEVICE_LOCAL_MEM_SIZE"]);
  EXPECT_EQ(std::to_string(d.max_alloc_bytes), ref["CL_DEVICE_MAX_MEM_ALLOC_SIZE"]);
  EXPECT_EQ(std::to_string(d.max_work_group_size), ref["CL_DEVICE_MAX_WORK_GROUP_SIZE"]);
  std::map<std::string, std::string> clinfo_type = {{"cpu", "CL_DEVICE_TYPE_CPU"},
                                                    {"gpu", "CL_DEVICE_TYPE_GPU"},
                                                    {"accelerator", "CL_DEVICE_TYPE_ACCELERATOR"}};
  EXPECT_EQ(clinfo_type[d.type], ref["CL_DEVICE_TYPE"]);
}

}  // namespace
}  // namespace tessel
