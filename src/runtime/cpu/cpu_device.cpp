// CPU device: aligned host allocation under the caching allocator, memcpy copies, kernels from
// the ahead-of-time library or the JIT run on the thread pool, and the registration that makes
// get_device("cpu") work.
#include "runtime/cpu/cpu_device.h"

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>

#include "hw/cpu_info.h"
#include "support/thread_pool.h"
#include "tile/run/cpu_aot.h"
#include "tile/run/cpu_jit.h"

namespace tessel {
namespace {

// Blocks of at least kHugeBlockBytes are aligned to 2 MiB and asked to be backed by transparent
// huge pages, where the kernel offers them only on request (THP "madvise", a common default).
// Kernels that visit scattered rows of a large table (an embedding's lookup and its lazy
// optimizer, 1.5 KiB rows of 77 MB tables) otherwise miss the TLB on nearly every row; with 2 MiB
// pages a 300 MB working set needs 150 TLB entries. Smaller blocks keep 4 KiB pages and 64-byte
// alignment.
constexpr size_t kHugePage = CpuDevice::kHugePageBytes;
constexpr size_t kHugeBlock = CpuDevice::kHugeBlockBytes;

Expected<DeviceBuffer> allocate_host(size_t bytes) {
  // Block sizes from the caching allocator are multiples of 64, as aligned_alloc requires.
  const bool huge = bytes >= kHugeBlock;
  const size_t alignment = huge ? kHugePage : CpuDevice::kAlignment;
  const size_t rounded = huge ? (bytes + kHugePage - 1) / kHugePage * kHugePage : bytes;
  void* p = std::aligned_alloc(alignment, rounded);
  if (p == nullptr)
    return resource_exhausted("host memory: aligned_alloc of {} bytes failed", bytes);
  // Advice only: where THP is off, or the call fails, the block keeps 4 KiB pages.
  if (huge) (void)::madvise(p, rounded, MADV_HUGEPAGE);
  return DeviceBuffer{p, bytes};
}

void free_host(DeviceBuffer buffer) {
  std::free(buffer.handle);
}

std::string cpu_name() {
  const std::string& model = host_cpu_info().model;
  return model.empty() ? "host CPU" : model;
}

// A loaded kernel and the shared workspace its blocks use. The CPU kernel ABI (tile/codegen/abi.h,
// tile/codegen/cpu/abi.h): one 8-byte slot per parameter, the entry point runs a range of
// blocks and returns 0 or the bytes of tile memory it failed to allocate; a kernel whose blocks
// share packed tiles also exports <entry>_workspace (bytes it needs, from the slots) and
// <entry>_prepare (fills it), and takes the workspace as a last slot.
class CpuModule final : public KernelModule {
 public:
  CpuModule(const Device* device, std::string name, tile::CpuModule module)
      : KernelModule(device, std::move(name)), module_(std::move(module)) {
    const std::string& entry = module_.entry_name;
    workspace_size_ =
        reinterpret_cast<WorkspaceSize>(tile::module_symbol(module_, entry + "_workspace"));
    workspace_prepare_ =
        reinterpret_cast<WorkspacePrepare>(tile::module_symbol(module_, entry + "_prepare"));
  }
  ~CpuModule() override { std::free(workspace_); }
  bool ahead_of_time() const override { return module_.ahead_of_time; }

  Status run(std::vector<tessel_cpu::Arg>& slots, int64_t blocks) const {
    std::unique_lock<std::mutex> lock;
    if (workspace_size_) {
      lock = std::unique_lock<std::mutex>(workspace_mutex_);
      const int64_t bytes = workspace_size_(slots.data());
      if (bytes > workspace_bytes_) {
        std::free(workspace_);
        workspace_bytes_ = 0;
        workspace_ = std::aligned_alloc(64, (static_cast<size_t>(bytes) + 63) / 64 * 64);
        if (!workspace_)
          return resource_exhausted("no memory for a {}-byte kernel workspace", bytes);
        workspace_bytes_ = bytes;
      }
      workspace_prepare_(slots.data(), workspace_);
      tessel_cpu::Arg ws;
      ws.ptr = workspace_;
      slots.push_back(ws);
    }
    const tessel_cpu::Arg* args = slots.data();
    tessel_cpu::KernelEntry entry = module_.entry;
    // A thread that cannot allocate its tile memory runs none of its blocks and says how many
    // bytes it asked for; once one has, the rest skip theirs too (the launch has failed anyway).
    // Device::launch puts the kernel's name and the device before the message.
    std::atomic<int64_t> unallocated{0};
    // One block per chunk: blocks are big, and uneven ones (ragged edges) balance that way; a
    // gemm's schedule (tile_gemm_schedule.h) counts on blocks going out one at a time. Only a
    // grid of very many blocks (element-wise kernels) is cut into coarser chunks, still at least
    // kBlockChunksPerThread per thread, so that a claim stays cheap next to its chunk.
    // parallel_for's default of four chunks per thread gave a thread 3 blocks at a time at
    // 2048x384x384 (22 blocks) and 9 at 2048x1536x384, and the last chunk ran alone.
    constexpr int64_t kBlockChunksPerThread = 64;
    ThreadPool& pool = ThreadPool::global();
    const int64_t chunk =
        std::max<int64_t>(1, blocks / (pool.num_threads() * kBlockChunksPerThread));
    pool.parallel_for_chunks(blocks, chunk, [&](int64_t begin, int64_t end) {
      if (unallocated.load(std::memory_order_relaxed) != 0) return;
      if (const int64_t bytes = entry(args, begin, end); bytes != 0)
        unallocated.store(bytes, std::memory_order_relaxed);
    });
    if (const int64_t bytes = unallocated.load(); bytes != 0)
      return resource_exhausted("host memory: could not allocate {} bytes of tile memory", bytes);
    return ok_status();
  }

