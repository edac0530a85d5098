// Creating, opening, sizing and removing shm segments (segment.h).
#include "dist/shm/segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <new>

namespace tessel::dist::shm {

namespace {

uint64_t round_up(uint64_t value, uint64_t to) {
  return (value + to - 1) / to * to;
}

Expected<uint64_t> env_bytes(const char* name, uint64_t fallback, uint64_t min, uint64_t max) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return fallback;
  char* end = nullptr;
  unsigned long long value = std::strtoull(text, &end, 10);
  if (end == text || *end != '\0' || value < min || value > max)
    return invalid_argument("{}='{}': expected a whole number from {} to {}", name, text, min, max);
  return static_cast<uint64_t>(value);
}

}  // namespace

Expected<Params> params_from_env() {
  Params params;
  TESSEL_ASSIGN_OR_RETURN(params.chunk_bytes, env_bytes("TESSEL_SHM_CHUNK_BYTES",
                                                        params.chunk_bytes, 4096, 1ull << 30));
  TESSEL_ASSIGN_OR_RETURN(uint64_t depth, env_bytes("TESSEL_SHM_DEPTH", params.depth, 2, 64));
  params.depth = static_cast<uint32_t>(depth);
  TESSEL_ASSIGN_OR_RETURN(params.ll_bytes,
                          env_bytes("TESSEL_SHM_LL_BYTES", params.ll_bytes, 0, 16ull << 20));
  TESSEL_ASSIGN_OR_RETURN(params.channel_bytes, env_bytes("TESSEL_SHM_CHANNEL_BYTES",
                                                          params.channel_bytes, 4096, 1ull << 30));
  TESSEL_ASSIGN_OR_RETURN(params.stream_bytes,
                          env_bytes("TESSEL_SHM_STREAM_BYTES", params.stream_bytes, 0, ~0ull));
  params.chunk_bytes = round_up(params.chunk_bytes, 4096);
  params.channel_bytes = round_up(params.channel_bytes, 4096);
  return params;
}

Layout make_layout(int nranks, const Params& params) {
  Layout l;
  l.nranks = static_cast<uint32_t>(nranks);
  l.depth = params.depth;
  l.chunk_bytes = params.chunk_bytes;
  l.ll_bytes = params.ll_bytes;
  l.channel_bytes = params.channel_bytes;
  l.stream_bytes = params.stream_bytes;
  uint64_t offset = round_up(sizeof(Header), 4096);
  l.ranks_offset = offset;
  offset = round_up(offset + nranks * sizeof(RankBlock), 4096);
  l.slots_offset = offset;
  l.slot_stride = round_up(sizeof(SlotHeader) + l.ll_bytes, kLine);
  offset = round_up(offset + nranks * 2 * l.slot_stride, 4096);
  l.staging_offset = offset;
  offset += uint64_t(nranks) * l.depth * l.chunk_bytes;
  l.results_offset = offset;
  offset += uint64_t(nranks) * l.depth * l.chunk_bytes;
  l.channels_offset = offset;
  l.channel_stride = sizeof(ChannelHead) + l.channel_bytes;
  offset += uint64_t(nranks) * nranks * l.channel_stride;
  l.total_bytes = round_up(offset, 4096);
  return l;
}

namespace {

void write_header(unsigned char* base, const Layout& layout) {
  auto* header = new (base) Header{};
  header->magic = kMagic;
  header->version = kVersion;
  header->layout = layout;
}

}  // namespace

Expected<std::shared_ptr<Segment>> Segment::create(const std::string& name, const Layout& layout) {
  int fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) return errno_error(fmt::format("creating shared memory /dev/shm{}", name));
  if (::ftruncate(fd, static_cast<off_t>(layout.total_bytes)) != 0) {
    Status status =
        errno_error(fmt::format("sizing /dev/shm{} to {} bytes", name, layout.total_bytes));
    ::close(fd);
    ::shm_unlink(name.c_str());
    return status;
  }
  void* base = ::mmap(nullptr, layout.total_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (base == MAP_FAILED) {
    Status status = errno_error(fmt::format("mapping /dev/shm{}", name));
    ::shm_unlink(name.c_str());
    return status;
  }
  write_header(static_cast<unsigned char*>(base), layout);
  return std::shared_ptr<Segment>(
      new Segment(static_cast<unsigned char*>(base), layout.total_bytes, name, layout));
}

Expected<std::shared_ptr<Segment>> Segment::open(const std::string& name) {
  int fd = ::shm_open(name.c_str(), O_RDWR, 0600);
  if (fd < 0) return errno_error(fmt::format("opening shared memory /dev/shm{}", name));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) < sizeof(Header)) {
    ::close(fd);
    return io_error("/dev/shm{} is too small to be a tessel segment", name);
  }
  size_t bytes = static_cast<size_t>(st.st_size);
  void* base = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (base == MAP_FAILED) return errno_error(fmt::format("mapping /dev/shm{}", name));
  auto* header = static_cast<Header*>(base);
  if (header->magic != kMagic || header->version != kVersion ||
      header->layout.total_bytes != bytes) {
    ::munmap(base, bytes);
    return failed_precondition("/dev/shm{} is not a tessel segment of version {}", name, kVersion);
  }
  return std::shared_ptr<Segment>(
      new Segment(static_cast<unsigned char*>(base), bytes, name, header->layout));
}

Expected<std::shared_ptr<Segment>> Segment::create_anonymous(const Layout& layout) {
  void* base = ::mmap(nullptr, layout.total_bytes, PROT_READ | PROT_WRITE,
                      MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (base == MAP_FAILED)
    return errno_error(fmt::format("mapping {} bytes of shared memory", layout.total_bytes));
  write_header(static_cast<unsigned char*>(base), layout);
  auto segment = std::shared_ptr<Segment>(
      new Segment(static_cast<unsigned char*>(base), layout.total_bytes, "", layout));
  segment->linked_ = false;
  return segment;
}

Segment::~Segment() {
  ::munmap(base_, bytes_);
}

Status Segment::unlink() {
  if (!linked_) return ok_status();
  linked_ = false;
  if (::shm_unlink(name_.c_str()) != 0 && errno != ENOENT)
    return errno_error(fmt::format("removing /dev/shm{}", name_));
  return ok_status();
}

}  // namespace tessel::dist::shm
