// OpenCL device: cl_mem allocation under the caching allocator, queue copies, program builds and
// kernel launches on the queue, marker events, and registration of the "opencl" backend with the
// device registry.
#include "runtime/opencl/opencl_device.h"

#include <algorithm>

#include "support/log.h"

namespace tessel {
namespace {

RawAllocator raw_opencl_allocator(std::shared_ptr<OpenClContext> context) {
  return RawAllocator{[context](size_t bytes) -> Expected<DeviceBuffer> {
                        TESSEL_ASSIGN_OR_RETURN(cl_mem mem, context->allocate(bytes));
                        return DeviceBuffer{mem, bytes};
                      },
                      [context](DeviceBuffer buffer) { context->release(opencl_mem(buffer)); }};
}

// A built program and its one kernel. Setting arguments and queueing must not interleave between
// threads (the arguments live in the cl_kernel), hence the lock.
class OpenClModule final : public KernelModule {
 public:
  OpenClModule(const Device* device, std::string name, OpenClProgram program, OpenClKernel kernel)
      : KernelModule(device, std::move(name)),
        program_(std::move(program)),
        kernel_(std::move(kernel)) {}
  OpenClKernel& kernel() const { return kernel_; }
  std::mutex& mutex() const { return mutex_; }

 private:
  OpenClProgram program_;
  mutable OpenClKernel kernel_;
  mutable std::mutex mutex_;
};

class OpenClEvent final : public Event {
 public:
  OpenClEvent(std::shared_ptr<OpenClContext> context, cl_event event)
      : context_(std::move(context)), event_(event) {}
  ~OpenClEvent() override { context_->api().clReleaseEvent(event_); }
  Status wait() const override {
    return opencl_check(context_->api().clWaitForEvents(1, &event_), "clWaitForEvents");
  }
  const OpenClContext& context() const { return *context_; }
  cl_event event() const { return event_; }

