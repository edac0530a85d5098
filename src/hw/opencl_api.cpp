// Loading the OpenCL ICD loader and naming OpenCL error codes.
#include "hw/opencl_api.h"

#include "hw/dynamic_library.h"

namespace tessel {
namespace {

// Returned by the ICD loader when no driver is installed (cl_khr_icd).
constexpr cl_int kPlatformNotFoundKhr = -1001;

}  // namespace

const std::vector<std::string>& opencl_library_candidates() {
  // libOpenCL.so.1 is the ICD loader's soname on every Linux distribution; the unversioned name
  // exists only with development packages, but some vendor installs provide nothing else.
  static const std::vector<std::string> names = {"libOpenCL.so.1", "libOpenCL.so"};
  return names;
}

Expected<OpenClApi> load_opencl_api(const std::vector<std::string>& candidates) {
  Expected<DynamicLibrary> lib = DynamicLibrary::open_first(
      candidates,
      "OpenCL: the ICD loader (Debian: ocl-icd-libopencl1, plus a driver such as "
      "pocl-opencl-icd)");
  if (!lib) return lib.status();
  OpenClApi api;
  api.library = lib->name();
#define TESSEL_OPENCL_BIND(name) TESSEL_TRY(lib->bind(api.name, #name));
  TESSEL_OPENCL_FUNCTIONS(TESSEL_OPENCL_BIND)
#undef TESSEL_OPENCL_BIND
  return api;
}

Expected<const OpenClApi*> opencl_api() {
  static const Expected<OpenClApi> api = load_opencl_api(opencl_library_candidates());
  if (!api) return api.status();
  return &*api;
}

const char* opencl_error_name(cl_int code) {
  switch (code) {
#define TESSEL_CL_CODE(name) \
  case name:                 \
    return #name;
    TESSEL_CL_CODE(CL_SUCCESS)
    TESSEL_CL_CODE(CL_DEVICE_NOT_FOUND)
    TESSEL_CL_CODE(CL_DEVICE_NOT_AVAILABLE)
    TESSEL_CL_CODE(CL_COMPILER_NOT_AVAILABLE)
    TESSEL_CL_CODE(CL_MEM_OBJECT_ALLOCATION_FAILURE)
    TESSEL_CL_CODE(CL_OUT_OF_RESOURCES)
    TESSEL_CL_CODE(CL_OUT_OF_HOST_MEMORY)
    TESSEL_CL_CODE(CL_PROFILING_INFO_NOT_AVAILABLE)
    TESSEL_CL_CODE(CL_MEM_COPY_OVERLAP)
    TESSEL_CL_CODE(CL_IMAGE_FORMAT_MISMATCH)
    TESSEL_CL_CODE(CL_IMAGE_FORMAT_NOT_SUPPORTED)
    TESSEL_CL_CODE(CL_BUILD_PROGRAM_FAILURE)
    TESSEL_CL_CODE(CL_MAP_FAILURE)
    TESSEL_CL_CODE(CL_MISALIGNED_SUB_BUFFER_OFFSET)
    TESSEL_CL_CODE(CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST)
    TESSEL_CL_CODE(CL_COMPILE_PROGRAM_FAILURE)
    TESSEL_CL_CODE(CL_LINKER_NOT_AVAILABLE)
    TESSEL_CL_CODE(CL_LINK_PROGRAM_FAILURE)
    TESSEL_CL_CODE(CL_DEVICE_PARTITION_FAILED)
    TESSEL_CL_CODE(CL_KERNEL_ARG_INFO_NOT_AVAILABLE)
    TESSEL_CL_CODE(CL_INVALID_VALUE)
    TESSEL_CL_CODE(CL_INVALID_DEVICE_TYPE)
    TESSEL_CL_CODE(CL_INVALID_PLATFORM)
    TESSEL_CL_CODE(CL_INVALID_DEVICE)
    TESSEL_CL_CODE(CL_INVALID_CONTEXT)
    TESSEL_CL_CODE(CL_INVALID_QUEUE_PROPERTIES)
    TESSEL_CL_CODE(CL_INVALID_COMMAND_QUEUE)
    TESSEL_CL_CODE(CL_INVALID_HOST_PTR)
    TESSEL_CL_CODE(CL_INVALID_MEM_OBJECT)
    TESSEL_CL_CODE(CL_INVALID_IMAGE_FORMAT_DESCRIPTOR)
    TESSEL_CL_CODE(CL_INVALID_IMAGE_SIZE)
    TESSEL_CL_CODE(CL_INVALID_SAMPLER)
    TESSEL_CL_CODE(CL_INVALID_BINARY)
    TESSEL_CL_CODE(CL_INVALID_BUILD_OPTIONS)
    TESSEL_CL_CODE(CL_INVALID_PROGRAM)
    TESSEL_CL_CODE(CL_INVALID_PROGRAM_EXECUTABLE)
    TESSEL_CL_CODE(CL_INVALID_KERNEL_NAME)
    TESSEL_CL_CODE(CL_INVALID_KERNEL_DEFINITION)
    TESSEL_CL_CODE(CL_INVALID_KERNEL)
    TESSEL_CL_CODE(CL_INVALID_ARG_INDEX)
    TESSEL_CL_CODE(CL_INVALID_ARG_VALUE)
    TESSEL_CL_CODE(CL_INVALID_ARG_SIZE)
    TESSEL_CL_CODE(CL_INVALID_KERNEL_ARGS)
    TESSEL_CL_CODE(CL_INVALID_WORK_DIMENSION)
    TESSEL_CL_CODE(CL_INVALID_WORK_GROUP_SIZE)
    TESSEL_CL_CODE(CL_INVALID_WORK_ITEM_SIZE)
    TESSEL_CL_CODE(CL_INVALID_GLOBAL_OFFSET)
    TESSEL_CL_CODE(CL_INVALID_EVENT_WAIT_LIST)
    TESSEL_CL_CODE(CL_INVALID_EVENT)
    TESSEL_CL_CODE(CL_INVALID_OPERATION)
    TESSEL_CL_CODE(CL_INVALID_GL_OBJECT)
    TESSEL_CL_CODE(CL_INVALID_BUFFER_SIZE)
    TESSEL_CL_CODE(CL_INVALID_MIP_LEVEL)
    TESSEL_CL_CODE(CL_INVALID_GLOBAL_WORK_SIZE)
    TESSEL_CL_CODE(CL_INVALID_PROPERTY)
    TESSEL_CL_CODE(CL_INVALID_IMAGE_DESCRIPTOR)
    TESSEL_CL_CODE(CL_INVALID_COMPILER_OPTIONS)
    TESSEL_CL_CODE(CL_INVALID_LINKER_OPTIONS)
    TESSEL_CL_CODE(CL_INVALID_DEVICE_PARTITION_COUNT)
#undef TESSEL_CL_CODE
    case kPlatformNotFoundKhr:
      return "CL_PLATFORM_NOT_FOUND_KHR";
    default:
      return "unknown OpenCL error";
  }
}

Status opencl_check(cl_int code, std::string_view call) {
  if (code == CL_SUCCESS) return ok_status();
  Code kind = Code::kInternal;
  switch (code) {
    case CL_MEM_OBJECT_ALLOCATION_FAILURE:
    case CL_OUT_OF_RESOURCES:
    case CL_OUT_OF_HOST_MEMORY:
      kind = Code::kResourceExhausted;
      break;
    case CL_DEVICE_NOT_FOUND:
      kind = Code::kNotFound;
      break;
    case CL_DEVICE_NOT_AVAILABLE:
    case CL_COMPILER_NOT_AVAILABLE:
    case CL_LINKER_NOT_AVAILABLE:
    case kPlatformNotFoundKhr:
      kind = Code::kUnavailable;
      break;
    case CL_BUILD_PROGRAM_FAILURE:
    case CL_COMPILE_PROGRAM_FAILURE:
    case CL_LINK_PROGRAM_FAILURE:
      kind = Code::kInvalidArgument;  // the kernel source is at fault
      break;
    default:
      if (code <= CL_INVALID_VALUE && code >= CL_INVALID_DEVICE_PARTITION_COUNT)
        kind = Code::kInvalidArgument;
      break;
  }
  return Status(kind, fmt::format("{}: {} ({})", call, opencl_error_name(code), code));
}

}  // namespace tessel
