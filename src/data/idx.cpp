// idx reader over zlib's gz* functions, which read plain files transparently.
#include "data/idx.h"

#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

namespace tessel {
namespace {

// Sequential reads from a plain or gzip file, counting the bytes delivered so that every error
// can say where in the (decompressed) stream it happened.
class IdxStream {
 public:
  static Expected<IdxStream> open(const std::string& path) {
    errno = 0;
    gzFile file = gzopen(path.c_str(), "rb");
    if (file == nullptr) {
      if (errno != 0) return errno_error("open idx file " + path);
      return io_error("open idx file {}: zlib could not allocate its state", path);
    }
    gzbuffer(file, 1 << 20);
    return IdxStream(path, file);
  }
  IdxStream(IdxStream&& other) noexcept
      : path_(std::move(other.path_)),
        file_(std::exchange(other.file_, nullptr)),
        offset_(other.offset_) {}
  IdxStream& operator=(IdxStream&&) = delete;
  ~IdxStream() {
    if (file_ != nullptr) gzclose(file_);
  }

  // Reads exactly `size` bytes; fewer is an error that says what was expected at the offset.
  Status read_exact(void* data, size_t size, const std::string& what) {
    const size_t start = offset_;
    size_t done = 0;
    while (done < size) {
      const auto chunk = static_cast<unsigned>(std::min<size_t>(size - done, 1u << 30));
      const int got = gzread(file_, static_cast<char*>(data) + done, chunk);
      if (got < 0) return stream_error();
      if (got == 0) break;
      done += static_cast<size_t>(got);
      offset_ += static_cast<size_t>(got);
    }
    if (done < size) {
      // A gzip stream cut short reports its own error once the data runs out.
      int code = Z_OK;
      gzerror(file_, &code);
      const std::string why = code != Z_OK ? " (" + std::string(gzerror(file_, &code)) + ")" : "";
      return invalid_argument(
          "{}: byte offset {}{}: expected {} ({} bytes), but the file ends after {}{}", path_,
          start, where(), what, size, done, why);
    }
    return ok_status();
  }

  // Whether the stream has more bytes (it should not, after the data).
  Expected<bool> has_more() {
    unsigned char byte;
    const int got = gzread(file_, &byte, 1);
    if (got < 0) return stream_error();
    return got > 0;
  }

  // " of the decompressed data" for gzip files, "" for plain ones.
  std::string where() const { return gzdirect(file_) ? "" : " of the decompressed data"; }
  size_t offset() const { return offset_; }

  // Before allocating for what a header promises: whether the rest of the file can hold
  // `bytes`. A plain file knows its length; a gzip file decompresses to at most ~1032 times its
  // size (deflate's limit), so a header asking for more is refused without trying.
  Status check_room(uint64_t bytes, const std::string& what) const {
    struct stat st;
    if (::stat(path_.c_str(), &st) != 0) return errno_error("stat " + path_);
    const auto size = static_cast<uint64_t>(st.st_size);
    if (gzdirect(file_)) {
      const uint64_t left = size > offset_ ? size - offset_ : 0;
      if (bytes > left)
        return invalid_argument(
            "{}: byte offset {}: expected {} ({} bytes), but the file ends after {}", path_,
            offset_, what, bytes, left);
      return ok_status();
    }
    constexpr uint64_t kMaxDeflateRatio = 1032;
    if (bytes / kMaxDeflateRatio > size)
      return invalid_argument(
          "{}: byte offset {}{}: the header promises {} ({} bytes), more than a "
          "gzip file of {} bytes can hold",
          path_, offset_, where(), what, bytes, size);
    return ok_status();
  }
  const std::string& path() const { return path_; }

 private:
  IdxStream(std::string path, gzFile file) : path_(std::move(path)), file_(file) {}
  Status stream_error() {
    int code = Z_OK;
    const char* message = gzerror(file_, &code);
    if (code == Z_ERRNO)
      return errno_error(path_ + ": read at byte offset " + std::to_string(offset_));
    if (code == Z_MEM_ERROR)  // zlib's own buffers: the file may well be fine
      return resource_exhausted("{}: out of memory for zlib's buffers while decompressing", path_);
    return invalid_argument(
        "{}: corrupt gzip stream near byte offset {} of the decompressed data: {}", path_, offset_,
        message);
  }

