// The devices tile kernel tests run on: every device here (the CPU always, OpenCL where a device
// opens, CUDA where there is a GPU), each through its runtime::Device (ops/device_kernel.h: the
// device's target, its renderer, its build, a launch on its queue). A test passes host memory: on
// a device the host cannot address, a launch copies each tensor to a buffer of the device, and
// every buffer back afterwards, so one test body checks every device against the same reference.
#pragma once

#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ops/device_kernel.h"
#include "runtime/device.h"
#include "support/status.h"
#include "tile/ir/ir.h"
#include "tile/run/bind.h"

namespace tessel::tile::testing {

using Launcher = std::function<Status(const std::vector<LaunchArg>&)>;
using Params = std::map<std::string, std::string>;

struct Backend {
  std::string name;  // the device's id: "cpu", "opencl:0"
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

// Host tensors through device buffers: copied in, launched, copied back, released.
inline Status launch_through_buffers(Device* device, const ops::DeviceKernel& kernel,
                                     const std::vector<LaunchArg>& args) {
  std::vector<LaunchArg> device_args = args;
  struct Staged {
    DeviceBuffer buffer;
    void* host;
    size_t bytes;
  };
  std::vector<Staged> staged;
  auto release = [&] {
    for (const Staged& s : staged) device->allocator().release(s.buffer);
  };
  Status status;
  for (LaunchArg& a : device_args) {
    TensorArg* t = std::get_if<TensorArg>(&a);
    if (!t || !t->data) continue;
    const size_t bytes = std::max<size_t>(
        1, (static_cast<size_t>(t->offset) + span(*t)) * DType(t->dtype).bytes());
    Expected<DeviceBuffer> buffer = device->allocator().allocate(bytes);
    if (!buffer) {
      release();
      return buffer.status();
    }
    staged.push_back({*buffer, t->data, bytes});
    status = device->copy_from_host(*buffer, 0, t->data, bytes);
    if (!status.ok()) break;
    t->data = buffer->handle;
  }
  if (status.ok()) status = kernel.launch(device_args);
  for (const Staged& s : staged)
    if (status.ok()) status = device->copy_to_host(s.host, s.buffer, 0, s.bytes);
  release();
  return status;
}

}  // namespace detail

// `k` compiled for `device`; the launcher takes host memory.
inline Expected<Launcher> device_launcher(Device* device, const Kernel& k, const Params& p) {
  Expected<ops::DeviceKernel> compiled = ops::DeviceKernel::compile(k, device, p);
  if (!compiled) return compiled.status();
  auto kernel = std::make_shared<ops::DeviceKernel>(std::move(*compiled));
  if (device->kind() == DeviceKind::kCpu)  // host memory is device memory
    return Launcher([kernel](const std::vector<LaunchArg>& a) { return kernel->launch(a); });
  return Launcher([device, kernel](const std::vector<LaunchArg>& a) {
    return detail::launch_through_buffers(device, *kernel, a);
  });
}

// `k` on the CPU device.
inline Expected<Launcher> cpu_launcher(const Kernel& k, const Params& p = {}) {
  return device_launcher(cpu_device(), k, p);
}

// Every device present on this machine, the CPU first.
inline const std::vector<Backend>& test_backends() {
  static const std::vector<Backend> backends = [] {
    std::vector<Backend> list;
    for (Device* d : available_devices()) {
      list.push_back({d->id(), [d](const Kernel& k, const Params& p) {
                        return device_launcher(d, k, p);
                      }});
    }
    return list;
  }();
  return backends;
}

}  // namespace tessel::tile::testing
