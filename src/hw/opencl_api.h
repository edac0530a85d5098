// The OpenCL entry points tessel uses, loaded at run time from the ICD loader (libOpenCL.so.1),
// which dispatches to whatever drivers /etc/OpenCL/vendors lists (PoCL, a GPU vendor's). Types
// and constants come from the Khronos headers (Debian: opencl-headers); nothing links against
// libOpenCL, so tessel runs where there is none and says so.
//
//   TESSEL_ASSIGN_OR_RETURN(const OpenClApi* cl, opencl_api());
//   cl_uint n = 0;
//   TESSEL_TRY(opencl_check(cl->clGetPlatformIDs(0, nullptr, &n), "clGetPlatformIDs"));
#pragma once

#ifndef CL_TARGET_OPENCL_VERSION
#define CL_TARGET_OPENCL_VERSION 120
#endif
#include <CL/cl.h>

#include <string>
#include <string_view>
#include <vector>

#include "support/status.h"

namespace tessel {

// Every OpenCL function in the table, OpenCL 1.2 signatures.
#define TESSEL_OPENCL_FUNCTIONS(X) \
  X(clGetPlatformIDs)              \
  X(clGetPlatformInfo)             \
  X(clGetDeviceIDs)                \
  X(clGetDeviceInfo)               \
  X(clCreateContext)               \
  X(clRetainContext)               \
  X(clReleaseContext)              \
  X(clCreateCommandQueue)          \
  X(clRetainCommandQueue)          \
  X(clReleaseCommandQueue)         \
  X(clCreateBuffer)                \
  X(clCreateSubBuffer)             \
  X(clRetainMemObject)             \
  X(clReleaseMemObject)            \
  X(clEnqueueReadBuffer)           \
  X(clEnqueueWriteBuffer)          \
  X(clEnqueueCopyBuffer)           \
  X(clEnqueueFillBuffer)           \
  X(clCreateProgramWithSource)     \
  X(clCreateProgramWithBinary)     \
  X(clBuildProgram)                \
  X(clGetProgramInfo)              \
  X(clGetProgramBuildInfo)         \
  X(clReleaseProgram)              \
  X(clCreateKernel)                \
  X(clReleaseKernel)               \
  X(clSetKernelArg)                \
  X(clGetKernelWorkGroupInfo)      \
  X(clEnqueueNDRangeKernel)        \
  X(clEnqueueMarkerWithWaitList)   \
  X(clEnqueueBarrierWithWaitList)  \
  X(clWaitForEvents)               \
  X(clGetEventProfilingInfo)       \
  X(clReleaseEvent)                \
  X(clFlush)                       \
  X(clFinish)

struct OpenClApi {
  std::string library;  // the file that was loaded
#define TESSEL_OPENCL_POINTER(name) decltype(&::name) name = nullptr;
  TESSEL_OPENCL_FUNCTIONS(TESSEL_OPENCL_POINTER)
#undef TESSEL_OPENCL_POINTER
};

// The ICD loader's names, in the order they are tried.
const std::vector<std::string>& opencl_library_candidates();

// Loads the table from the first candidate that opens; unavailable (saying what was tried and
// why each failed) or not_found (a library without an entry point) otherwise.
Expected<OpenClApi> load_opencl_api(const std::vector<std::string>& candidates);

// load_opencl_api(opencl_library_candidates()), once per process.
Expected<const OpenClApi*> opencl_api();

// "CL_BUILD_PROGRAM_FAILURE" for -11.
const char* opencl_error_name(cl_int code);

// ok for CL_SUCCESS, else an error naming the call and the code:
// "clCreateBuffer: CL_INVALID_BUFFER_SIZE (-61)".
Status opencl_check(cl_int code, std::string_view call);

}  // namespace tessel
