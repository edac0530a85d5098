// The backends kernel tests run on: the CPU always, OpenCL when a device opens (PoCL here).
// A test passes host pointers; an OpenCL launch copies each tensor to a device buffer and every
// buffer back afterwards, so one test body checks every backend against the same reference.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "support/status.h"
#include "tile/ir/ir.h"
#include "support/log.h"
#include "tile/run/bind.h"
#include "tile/run/cpu_kernel.h"
#include "tile/run/opencl_kernel.h"

namespace tessel::tile::testing {

using Launcher = std::function<Status(const std::vector<LaunchArg>&)>;
using Params = std::map<std::string, std::string>;

struct Backend {
  std::string name;  // "cpu", "opencl"
  std::function<Expected<Launcher>(const Kernel&, const Params&)> compile;
};



namespace detail {

// Elements a strided tensor spans: 1 + sum((n_d - 1) * stride_d), or 0 when empty.
inline size_t span(const TensorArg& t) {
  size_t n = 1;
  int64_t contiguous = 1;
  for (size_t d = t.shape.size(); d-- > 0;) {
    if (t.shape[d] == 0) return 0;
    int64_t stride = t.strides.empty() ? contiguous : t.strides[d];
    n += static_cast<size_t>((t.shape[d] - 1) * stride);
    contiguous *= t.shape[d];
  }
  return n;
}

inline Expected<Launcher> opencl_launcher(std::shared_ptr<OpenClDevice> dev, const Kernel& k, const Params& p) {
  auto compiled = OpenClKernel::compile(k, dev, p);
  if (!compiled) return compiled.status();
  auto kernel = std::make_shared<OpenClKernel>(std::move(*compiled));
  return Launcher([dev, kernel](const std::vector<LaunchArg>& args) -> Status {
    const OpenClApi* cl = dev->api;
    std::vector<LaunchArg> device_args = args;
    std::vector<std::pair<cl_mem, std::pair<void*, size_t>>> buffers;
    auto release = [&] {
      for (auto& b : buffers) cl->clReleaseMemObject(b.first);
    };
    for (LaunchArg& a : device_args) {
      TensorArg* t = std::get_if<TensorArg>(&a);
      if (!t || !t->data) continue;
      size_t bytes = std::max<size_t>(1, (static_cast<size_t>(t->offset) + span(*t)) * DType(t->dtype).bytes());
      cl_int err = CL_SUCCESS;
      cl_mem mem = cl->clCreateBuffer(dev->context, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, bytes, t->data, &err);
      if (err != CL_SUCCESS) {
        release();
        return opencl_check(err, "clCreateBuffer");
      }
      buffers.push_back({mem, {t->data, bytes}});
      t->data = mem;
    }
    Status s = kernel->launch(device_args);
    for (auto& [mem, host] : buffers)
      if (s.ok())
        s = opencl_check(cl->clEnqueueReadBuffer(dev->queue, mem, CL_TRUE, 0, host.second, host.first, 0, nullptr, nullptr),
                         "clEnqueueReadBuffer");
    release();
    return s;
  });
}

}  // namespace detail

// Every backend present on this machine.
inline const std::vector<Backend>& test_backends() {
  static const std::vector<Backend> backends = [] {
    std::vector<Backend> list;
    list.push_back({"cpu", [](const Kernel& k, const Params& p) -> Expected<Launcher> {
                      auto compiled = CpuKernel::compile(k, p);
                      if (!compiled) return compiled.status();
                      auto kernel = std::make_shared<CpuKernel>(std::move(*compiled));
                      return Launcher([kernel](const std::vector<LaunchArg>& a) { return kernel->launch(a); });
                    }});
    auto dev = open_opencl_device(0);
    if (dev.ok()) {
      std::shared_ptr<OpenClDevice> d = *dev;
      list.push_back({"opencl", [d](const Kernel& k, const Params& p) { return detail::opencl_launcher(d, k, p); }});
    } else {
      log_warn("tile tests: no OpenCL device, testing the cpu backend only: {}", dev.status().to_string());
    }
    return list;
  }();
  return backends;
}

}  // namespace tessel::tile::testing
