// Tile kernels on OpenCL devices (see opencl_kernel.h).
#include "tile/run/opencl_kernel.h"

#include "tile/codegen/opencl/opencl_renderer.h"
#include "tile/pipeline.h"

namespace tessel::tile {

OpenClDevice::~OpenClDevice() {
  if (!owned || !api) return;
  if (queue) api->clReleaseCommandQueue(queue);
  if (context) api->clReleaseContext(context);
}

Expected<std::shared_ptr<OpenClDevice>> open_opencl_device(int index) {
  TESSEL_ASSIGN_OR_RETURN(const OpenClApi* cl, opencl_api());
  cl_uint platforms = 0;
  TESSEL_TRY(opencl_check(cl->clGetPlatformIDs(0, nullptr, &platforms), "clGetPlatformIDs"));
  std::vector<cl_platform_id> ids(platforms);
  TESSEL_TRY(opencl_check(cl->clGetPlatformIDs(platforms, ids.data(), nullptr), "clGetPlatformIDs"));
  int seen = 0;
  for (cl_platform_id p : ids) {
    cl_uint n = 0;
    if (cl->clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, 0, nullptr, &n) != CL_SUCCESS) continue;
    std::vector<cl_device_id> devices(n);
    TESSEL_TRY(opencl_check(cl->clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, n, devices.data(), nullptr), "clGetDeviceIDs"));
    for (cl_device_id d : devices) {
      if (seen++ != index) continue;
      auto dev = std::make_shared<OpenClDevice>();
      dev->api = cl;
      dev->device = d;
      dev->owned = true;
      char name[256] = {};
      cl->clGetDeviceInfo(d, CL_DEVICE_NAME, sizeof name - 1, name, nullptr);
      dev->name = name;
      cl_int err = CL_SUCCESS;
      dev->context = cl->clCreateContext(nullptr, 1, &d, nullptr, nullptr, &err);
      TESSEL_TRY(opencl_check(err, "clCreateContext"));
      dev->queue = cl->clCreateCommandQueue(dev->context, d, 0, &err);
      TESSEL_TRY(opencl_check(err, "clCreateCommandQueue"));
      return dev;
    }
  }
  return not_found("no OpenCL device {} (found {})", index, seen);
}

Target opencl_target(const OpenClDevice& device, int threads) {
  cl_ulong local = 0;
  size_t max_group = 0;
  device.api->clGetDeviceInfo(device.device, CL_DEVICE_LOCAL_MEM_SIZE, sizeof local, &local, nullptr);
  device.api->clGetDeviceInfo(device.device, CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof max_group, &max_group, nullptr);
  int t = threads;
  while (max_group > 0 && static_cast<size_t>(t) > max_group) t /= 2;
  return Target::opencl(local > 0 ? static_cast<int64_t>(local) : 32 << 10, std::max(1, t));
}

Expected<OpenClKernel> OpenClKernel::compile(const Kernel& parsed, std::shared_ptr<OpenClDevice> device,
                                             const std::map<std::string, std::string>& params) {
  const OpenClApi* cl = device->api;
  CompileOptions o;
  o.target = opencl_target(*device);
  o.params = params;
  OpenClKernel k;
  k.device_ = device;
  k.threads_ = o.target.threads_per_block;
  TESSEL_ASSIGN_OR_RETURN(k.ir_, compile_ir(parsed, o));
  k.used_ = used_arguments(k.ir_);
  k.source_ = render_opencl(k.ir_, o.target);
  const char* text = k.source_.c_str();
  size_t length = k.source_.size();
  cl_int err = CL_SUCCESS;
  cl_program program = cl->clCreateProgramWithSource(device->context, 1, &text, &length, &err);
  TESSEL_TRY(opencl_check(err, "clCreateProgramWithSource"));
  k.program_.reset(program, [cl](cl_program p) { cl->clReleaseProgram(p); });
  err = cl->clBuildProgram(program, 1, &device->device, "-cl-std=CL1.2", nullptr, nullptr);
  if (err != CL_SUCCESS) {
    size_t size = 0;
    cl->clGetProgramBuildInfo(program, device->device, CL_PROGRAM_BUILD_LOG, 0, nullptr, &size);
    std::string log(size, '\0');
    cl->clGetProgramBuildInfo(program, device->device, CL_PROGRAM_BUILD_LOG, size, log.data(), nullptr);
    return internal_error("OpenCL build of kernel '{}' failed ({}):\n{}\n--- source:\n{}", k.ir_.name,
                          opencl_error_name(err), log, k.source_);
  }
  cl_kernel kernel = cl->clCreateKernel(program, entry_name(k.ir_).c_str(), &err);
  TESSEL_TRY(opencl_check(err, "clCreateKernel"));
  k.kernel_.reset(kernel, [cl](cl_kernel x) { cl->clReleaseKernel(x); });
  return k;
}

Status OpenClKernel::launch(const std::vector<LaunchArg>& args) const {
  const OpenClApi* cl = device_->api;
  TESSEL_ASSIGN_OR_RETURN(BoundLaunch b, bind_launch(ir_, used_, args));
  if (b.blocks == 0) return ok_status();
  std::vector<ArgSlot> slots = kernel_slots(ir_);
  cl_kernel kernel = kernel_.get();
  for (size_t i = 0; i < slots.size(); ++i) {
    const ArgSlot& s = slots[i];
    const tessel_cpu::Arg& v = b.slots[i];
    cl_int err;
    cl_uint index = static_cast<cl_uint>(i);
    switch (s.kind) {
      case ArgSlot::Kind::kData: {
        cl_mem mem = static_cast<cl_mem>(v.ptr);
        err = cl->clSetKernelArg(kernel, index, sizeof mem, &mem);
        break;
      }
      case ArgSlot::Kind::kScalar:
        if (s.type == kF32) err = cl->clSetKernelArg(kernel, index, sizeof(float), &v.f32);
        else if (s.type == DType(ScalarType::kF64)) err = cl->clSetKernelArg(kernel, index, sizeof(double), &v.f64);
        else if (s.type == kI32) err = cl->clSetKernelArg(kernel, index, sizeof(cl_int), &v.i32);
        else err = cl->clSetKernelArg(kernel, index, sizeof(cl_long), &v.i64);
        break;
      default: err = cl->clSetKernelArg(kernel, index, sizeof(cl_long), &v.i64);
    }
    TESSEL_TRY(opencl_check(err, fmt::format("clSetKernelArg({})", s.name)));
  }
  size_t local[3] = {static_cast<size_t>(threads_), 1, 1};
  size_t global[3] = {static_cast<size_t>(b.grid[0]) * threads_, static_cast<size_t>(b.grid[1]),
                      static_cast<size_t>(b.grid[2])};
  TESSEL_TRY(opencl_check(cl->clEnqueueNDRangeKernel(device_->queue, kernel, 3, nullptr, global, local, 0,
                                                      nullptr, nullptr),
                          "clEnqueueNDRangeKernel"));
  return opencl_check(cl->clFinish(device_->queue), "clFinish");
}

}  // namespace tessel::tile
