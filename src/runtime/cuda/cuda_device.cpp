// CUDA device: cuMemAlloc under the caching allocator, stream copies, and registration of the
// "cuda" backend with the device registry.
#include "runtime/cuda/cuda_device.h"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <sstream>

namespace tessel {
namespace {

RawAllocator raw_cuda_allocator(std::shared_ptr<CudaContext> context) {
  return RawAllocator{
      [context](size_t bytes) -> Expected<DeviceBuffer> {
        TESSEL_ASSIGN_OR_RETURN(cuda::CUdeviceptr ptr, context->allocate(bytes));
        return DeviceBuffer{reinterpret_cast<void*>(static_cast<std::uintptr_t>(ptr)), bytes};
      },
      [context](DeviceBuffer buffer) { context->release(cuda_address(buffer)); }};
}

// A module and its one kernel. The module is unloaded when the last reference goes, or by
// CudaContext::close at exit.
class CudaKernelModule final : public KernelModule {
 public:
  CudaKernelModule(const Device* device, std::string name, std::unique_ptr<CudaModule> module,
                   CudaFunction function)
      : KernelModule(device, std::move(name)), module_(std::move(module)), function_(function) {}
  const CudaFunction& function() const { return function_; }

 private:
  std::unique_ptr<CudaModule> module_;
  CudaFunction function_;
};

class CudaEvent final : public Event {
 public:
  CudaEvent(std::shared_ptr<CudaContext> context, cuda::CUevent event)
      : context_(std::move(context)), event_(event) {}
  ~CudaEvent() override {
    if (context_->make_current().ok()) context_->api().cuEventDestroy(event_);
  }
  Status wait() const override {
    TESSEL_TRY(context_->make_current());
    return cuda_check(context_->api(), context_->api().cuEventSynchronize(event_),
                      "cuEventSynchronize");
  }
  cuda::CUevent event() const { return event_; }

