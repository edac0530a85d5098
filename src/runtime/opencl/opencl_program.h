// Building OpenCL C source into a program and launching its kernels: what the OpenCL Device's
// build and launch (opencl_device.h) are made of.
//
//   TESSEL_ASSIGN_OR_RETURN(OpenClProgram p, OpenClProgram::build(ctx, source, "-cl-std=CL1.2",
//                                                                 "gemm.cl"));
//   TESSEL_ASSIGN_OR_RETURN(OpenClKernel k, p.kernel("gemm"));
//   TESSEL_TRY(k.set_args(a_mem, b_mem, c_mem, n));      // cl_mem and plain scalars
//   TESSEL_TRY(k.launch({cdiv(n, 64) * 64}, {64}));
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "runtime/opencl/opencl_context.h"

namespace tessel {

class OpenClKernel;

class OpenClProgram {
 public:
  // Compiles `source` for the context's device. A compile error is invalid_argument carrying the
  // driver's build log; `name` (a file name, a kernel's name) says which source it was.
  static Expected<OpenClProgram> build(std::shared_ptr<OpenClContext> context,
                                       const std::string& source, const std::string& options,
                                       const std::string& name);

  OpenClProgram(OpenClProgram&& other) noexcept { *this = std::move(other); }
  OpenClProgram& operator=(OpenClProgram&& other) noexcept;
  ~OpenClProgram();

  // The kernel function `name`; not_found when the program has none of that name.
  Expected<OpenClKernel> kernel(const std::string& name) const;
  // The build log (warnings) of a successful build; often empty.
  const std::string& log() const { return log_; }

 private:
  OpenClProgram() = default;
  std::shared_ptr<OpenClContext> context_;
  cl_program program_ = nullptr;
  std::string name_;
  std::string log_;
};

class OpenClKernel {
 public:
  OpenClKernel(OpenClKernel&& other) noexcept { *this = std::move(other); }
  OpenClKernel& operator=(OpenClKernel&& other) noexcept;
  ~OpenClKernel();

  // Argument `index`: a buffer (cl_mem) or a trivially copyable scalar, passed by value.
  template <typename T>
  Status set_arg(unsigned index, const T& value) {
    static_assert(std::is_trivially_copyable_v<T>, "OpenCL kernel arguments are copied bytes");
    return set_arg_bytes(index, sizeof(T), &value);
  }
  // `bytes` of work-group local memory for a `__local` pointer argument.
  Status set_local_arg(unsigned index, std::size_t bytes) {
    return set_arg_bytes(index, bytes, nullptr);
  }
  // `bytes` bytes at `value` as argument `index`.
  Status set_arg_bytes(unsigned index, std::size_t bytes, const void* value);
  // All arguments in order, from index 0.
  template <typename... Args>
  Status set_args(const Args&... args) {
    unsigned index = 0;
    Status status;
    auto set_next = [&](const auto& arg) {
      if (status.ok()) status = set_arg(index, arg);
      ++index;
    };
    (set_next(args), ...);
    return status;
  }

  // Queues the kernel over `global` work-items (1 to 3 dimensions) in work-groups of `local`
  // (empty: the driver chooses). Returns once queued; OpenClContext::finish() waits.
  Status launch(const std::vector<std::size_t>& global,
                const std::vector<std::size_t>& local = {}) const;

  const std::string& name() const { return name_; }

 private:
  friend class OpenClProgram;
  OpenClKernel() = default;
  std::shared_ptr<OpenClContext> context_;
  cl_kernel kernel_ = nullptr;
  std::string name_;
};

}  // namespace tessel