 private:
  std::shared_ptr<OpenClContext> context_;
  cl_event event_;
};

[[maybe_unused]] const bool kRegistered =
    register_backend(DeviceKind::kOpenCL, enumerate_opencl_devices);

}  // namespace

OpenClDevice::OpenClDevice(int index, std::shared_ptr<OpenClContext> context)
    : OpenClDevice(index, context, context->device().global_mem_bytes / 4) {}

OpenClDevice::OpenClDevice(int index, std::shared_ptr<OpenClContext> context,
                           size_t max_cached_bytes)
    : Device(DeviceKind::kOpenCL, index, context->device().name),
      context_(context),
      allocator_(fmt::format("opencl:{}", index), raw_opencl_allocator(context), max_cached_bytes) {
}

Status OpenClDevice::do_copy_from_host(DeviceBuffer dst, size_t dst_offset, const void* src,
                                       size_t bytes) {
  return context_->write(opencl_mem(dst), dst_offset, src, bytes).with_context("{}", id());
}

Status OpenClDevice::do_copy_to_host(void* dst, DeviceBuffer src, size_t src_offset, size_t bytes) {
  return context_->read(opencl_mem(src), src_offset, dst, bytes).with_context("{}", id());
}

Status OpenClDevice::do_copy_on_device(DeviceBuffer dst, size_t dst_offset, DeviceBuffer src,
                                       size_t src_offset, size_t bytes) {
  return context_->copy(opencl_mem(src), src_offset, opencl_mem(dst), dst_offset, bytes)
      .with_context("{}", id());
}

DeviceLimits OpenClDevice::limits() const {
  const OpenClDeviceInfo& d = context_->device();
  DeviceLimits l;
  l.memory_bytes = static_cast<int64_t>(d.global_mem_bytes);
  l.fast_memory_bytes = d.local_mem_bytes > 0 ? static_cast<int64_t>(d.local_mem_bytes) : 32 << 10;
  l.max_threads_per_block = static_cast<int>(std::max<size_t>(1, d.max_work_group_size));
  l.compute_units = static_cast<int>(std::max<uint32_t>(1, d.compute_units));
  l.f64 = d.fp64;
  l.gpu = d.type == "gpu";
  return l;
}

Expected<std::shared_ptr<Event>> OpenClDevice::record_event() {
  cl_event event = nullptr;
  TESSEL_TRY(opencl_check(
                 context_->api().clEnqueueMarkerWithWaitList(context_->queue(), 0, nullptr, &event),
                 "clEnqueueMarkerWithWaitList")
                 .with_context("{}", id()));
  return std::shared_ptr<Event>(std::make_shared<OpenClEvent>(context_, event));
}

Status OpenClDevice::wait_event(const Event& event) {
  const auto* cl = dynamic_cast<const OpenClEvent*>(&event);
  // An event of another context cannot enter this queue's wait list: the host waits instead.
  if (cl == nullptr || cl->context().context() != context_->context()) return event.wait();
  cl_event e = cl->event();
  return opencl_check(
      context_->api().clEnqueueBarrierWithWaitList(context_->queue(), 1, &e, nullptr),
      "clEnqueueBarrierWithWaitList");
}

Expected<std::shared_ptr<KernelModule>> OpenClDevice::do_build(const KernelImage& image) {
  TESSEL_ASSIGN_OR_RETURN(OpenClProgram program,
                          OpenClProgram::build(context_, image.code, image.options, image.name));
  TESSEL_ASSIGN_OR_RETURN(OpenClKernel kernel, program.kernel(image.entry));
  return std::shared_ptr<KernelModule>(
      std::make_shared<OpenClModule>(this, image.name, std::move(program), std::move(kernel)));
}

Status OpenClDevice::do_launch(const KernelModule& module, const LaunchGrid& grid,
                               const std::vector<KernelArgument>& args) {
  const auto& m = static_cast<const OpenClModule&>(module);
  const OpenClApi& cl = context_->api();
  // A buffer at an offset is a sub-buffer for the launch (the queued kernel keeps it alive).
  std::vector<cl_mem> sub_buffers;
  auto release = [&] {
    for (cl_mem s : sub_buffers)
      cl.clReleaseMemObject(s);
  };
  std::lock_guard<std::mutex> lock(m.mutex());
  Status status;
  for (size_t i = 0; i < args.size() && status.ok(); ++i) {
    const KernelArgument& a = args[i];
    const unsigned index = static_cast<unsigned>(i);
    if (a.kind == KernelArgument::Kind::kScalar) {
      status = m.kernel().set_arg_bytes(index, a.size, a.bytes.data());
      continue;
    }
    cl_mem mem = opencl_mem(a.buffer);
    if (a.offset != 0) {
      cl_buffer_region region{a.offset, a.buffer.bytes - a.offset};
      cl_int err = CL_SUCCESS;
      mem =
          cl.clCreateSubBuffer(mem, CL_MEM_READ_WRITE, CL_BUFFER_CREATE_TYPE_REGION, &region, &err);
      status = opencl_check(err, "clCreateSubBuffer")
                   .with_context(
                       "argument {} at byte offset {} (OpenCL needs offsets aligned to "
                       "the device's base address alignment)",
                       i, a.offset);
      if (!status.ok()) break;
      sub_buffers.push_back(mem);
    }
    status = m.kernel().set_arg(index, mem);
  }
  if (status.ok()) {
    const size_t threads = static_cast<size_t>(grid.threads_per_block);
    const size_t x = grid.block_columns > 0 ? static_cast<size_t>(grid.block_columns) : threads;
    const size_t y = threads / x;
    status = m.kernel().launch(
        {static_cast<size_t>(grid.blocks[0]) * x, static_cast<size_t>(grid.blocks[1]) * y,
         static_cast<size_t>(grid.blocks[2])},
        {x, y, 1});
  }
  release();
  return status;
}

Expected<std::vector<std::unique_ptr<Device>>> enumerate_opencl_devices() {
  TESSEL_ASSIGN_OR_RETURN(std::vector<OpenClDeviceInfo> infos, list_opencl_devices());
  std::vector<std::unique_ptr<Device>> devices;
  for (const OpenClDeviceInfo& info : infos) {
    Expected<std::shared_ptr<OpenClContext>> context = OpenClContext::create(info);
    if (!context) {
      // One broken driver must not hide the others; the device is left out, and said so.
      log_warn("OpenCL device {} ({}) left out: {}", info.name, info.platform_name,
               context.status().to_string());
      continue;
    }
    devices.push_back(
        std::make_unique<OpenClDevice>(static_cast<int>(devices.size()), std::move(*context)));
  }
  return devices;
}

}  // namespace tessel
