// Enumerating OpenCL platforms and devices through the loaded API table.
#include "hw/opencl_devices.h"

namespace tessel {
namespace {

// The ICD loader's answer when no driver is installed (cl_khr_icd).
constexpr cl_int kPlatformNotFoundKhr = -1001;

Expected<std::string> platform_string(const OpenClApi& cl, cl_platform_id p,
                                      cl_platform_info what) {
  std::size_t size = 0;
  TESSEL_TRY(opencl_check(cl.clGetPlatformInfo(p, what, 0, nullptr, &size), "clGetPlatformInfo"));
  std::string s(size, '\0');
  TESSEL_TRY(
      opencl_check(cl.clGetPlatformInfo(p, what, size, s.data(), nullptr), "clGetPlatformInfo"));
  while (!s.empty() && s.back() == '\0')
    s.pop_back();
  return s;
}

Expected<std::string> device_string(const OpenClApi& cl, cl_device_id d, cl_device_info what) {
  std::size_t size = 0;
  TESSEL_TRY(opencl_check(cl.clGetDeviceInfo(d, what, 0, nullptr, &size), "clGetDeviceInfo"));
  std::string s(size, '\0');
  TESSEL_TRY(opencl_check(cl.clGetDeviceInfo(d, what, size, s.data(), nullptr), "clGetDeviceInfo"));
  while (!s.empty() && s.back() == '\0')
    s.pop_back();
  return s;
}

template <typename T>
Expected<T> device_value(const OpenClApi& cl, cl_device_id d, cl_device_info what) {
  T value{};
  TESSEL_TRY(
      opencl_check(cl.clGetDeviceInfo(d, what, sizeof value, &value, nullptr), "clGetDeviceInfo"));
  return value;
}

std::string device_type_name(cl_device_type type) {
  if (type & CL_DEVICE_TYPE_GPU) return "gpu";
  if (type & CL_DEVICE_TYPE_CPU) return "cpu";
  if (type & CL_DEVICE_TYPE_ACCELERATOR) return "accelerator";
  if (type & CL_DEVICE_TYPE_CUSTOM) return "custom";
  return "other";
}

bool has_extension(const std::string& extensions, const std::string& name) {
  std::size_t pos = 0;
  while ((pos = extensions.find(name, pos)) != std::string::npos) {
    std::size_t end = pos + name.size();
    bool starts = pos == 0 || extensions[pos - 1] == ' ';
    bool ends = end == extensions.size() || extensions[end] == ' ';
    if (starts && ends) return true;
    pos = end;
  }
  return false;
}

Expected<OpenClDeviceInfo> describe_device(const OpenClApi& cl, cl_device_id d) {
  OpenClDeviceInfo info;
  info.device = d;
  TESSEL_ASSIGN_OR_RETURN(info.name, device_string(cl, d, CL_DEVICE_NAME));
  TESSEL_ASSIGN_OR_RETURN(info.vendor, device_string(cl, d, CL_DEVICE_VENDOR));
  TESSEL_ASSIGN_OR_RETURN(info.version, device_string(cl, d, CL_DEVICE_VERSION));
  TESSEL_ASSIGN_OR_RETURN(info.driver_version, device_string(cl, d, CL_DRIVER_VERSION));
  TESSEL_ASSIGN_OR_RETURN(info.opencl_c_version, device_string(cl, d, CL_DEVICE_OPENCL_C_VERSION));
  TESSEL_ASSIGN_OR_RETURN(cl_device_type type, device_value<cl_device_type>(cl, d, CL_DEVICE_TYPE));
  info.type = device_type_name(type);
  TESSEL_ASSIGN_OR_RETURN(info.compute_units,
                          device_value<cl_uint>(cl, d, CL_DEVICE_MAX_COMPUTE_UNITS));
  TESSEL_ASSIGN_OR_RETURN(info.max_clock_mhz,
                          device_value<cl_uint>(cl, d, CL_DEVICE_MAX_CLOCK_FREQUENCY));
  TESSEL_ASSIGN_OR_RETURN(info.global_mem_bytes,
                          device_value<cl_ulong>(cl, d, CL_DEVICE_GLOBAL_MEM_SIZE));
  TESSEL_ASSIGN_OR_RETURN(info.max_alloc_bytes,
                          device_value<cl_ulong>(cl, d, CL_DEVICE_MAX_MEM_ALLOC_SIZE));
  TESSEL_ASSIGN_OR_RETURN(info.local_mem_bytes,
                          device_value<cl_ulong>(cl, d, CL_DEVICE_LOCAL_MEM_SIZE));
  TESSEL_ASSIGN_OR_RETURN(cl_device_local_mem_type local_type,
                          device_value<cl_device_local_mem_type>(cl, d, CL_DEVICE_LOCAL_MEM_TYPE));
  info.local_mem_dedicated = local_type == CL_LOCAL;
  TESSEL_ASSIGN_OR_RETURN(info.max_work_group_size,
                          device_value<std::size_t>(cl, d, CL_DEVICE_MAX_WORK_GROUP_SIZE));
  TESSEL_ASSIGN_OR_RETURN(cl_uint dims,
                          device_value<cl_uint>(cl, d, CL_DEVICE_MAX_WORK_ITEM_DIMENSIONS));
  info.max_work_item_sizes.resize(dims);
  TESSEL_TRY(
      opencl_check(cl.clGetDeviceInfo(d, CL_DEVICE_MAX_WORK_ITEM_SIZES, dims * sizeof(std::size_t),
                                      info.max_work_item_sizes.data(), nullptr),
                   "clGetDeviceInfo"));
  TESSEL_ASSIGN_OR_RETURN(info.preferred_vector_width_float,
                          device_value<cl_uint>(cl, d, CL_DEVICE_PREFERRED_VECTOR_WIDTH_FLOAT));
  TESSEL_ASSIGN_OR_RETURN(std::string extensions, device_string(cl, d, CL_DEVICE_EXTENSIONS));
  info.fp16 = has_extension(extensions, "cl_khr_fp16");
  info.fp64 = has_extension(extensions, "cl_khr_fp64");
  return info;
}

}  // namespace

Expected<std::vector<OpenClDeviceInfo>> list_opencl_devices(const OpenClApi& cl) {
  std::vector<OpenClDeviceInfo> out;
  cl_uint platform_count = 0;
  cl_int err = cl.clGetPlatformIDs(0, nullptr, &platform_count);
  if (err == kPlatformNotFoundKhr || (err == CL_SUCCESS && platform_count == 0)) return out;
  TESSEL_TRY(opencl_check(err, "clGetPlatformIDs"));
  std::vector<cl_platform_id> platforms(platform_count);
  TESSEL_TRY(opencl_check(cl.clGetPlatformIDs(platform_count, platforms.data(), nullptr),
                          "clGetPlatformIDs"));
  for (cl_uint p = 0; p < platform_count; ++p) {
    cl_uint device_count = 0;
    err = cl.clGetDeviceIDs(platforms[p], CL_DEVICE_TYPE_ALL, 0, nullptr, &device_count);
    if (err == CL_DEVICE_NOT_FOUND) continue;  // a platform with no device right now
    TESSEL_TRY(opencl_check(err, "clGetDeviceIDs"));
    std::vector<cl_device_id> devices(device_count);
    TESSEL_TRY(opencl_check(
        cl.clGetDeviceIDs(platforms[p], CL_DEVICE_TYPE_ALL, device_count, devices.data(), nullptr),
        "clGetDeviceIDs"));
    TESSEL_ASSIGN_OR_RETURN(std::string platform_name,
                            platform_string(cl, platforms[p], CL_PLATFORM_NAME));
    TESSEL_ASSIGN_OR_RETURN(std::string platform_vendor,
                            platform_string(cl, platforms[p], CL_PLATFORM_VENDOR));
    TESSEL_ASSIGN_OR_RETURN(std::string platform_version,
                            platform_string(cl, platforms[p], CL_PLATFORM_VERSION));
    for (cl_uint d = 0; d < device_count; ++d) {
      Expected<OpenClDeviceInfo> info = describe_device(cl, devices[d]);
      if (!info) return info.status().with_context("OpenCL platform {} device {}", p, d);
      info->platform_index = static_cast<int>(p);
      info->device_index = static_cast<int>(d);
      info->platform = platforms[p];
      info->platform_name = platform_name;
      info->platform_vendor = platform_vendor;
      info->platform_version = platform_version;
      out.push_back(std::move(*info));
    }
  }
  return out;
}

Expected<std::vector<OpenClDeviceInfo>> list_opencl_devices() {
  TESSEL_ASSIGN_OR_RETURN(const OpenClApi* cl, opencl_api());
  return list_opencl_devices(*cl);
}

}  // namespace tessel