  std::string path_;
  gzFile file_ = nullptr;
  size_t offset_ = 0;
};

struct IdxType {
  unsigned char code;
  const char* name;
  size_t file_size;  // bytes per element in the file
  DType dtype;       // what the tensor holds
};

constexpr IdxType kIdxTypes[] = {
    {0x08, "unsigned byte", 1, DType::kU8}, {0x09, "signed byte", 1, DType::kI8},
    {0x0B, "short", 2, DType::kI32},        {0x0C, "int", 4, DType::kI32},
    {0x0D, "float", 4, DType::kF32},        {0x0E, "double", 8, DType::kF64},
};

uint32_t big_endian_u32(const unsigned char* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

// Big-endian elements of `size` bytes, in place, to host order (this code assumes a
// little-endian host, as every target tessel builds for is).
void swap_to_host(unsigned char* data, size_t count, size_t size) {
  if (size == 1) return;
  for (size_t i = 0; i < count; ++i)
    std::reverse(data + i * size, data + (i + 1) * size);
}

}  // namespace

Expected<Tensor> read_idx(const std::string& path) {
  TESSEL_ASSIGN_OR_RETURN(IdxStream in, IdxStream::open(path));
  unsigned char magic[4];
  TESSEL_TRY(in.read_exact(magic, 4, "the idx magic number (0x00 0x00 <type> <rank>)"));
  if (magic[0] != 0 || magic[1] != 0) {
    return invalid_argument(
        "{}: byte offset 0{}: expected the idx magic number, which starts with two zero bytes, "
        "found 0x{:02x} 0x{:02x} (not an idx file)",
        path, in.where(), magic[0], magic[1]);
  }
  const IdxType* type = nullptr;
  for (const IdxType& t : kIdxTypes)
    if (t.code == magic[2]) type = &t;
  if (type == nullptr) {
    return invalid_argument(
        "{}: byte offset 2{}: expected an idx element type (0x08, 0x09, 0x0B, 0x0C, 0x0D or "
        "0x0E), found 0x{:02x}",
        path, in.where(), magic[2]);
  }
  const int rank = magic[3];
  if (rank == 0) {
    return invalid_argument("{}: byte offset 3{}: expected a rank of at least 1, found 0", path,
                            in.where());
  }
  std::vector<unsigned char> dim_bytes(4 * static_cast<size_t>(rank));
  TESSEL_TRY(in.read_exact(dim_bytes.data(), dim_bytes.size(),
                           fmt::format("{} big-endian u32 dimension sizes", rank)));
  Shape shape(static_cast<size_t>(rank));
  for (int d = 0; d < rank; ++d)
    shape[d] = big_endian_u32(&dim_bytes[4 * d]);
  if (Status s = check_shape(shape, type->file_size); !s.ok())
    return s.with_context("{}: dimensions at byte offset 4", path);

  const auto count = static_cast<size_t>(shape_numel(shape));
  const std::string what = fmt::format("{} elements of type {} for dimensions {}", count,
                                       type->name, shape_string(shape));
  TESSEL_TRY(in.check_room(uint64_t(count) * type->file_size, what));
  TESSEL_ASSIGN_OR_RETURN(Tensor tensor, Tensor::empty(shape, type->dtype));
  auto* out = static_cast<unsigned char*>(tensor.storage()->host_address());
  if (type->code == 0x0B) {  // i16 in the file, i32 in the tensor
    std::vector<unsigned char> raw(count * 2);
    TESSEL_TRY(in.read_exact(raw.data(), raw.size(), what));
    auto* values = reinterpret_cast<int32_t*>(out);
    for (size_t i = 0; i < count; ++i)
      values[i] = static_cast<int16_t>((uint16_t{raw[2 * i]} << 8) | raw[2 * i + 1]);
  } else {
    TESSEL_TRY(in.read_exact(out, count * type->file_size, what));
    swap_to_host(out, count, type->file_size);
  }
  const size_t end = in.offset();
  TESSEL_ASSIGN_OR_RETURN(bool more, in.has_more());
  if (more) {
    return invalid_argument(
        "{}: byte offset {}{}: expected the end of the file after {}, found more bytes", path, end,
        in.where(), what);
  }
  return tensor;
}

}  // namespace tessel
