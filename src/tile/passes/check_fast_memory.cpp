// Fast-memory budget per block (see check_fast_memory.h).
#include "tile/passes/check_fast_memory.h"

#include "tile/ir/visitor.h"
#include "tile/passes/place_fragments.h"

namespace tessel::tile {

namespace {
std::string bytes_text(int64_t b) {
  if (b >= (1 << 20) && b % (1 << 20) == 0) return fmt::format("{} MiB", b >> 20);
  if (b >= (1 << 20)) return fmt::format("{:.1f} MiB", b / double(1 << 20));
  if (b >= 1024 && b % 1024 == 0) return fmt::format("{} KiB", b >> 10);
  if (b >= 1024) return fmt::format("{:.1f} KiB", b / 1024.0);
  return fmt::format("{} B", b);
}
}  // namespace

int fast_memory_element_bytes(const BufferNode& b, const Target& target) {
  if (!target.is_gpu() && (b.layout == Layout::kPackedA || b.layout == Layout::kPackedB) &&
      b.dtype == kF16)
    return 4;
  return b.dtype.bytes();
}

Status check_fast_memory(const Kernel& kernel, const Target& target) {
  struct Allocs : IRVisitor {
    std::vector<const Alloc*> list;
    void visit_node(const Alloc* n) override { list.push_back(n); }
  } allocs;
  allocs.visit(kernel.body);

  const BlockThreads block = block_threads(kernel, target);
  // CUDA's limit; an OpenCL device with a lower one refuses the launch and says so.
  constexpr int kMaxBlockThreads = 1024;
  if (target.is_gpu() && block.count > kMaxBlockThreads)
    return error_at(
        kernel.grid()->loc, "a block of {} threads; the {} target allows at most {}",
        block.cols ? fmt::format("{} x {}", block.rows, block.cols) : std::to_string(block.count),
        target.name(), kMaxBlockThreads);
  int64_t total = 0;
  int64_t registers = 0;
  std::string parts;
  for (const Alloc* a : allocs.list) {
    const BufferNode& b = *a->buffer;
    if (b.layout == Layout::kRegisters) {
      std::vector<int64_t> shape;
      for (int d = 0; d < b.rank(); ++d)
        shape.push_back(b.const_dim(d));
      int64_t words = thread_tiling(shape, block).per_thread() * ((b.dtype.bytes() + 3) / 4);
      registers += words;
      if (registers > target.max_fragment_registers)
        return error_at(a->loc,
                        "fragment '{}' {} needs {} registers per thread (fragments so far: {}); "
                        "the {} target allows {} with {} threads per block; use smaller tiles",
                        b.name, fmt::format("[{}]", fmt::join(shape, ", ")), words, registers,
                        target.name(), target.max_fragment_registers, block.count);
      continue;
    }
    int64_t bytes = b.const_elements() * fast_memory_element_bytes(b, target);
    total += bytes;
    parts += fmt::format("{}{} {}", parts.empty() ? "" : ", ", b.name, bytes_text(bytes));
    if (total > target.fast_memory_bytes)
      return resource_exhausted(
          "{}: tile '{}' does not fit: the tiles of one block need {} ({}) but the {} target has "
          "{} of fast memory per block",
          a->loc.to_string(), b.name, bytes_text(total), parts, target.name(),
          bytes_text(target.fast_memory_bytes));
  }
  return ok_status();
}

}  // namespace tessel::tile