 private:
  std::shared_ptr<CudaContext> context_;
  cuda::CUevent event_;
};

// The devices made by enumerate_cuda_devices, closed at exit: the registry keeps devices for the
// life of the process and never destroys them, so their modules would otherwise stay loaded.
std::vector<CudaDevice*>& open_devices() {
  static auto* devices = new std::vector<CudaDevice*>;
  return *devices;
}

void close_cuda_devices() {
  for (CudaDevice* d : open_devices())
    d->close();
}

[[maybe_unused]] const bool kRegistered =
    register_backend(DeviceKind::kCuda, enumerate_cuda_devices);

}  // namespace

CudaDevice::CudaDevice(int index, std::shared_ptr<CudaContext> context)
    : CudaDevice(index, context, static_cast<size_t>(context->info().total_mem_bytes / 4)) {}

CudaDevice::CudaDevice(int index, std::shared_ptr<CudaContext> context, size_t max_cached_bytes)
    : Device(DeviceKind::kCuda, index, context->info().name),
      context_(context),
      allocator_(fmt::format("cuda:{}", index), raw_cuda_allocator(context), max_cached_bytes) {}

Status CudaDevice::do_copy_from_host(DeviceBuffer dst, size_t dst_offset, const void* src,
                                     size_t bytes) {
  return context_->write(cuda_address(dst, dst_offset), src, bytes).with_context("{}", id());
}

Status CudaDevice::do_copy_to_host(void* dst, DeviceBuffer src, size_t src_offset, size_t bytes) {
  return context_->read(dst, cuda_address(src, src_offset), bytes).with_context("{}", id());
}

Status CudaDevice::do_copy_on_device(DeviceBuffer dst, size_t dst_offset, DeviceBuffer src,
                                     size_t src_offset, size_t bytes) {
  return context_->copy(cuda_address(dst, dst_offset), cuda_address(src, src_offset), bytes)
      .with_context("{}", id());
}

DeviceLimits CudaDevice::limits() const {
  const CudaDeviceInfo& d = context_->info();
  DeviceLimits l;
  l.memory_bytes = d.total_mem_bytes;
  l.fast_memory_bytes = d.shared_mem_per_block_bytes > 0 ? d.shared_mem_per_block_bytes : 48 << 10;
  l.max_threads_per_block = d.max_threads_per_block > 0 ? d.max_threads_per_block : 1024;
  l.compute_units = d.multiprocessors > 0 ? d.multiprocessors : 1;
  l.f64 = true;
  l.compute_capability = 10 * d.compute_major + d.compute_minor;
  l.gpu = true;
  return l;
}

Expected<std::string> CudaDevice::ptx_architecture() const {
  TESSEL_ASSIGN_OR_RETURN(NvrtcInfo rtc, nvrtc_info());
  return ptx_architecture_for(rtc.architectures, context_->compute_capability());
}

Expected<std::shared_ptr<Event>> CudaDevice::record_event() {
  const CudaDriverApi& cu = context_->api();
  TESSEL_TRY(context_->make_current());
  cuda::CUevent event = nullptr;
  TESSEL_TRY(cuda_check(cu, cu.cuEventCreate(&event, cuda::kEventDisableTiming), "cuEventCreate")
                 .with_context("{}", id()));
  Status recorded = cuda_check(cu, cu.cuEventRecord(event, context_->stream()), "cuEventRecord");
  auto made = std::make_shared<CudaEvent>(context_, event);
  TESSEL_TRY(recorded.with_context("{}", id()));
  return std::shared_ptr<Event>(std::move(made));
}

Status CudaDevice::wait_event(const Event& event) {
  const auto* cuda_event = dynamic_cast<const CudaEvent*>(&event);
  if (cuda_event == nullptr) return event.wait();
  TESSEL_TRY(context_->make_current());
  // An event of another GPU's context orders this stream too (same process).
  return cuda_check(context_->api(),
                    context_->api().cuStreamWaitEvent(context_->stream(), cuda_event->event(), 0),
                    "cuStreamWaitEvent")
      .with_context("{}", id());
}

Expected<std::shared_ptr<KernelModule>> CudaDevice::do_build(const KernelImage& image) {
  TESSEL_ASSIGN_OR_RETURN(std::string arch, ptx_architecture());
  std::vector<std::string> options;
  std::istringstream lines(image.options);
  for (std::string line; std::getline(lines, line);)
    if (!line.empty()) options.push_back(line);
  TESSEL_ASSIGN_OR_RETURN(PtxProgram ptx,
                          compile_cuda_to_ptx(image.code, image.name + ".cu", arch, options));
  TESSEL_ASSIGN_OR_RETURN(std::unique_ptr<CudaModule> module,
                          CudaModule::load_ptx(context_, ptx.ptx, image.name));
  {
    std::lock_guard<std::mutex> lock(built_mutex_);
    built_.push_back(image);
  }
  TESSEL_ASSIGN_OR_RETURN(CudaFunction function, module->function(image.entry));
  return std::shared_ptr<KernelModule>(
      std::make_shared<CudaKernelModule>(this, image.name, std::move(module), function));
}

Status CudaDevice::do_launch(const KernelModule& module, const LaunchGrid& grid,
                             const std::vector<KernelArgument>& args) {
  const auto& m = static_cast<const CudaKernelModule&>(module);
  // gridDim.y and .z stop at 65535. A grid past that is launched folded into x (and y for what x
  // cannot hold): the renderer's kernels unflatten the linear block index (and leave the blocks
  // past the end), so only the block count matters to them. They count blocks in 32 bits.
  const int64_t total = grid.blocks[0] * grid.blocks[1] * grid.blocks[2];
  if (total >= (int64_t{1} << 32))
    return invalid_argument(
        "a grid of {}x{}x{} blocks is more than a CUDA launch can hold (fewer than 2^32 blocks)",
        grid.blocks[0], grid.blocks[1], grid.blocks[2]);
  std::array<int64_t, 3> launch = grid.blocks;
  if (launch[1] > 65535 || launch[2] > 65535) {
    const int64_t x = std::min<int64_t>(total, 2147483647);
    launch = {x, (total + x - 1) / x, 1};
  }
  if (grid.threads_per_block > context_->info().max_threads_per_block)
    return invalid_argument("{} threads per block; {} allows {}", grid.threads_per_block,
                            context_->info().name, context_->info().max_threads_per_block);
  PackedArguments packed;
  for (const KernelArgument& a : args) {
    if (a.kind == KernelArgument::Kind::kBuffer) {
      packed.add(a.buffer.handle ? cuda_address(a.buffer, a.offset) : cuda::CUdeviceptr{0});
    } else {
      packed.add_bytes(a.bytes.data(), a.size);
    }
  }
  return m.function().launch({static_cast<unsigned>(launch[0]), static_cast<unsigned>(launch[1]),
                              static_cast<unsigned>(launch[2])},
                             {static_cast<unsigned>(grid.threads_per_block), 1, 1}, 0, packed);
}

std::vector<KernelImage> CudaDevice::built_images() const {
  std::lock_guard<std::mutex> lock(built_mutex_);
  return built_;
}

void CudaDevice::close() {
  allocator_.empty_cache();
  context_->close();
}

Expected<std::vector<std::unique_ptr<Device>>> enumerate_cuda_devices() {
  TESSEL_ASSIGN_OR_RETURN(std::vector<CudaDeviceInfo> infos, list_cuda_devices());
  std::vector<std::unique_ptr<Device>> devices;
  for (const CudaDeviceInfo& info : infos) {
    TESSEL_ASSIGN_OR_RETURN(std::shared_ptr<CudaContext> context,
                            CudaContext::create(info.ordinal));
    devices.push_back(std::make_unique<CudaDevice>(info.ordinal, std::move(context)));
  }
  for (const auto& d : devices)
    open_devices().push_back(static_cast<CudaDevice*>(d.get()));
  // Registered after the devices exist, so it runs before the static destructors of anything
  // made later (an atexit handler runs in reverse order of registration).
  std::atexit(close_cuda_devices);
  return devices;
}

}  // namespace tessel
