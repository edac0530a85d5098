// OpenCL program builds (with the build log in the error) and kernel launches.
#include "runtime/opencl/opencl_program.h"

#include <utility>

namespace tessel {

Expected<OpenClProgram> OpenClProgram::build(std::shared_ptr<OpenClContext> context,
                                             const std::string& source, const std::string& options,
                                             const std::string& name) {
  const OpenClApi& cl = context->api();
  cl_device_id device = context->device().device;
  OpenClProgram p;
  p.context_ = context;
  p.name_ = name;
  const char* text = source.c_str();
  std::size_t length = source.size();
  cl_int err = CL_SUCCESS;
  p.program_ = cl.clCreateProgramWithSource(context->context(), 1, &text, &length, &err);
  TESSEL_TRY(
      opencl_check(err, "clCreateProgramWithSource").with_context("OpenCL program {}", name));

  cl_int built = cl.clBuildProgram(p.program_, 1, &device, options.c_str(), nullptr, nullptr);
  std::size_t log_size = 0;
  TESSEL_TRY(opencl_check(
      cl.clGetProgramBuildInfo(p.program_, device, CL_PROGRAM_BUILD_LOG, 0, nullptr, &log_size),
      "clGetProgramBuildInfo"));
  p.log_.resize(log_size);
  TESSEL_TRY(opencl_check(cl.clGetProgramBuildInfo(p.program_, device, CL_PROGRAM_BUILD_LOG,
                                                   log_size, p.log_.data(), nullptr),
                          "clGetProgramBuildInfo"));
  while (!p.log_.empty() && (p.log_.back() == '\0' || p.log_.back() == '\n'))
    p.log_.pop_back();
  if (built == CL_BUILD_PROGRAM_FAILURE)
    return invalid_argument("OpenCL program {} does not build on {} (options '{}'):\n{}", name,
                            context->device().name, options, p.log_);
  TESSEL_TRY(opencl_check(built, "clBuildProgram").with_context("OpenCL program {}", name));
  return p;
}

OpenClProgram& OpenClProgram::operator=(OpenClProgram&& other) noexcept {
  if (this != &other) {
    if (program_) context_->api().clReleaseProgram(program_);
    context_ = std::move(other.context_);
    program_ = std::exchange(other.program_, nullptr);
    name_ = std::move(other.name_);
    log_ = std::move(other.log_);
  }
  return *this;
}

OpenClProgram::~OpenClProgram() {
  if (program_) context_->api().clReleaseProgram(program_);
}

Expected<OpenClKernel> OpenClProgram::kernel(const std::string& name) const {
  cl_int err = CL_SUCCESS;
  cl_kernel k = context_->api().clCreateKernel(program_, name.c_str(), &err);
  if (err == CL_INVALID_KERNEL_NAME)
    return not_found("OpenCL program {} has no kernel named '{}'", name_, name);
  TESSEL_TRY(opencl_check(err, "clCreateKernel").with_context("kernel {} of {}", name, name_));
  OpenClKernel kernel;
  kernel.context_ = context_;
  kernel.kernel_ = k;
  kernel.name_ = name;
  return kernel;
}

OpenClKernel& OpenClKernel::operator=(OpenClKernel&& other) noexcept {
  if (this != &other) {
    if (kernel_) context_->api().clReleaseKernel(kernel_);
    context_ = std::move(other.context_);
    kernel_ = std::exchange(other.kernel_, nullptr);
    name_ = std::move(other.name_);
  }
  return *this;
}

OpenClKernel::~OpenClKernel() {
  if (kernel_) context_->api().clReleaseKernel(kernel_);
}

Status OpenClKernel::set_arg_bytes(unsigned index, std::size_t bytes, const void* value) {
  return opencl_check(context_->api().clSetKernelArg(kernel_, index, bytes, value),
                      "clSetKernelArg")
      .with_context("kernel {} argument {}", name_, index);
}

Status OpenClKernel::launch(const std::vector<std::size_t>& global,
                            const std::vector<std::size_t>& local) const {
  if (global.empty() || global.size() > 3)
    return invalid_argument("kernel {}: {} launch dimensions (OpenCL takes 1 to 3)", name_,
                            global.size());
  if (!local.empty() && local.size() != global.size())
    return invalid_argument("kernel {}: {} global but {} local dimensions", name_, global.size(),
                            local.size());
  for (std::size_t d = 0; d < local.size(); ++d)
    if (local[d] == 0 || global[d] % local[d] != 0)
      return invalid_argument(
          "kernel {}: global size {} is not a multiple of the work-group size {} in dimension {}",
          name_, global[d], local[d], d);
  return opencl_check(
             context_->api().clEnqueueNDRangeKernel(
                 context_->queue(), kernel_, static_cast<cl_uint>(global.size()), nullptr,
                 global.data(), local.empty() ? nullptr : local.data(), 0, nullptr, nullptr),
             "clEnqueueNDRangeKernel")
      .with_context("kernel {}", name_);
}

}  // namespace tessel
