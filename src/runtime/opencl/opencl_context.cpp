// OpenCL context, queue and buffers over the run-time loaded API table (hw/opencl_api.h).
#include "runtime/opencl/opencl_context.h"

namespace tessel {

Expected<std::shared_ptr<OpenClContext>> OpenClContext::create(const OpenClDeviceInfo& device) {
  TESSEL_ASSIGN_OR_RETURN(const OpenClApi* cl, opencl_api());
  std::shared_ptr<OpenClContext> ctx(new OpenClContext(cl, device));
  cl_int err = CL_SUCCESS;
  cl_context_properties props[] = {CL_CONTEXT_PLATFORM,
                                   reinterpret_cast<cl_context_properties>(device.platform), 0};
  ctx->context_ = cl->clCreateContext(props, 1, &device.device, nullptr, nullptr, &err);
  TESSEL_TRY(opencl_check(err, "clCreateContext").with_context("OpenCL device {}", device.name));
  ctx->queue_ =
      cl->clCreateCommandQueue(ctx->context_, device.device, CL_QUEUE_PROFILING_ENABLE, &err);
  TESSEL_TRY(
      opencl_check(err, "clCreateCommandQueue").with_context("OpenCL device {}", device.name));
  return ctx;
}

Expected<std::shared_ptr<OpenClContext>> OpenClContext::create_default() {
  TESSEL_ASSIGN_OR_RETURN(std::vector<OpenClDeviceInfo> devices, list_opencl_devices());
  if (devices.empty())
    return unavailable(
        "OpenCL: the ICD loader found no platform with a device "
        "(is a driver such as pocl-opencl-icd installed?)");
  return create(devices.front());
}

OpenClContext::~OpenClContext() {
  if (queue_) {
    api_->clFinish(queue_);
    api_->clReleaseCommandQueue(queue_);
  }
  if (context_) api_->clReleaseContext(context_);
}

Status OpenClContext::finish() const {
  return opencl_check(api_->clFinish(queue_), "clFinish");
}

Expected<cl_mem> OpenClContext::allocate(std::size_t bytes) const {
  cl_int err = CL_SUCCESS;
  // OpenCL refuses zero-sized buffers; an empty allocation still gets a distinct handle.
  cl_mem mem =
      api_->clCreateBuffer(context_, CL_MEM_READ_WRITE, bytes == 0 ? 1 : bytes, nullptr, &err);
  TESSEL_TRY(opencl_check(err, "clCreateBuffer")
                 .with_context("allocating {} bytes on OpenCL device {}", bytes, device_.name));
  return mem;
}

void OpenClContext::release(cl_mem mem) const {
  if (mem) api_->clReleaseMemObject(mem);
}

Status OpenClContext::write(cl_mem dst, std::size_t dst_offset, const void* src,
                            std::size_t bytes) const {
  if (bytes == 0) return ok_status();
  return opencl_check(
      api_->clEnqueueWriteBuffer(queue_, dst, CL_TRUE, dst_offset, bytes, src, 0, nullptr, nullptr),
      "clEnqueueWriteBuffer");
}

Status OpenClContext::read(cl_mem src, std::size_t src_offset, void* dst, std::size_t bytes) const {
  if (bytes == 0) return ok_status();
  return opencl_check(
      api_->clEnqueueReadBuffer(queue_, src, CL_TRUE, src_offset, bytes, dst, 0, nullptr, nullptr),
      "clEnqueueReadBuffer");
}

Status OpenClContext::copy(cl_mem src, std::size_t src_offset, cl_mem dst, std::size_t dst_offset,
                           std::size_t bytes) const {
  if (bytes == 0) return ok_status();
  return opencl_check(api_->clEnqueueCopyBuffer(queue_, src, dst, src_offset, dst_offset, bytes, 0,
                                                nullptr, nullptr),
                      "clEnqueueCopyBuffer");
}

}  // namespace tessel