 private:
  using WorkspaceSize = int64_t (*)(const tessel_cpu::Arg*);
  using WorkspacePrepare = void (*)(const tessel_cpu::Arg*, void*);
  tile::CpuModule module_;
  WorkspaceSize workspace_size_ = nullptr;
  WorkspacePrepare workspace_prepare_ = nullptr;
  mutable std::mutex workspace_mutex_;  // one launch at a time uses the workspace
  mutable void* workspace_ = nullptr;
  mutable int64_t workspace_bytes_ = 0;
};

// Nothing is ever queued on the CPU: every event has happened.
class DoneEvent final : public Event {
 public:
  Status wait() const override { return ok_status(); }
};

[[maybe_unused]] const bool kRegistered = register_backend(DeviceKind::kCpu, [] {
  std::vector<std::unique_ptr<Device>> devices;
  devices.push_back(std::make_unique<CpuDevice>());
  return Expected<std::vector<std::unique_ptr<Device>>>(std::move(devices));
});

}  // namespace

CpuDevice::CpuDevice(size_t max_cached_bytes)
    : Device(DeviceKind::kCpu, 0, cpu_name()),
      allocator_("cpu", RawAllocator{allocate_host, free_host}, max_cached_bytes) {}

size_t CpuDevice::default_cache_limit() {
  const int64_t memory = host_cpu_info().memory_bytes;
  return memory > 0 ? static_cast<size_t>(memory / 4) : CachingAllocator::kUnlimited;
}

DeviceLimits CpuDevice::limits() const {
  const CpuInfo& cpu = host_cpu_info();
  DeviceLimits l;
  l.memory_bytes = cpu.memory_bytes;
  l.fast_memory_bytes = cpu.caches.l2_bytes > 0 ? cpu.caches.l2_bytes : 1 << 20;
  l.max_threads_per_block = 1;
  l.compute_units = std::max(1, cpu.topology.usable_cores);
  l.f64 = true;
  return l;
}

Expected<std::shared_ptr<Event>> CpuDevice::record_event() {
  return std::shared_ptr<Event>(std::make_shared<DoneEvent>());
}

Expected<std::shared_ptr<KernelModule>> CpuDevice::do_build(const KernelImage& image) {
  tile::CpuIsa isa = tile::host_cpu_isa();
  if (!image.options.empty()) {
    TESSEL_ASSIGN_OR_RETURN(isa, tile::cpu_isa_named(image.options));
  }
  Expected<tile::CpuModule> module = tile::aot_cpu_module(image.code, isa);
  if (!module) {
    tile::CpuJitOptions jit;
    jit.isa = isa;
    module = tile::jit_compile_cpu(image.code, image.entry, jit);
  }
  if (!module) return module.status();
  return std::shared_ptr<KernelModule>(
      std::make_shared<CpuModule>(this, image.name, std::move(*module)));
}

Status CpuDevice::do_launch(const KernelModule& module, const LaunchGrid& grid,
                            const std::vector<KernelArgument>& args) {
  std::vector<tessel_cpu::Arg> slots(args.size());
  for (size_t i = 0; i < args.size(); ++i) {
    const KernelArgument& a = args[i];
    if (a.kind == KernelArgument::Kind::kBuffer) {
      slots[i].ptr = a.buffer.handle ? static_cast<char*>(a.buffer.handle) + a.offset : nullptr;
    } else {
      std::memcpy(&slots[i], a.bytes.data(), a.size);
    }
  }
  return static_cast<const CpuModule&>(module).run(
      slots, grid.blocks[0] * grid.blocks[1] * grid.blocks[2]);
}

Status CpuDevice::do_copy_from_host(DeviceBuffer dst, size_t dst_offset, const void* src,
                                    size_t bytes) {
  std::memcpy(static_cast<char*>(dst.handle) + dst_offset, src, bytes);
  return ok_status();
}

Status CpuDevice::do_copy_to_host(void* dst, DeviceBuffer src, size_t src_offset, size_t bytes) {
  std::memcpy(dst, static_cast<const char*>(src.handle) + src_offset, bytes);
  return ok_status();
}

Status CpuDevice::do_copy_on_device(DeviceBuffer dst, size_t dst_offset, DeviceBuffer src,
                                    size_t src_offset, size_t bytes) {
  std::memcpy(static_cast<char*>(dst.handle) + dst_offset,
              static_cast<const char*>(src.handle) + src_offset, bytes);
  return ok_status();
}

}  // namespace tessel
