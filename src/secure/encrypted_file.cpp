// Chunked secretstream files (see encrypted_file.h).
#include "secure/encrypted_file.h"

#include <fcntl.h>
#include <sodium.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

namespace tessel::secure {
namespace {

using StreamState = crypto_secretstream_xchacha20poly1305_state;
constexpr size_t kStreamHeaderBytes = crypto_secretstream_xchacha20poly1305_HEADERBYTES;
constexpr size_t kTagBytes = crypto_secretstream_xchacha20poly1305_ABYTES;
// Bytes 0..31 (magic, version, chunk, size, key id): the first chunk's additional data.
constexpr size_t kFieldsBytes = 32;
constexpr size_t kHeaderBytes = kFieldsBytes + kStreamHeaderBytes;
static_assert(kHeaderBytes == 56, "encrypted_file.h documents a 56-byte header");
constexpr uint32_t kMaxChunkBytes = 64u << 20;

void put_le(uint8_t* out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i)
    out[i] = static_cast<uint8_t>(value >> (8 * i));
}
uint64_t get_le(const uint8_t* in, int bytes) {
  uint64_t value = 0;
  for (int i = bytes - 1; i >= 0; --i)
    value = (value << 8) | in[i];
  return value;
}

uint64_t chunk_count(uint64_t plaintext, uint32_t chunk) {
  return std::max<uint64_t>(1, (plaintext + chunk - 1) / chunk);
}

void key_id_bytes(const SecretKey& key, uint8_t out[8]) {
  const std::string hex = key.key_id();
  size_t written = 0;
  sodium_hex2bin(out, 8, hex.data(), hex.size(), nullptr, &written, nullptr);
}

class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  Fd& operator=(Fd&& o) noexcept {
    std::swap(fd_, o.fd_);
    return *this;
  }
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

Status pread_all(int fd, const std::string& path, void* data, size_t size, uint64_t offset) {
  size_t done = 0;
  while (done < size) {
    const ssize_t got = ::pread(fd, static_cast<char*>(data) + done, size - done,
                                static_cast<off_t>(offset + done));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return errno_error(fmt::format("read {} at byte offset {}", path, offset + done));
    if (got == 0)
      return io_error("{}: byte offset {}: the file ended early (truncated while being read?)",
                      path, offset + done);
    done += size_t(got);
  }
  return ok_status();
}

}  // namespace

bool is_encrypted_file(const std::string& path) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return false;
  char magic[sizeof kEncryptedMagic];
  return ::pread(fd.get(), magic, sizeof magic, 0) == ssize_t(sizeof magic) &&
         std::memcmp(magic, kEncryptedMagic, sizeof magic) == 0;
}

// ---- writer

struct EncryptedFileWriter::State {
  explicit State(AtomicFileWriter file) : out(std::move(file)) {}
  AtomicFileWriter out;
  StreamState stream;
  uint32_t chunk = 0;
  uint64_t total = 0, written = 0;
  uint8_t fields[kFieldsBytes];
  bool first = true;
  std::vector<uint8_t> plain, cipher;
  ~State() { sodium_memzero(&stream, sizeof stream); }
};

EncryptedFileWriter::EncryptedFileWriter(std::unique_ptr<State> state) : state_(std::move(state)) {}
EncryptedFileWriter::EncryptedFileWriter(EncryptedFileWriter&&) noexcept = default;
EncryptedFileWriter& EncryptedFileWriter::operator=(EncryptedFileWriter&&) noexcept = default;
EncryptedFileWriter::~EncryptedFileWriter() = default;

Expected<EncryptedFileWriter> EncryptedFileWriter::open(const std::string& path,
                                                        const SecretKey& key,
                                                        uint64_t plaintext_size,
                                                        uint32_t chunk_bytes) {
  TESSEL_TRY(init_sodium());
  TESSEL_CHECK(chunk_bytes > 0 && chunk_bytes <= kMaxChunkBytes, "chunk of {} bytes", chunk_bytes);
  TESSEL_ASSIGN_OR_RETURN(AtomicFileWriter out, AtomicFileWriter::open(path));
  auto s = std::make_unique<State>(std::move(out));
  s->chunk = chunk_bytes;
  s->total = plaintext_size;
  std::memcpy(s->fields, kEncryptedMagic, 8);
  put_le(s->fields + 8, kEncryptedVersion, 4);
  put_le(s->fields + 12, chunk_bytes, 4);
  put_le(s->fields + 16, plaintext_size, 8);
  key_id_bytes(key, s->fields + 24);
  uint8_t stream_header[kStreamHeaderBytes];
  crypto_secretstream_xchacha20poly1305_init_push(&s->stream, stream_header, key.data());
  TESSEL_TRY(s->out.write(s->fields, kFieldsBytes));
  TESSEL_TRY(s->out.write(stream_header, kStreamHeaderBytes));
  s->plain.reserve(chunk_bytes);
  s->cipher.resize(chunk_bytes + kTagBytes);
  return EncryptedFileWriter(std::move(s));
}

Status EncryptedFileWriter::push_chunk() {
  State& s = *state_;
  const uint8_t tag = s.written == s.total ? crypto_secretstream_xchacha20poly1305_TAG_FINAL
                                           : crypto_secretstream_xchacha20poly1305_TAG_MESSAGE;
  unsigned long long length = 0;
  crypto_secretstream_xchacha20poly1305_push(&s.stream, s.cipher.data(), &length, s.plain.data(),
                                             s.plain.size(), s.first ? s.fields : nullptr,
                                             s.first ? kFieldsBytes : 0, tag);
  s.first = false;
  sodium_memzero(s.plain.data(), s.plain.size());
  s.plain.clear();
  return s.out.write(s.cipher.data(), size_t(length));
}

Status EncryptedFileWriter::write(const void* data, size_t size) {
  State& s = *state_;
  if (size > s.total - s.written)
    return failed_precondition("encrypting {}: {} more bytes than the {} announced", s.out.path(),
                               size - (s.total - s.written), s.total);
  const auto* bytes = static_cast<const uint8_t*>(data);
  while (size > 0) {
    const size_t take = std::min<size_t>(size, s.chunk - s.plain.size());
    s.plain.insert(s.plain.end(), bytes, bytes + take);
    bytes += take;
    size -= take;
    s.written += take;
    if (s.plain.size() == s.chunk || s.written == s.total) TESSEL_TRY(push_chunk());
  }
  return ok_status();
}

Status EncryptedFileWriter::commit() {
  State& s = *state_;
  if (s.written != s.total)
    return failed_precondition("encrypting {}: {} bytes written of the {} announced", s.out.path(),
                               s.written, s.total);
  if (s.first) TESSEL_TRY(push_chunk());  // an empty plaintext still gets its FINAL chunk
  return s.out.commit();
}

// ---- reader

struct EncryptedFileReader::State {
  Fd fd;
  std::string path;
  StreamState stream;
  uint8_t fields[kFieldsBytes];
  uint32_t chunk = 0;
  uint64_t total = 0, chunks = 0;
  uint64_t next_chunk = 0;   // index of the chunk pull_chunk reads next
  uint64_t plain_begin = 0;  // plaintext offset of plain[0]
  std::vector<uint8_t> plain, cipher;
  ~State() {
    sodium_memzero(&stream, sizeof stream);
    if (!plain.empty()) sodium_memzero(plain.data(), plain.size());
  }
};

EncryptedFileReader::EncryptedFileReader(std::unique_ptr<State> state) : state_(std::move(state)) {}
EncryptedFileReader::EncryptedFileReader(EncryptedFileReader&&) noexcept = default;
EncryptedFileReader& EncryptedFileReader::operator=(EncryptedFileReader&&) noexcept = default;
EncryptedFileReader::~EncryptedFileReader() = default;

uint64_t EncryptedFileReader::size() const {
  return state_->total;
}
const std::string& EncryptedFileReader::path() const {
  return state_->path;
}

Expected<EncryptedFileReader> EncryptedFileReader::open(const std::string& path,
                                                        const SecretKey& key) {
  TESSEL_TRY(init_sodium());
  auto s = std::make_unique<State>();
  s->path = path;
  s->fd = Fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (s->fd.get() < 0) return errno_error("open encrypted file " + path);
  struct stat st;
  if (::fstat(s->fd.get(), &st) != 0) return errno_error("stat " + path);
  const auto file_size = uint64_t(st.st_size);
  if (file_size < kHeaderBytes)
    return invalid_argument(
        "{}: the file has {} bytes, fewer than the {}-byte header of an encrypted file "
        "(truncated, or not encrypted)",
        path, file_size, kHeaderBytes);
  uint8_t header[kHeaderBytes];
  TESSEL_TRY(pread_all(s->fd.get(), path, header, kHeaderBytes, 0));
  std::memcpy(s->fields, header, kFieldsBytes);
  if (std::memcmp(header, kEncryptedMagic, 8) != 0)
    return invalid_argument("{}: byte offset 0: not an encrypted tessel file (no TSLCRYPT magic)",
                            path);
  if (const uint64_t version = get_le(header + 8, 4); version != kEncryptedVersion)
    return invalid_argument("{}: byte offset 8: format version {}, this tessel reads version {}",
                            path, version, kEncryptedVersion);
  s->chunk = uint32_t(get_le(header + 12, 4));
  s->total = get_le(header + 16, 8);
  if (s->chunk == 0 || s->chunk > kMaxChunkBytes || s->total > (uint64_t(1) << 56))
    return invalid_argument("{}: byte offset 12: chunk size {} or plaintext size {} is impossible",
                            path, s->chunk, s->total);
  s->chunks = chunk_count(s->total, s->chunk);
  const uint64_t expected = kHeaderBytes + s->total + s->chunks * kTagBytes;
  if (file_size != expected)
    return invalid_argument(
        "{}: the file has {} bytes, but its header promises {} ({} plaintext bytes in {} chunks): "
        "{}",
        path, file_size, expected, s->total, s->chunks,
        file_size < expected ? "truncated" : "bytes were appended or the header was altered");
  uint8_t id[8];
  key_id_bytes(key, id);
  if (std::memcmp(id, header + 24, 8) != 0) {
    char file_id[17];
    sodium_bin2hex(file_id, sizeof file_id, header + 24, 8);
    return invalid_argument(
        "{}: byte offset 24: wrong key: the file was encrypted with key id {}, the key given has "
        "id {}",
        path, file_id, key.key_id());
  }
  if (crypto_secretstream_xchacha20poly1305_init_pull(&s->stream, header + kFieldsBytes,
                                                      key.data()) != 0)
    return invalid_argument("{}: byte offset {}: the stream header is invalid", path, kFieldsBytes);
  s->plain.resize(s->chunk);
  s->cipher.resize(size_t(s->chunk) + kTagBytes);
  s->plain.clear();
  EncryptedFileReader reader(std::move(s));
  TESSEL_TRY(reader.pull_chunk());
  return reader;
}

Status EncryptedFileReader::pull_chunk() {
  State& s = *state_;
  if (s.next_chunk >= s.chunks)
    return out_of_range("{}: read past the last of {} chunks", s.path, s.chunks);
  const uint64_t begin = s.next_chunk * s.chunk;
  const size_t length = size_t(std::min<uint64_t>(s.chunk, s.total - begin));
  const uint64_t file_offset = kHeaderBytes + begin + s.next_chunk * kTagBytes;
  TESSEL_TRY(pread_all(s.fd.get(), s.path, s.cipher.data(), length + kTagBytes, file_offset));
  s.plain.resize(length);
  unsigned long long got = 0;
  unsigned char tag = 0;
  const bool first = s.next_chunk == 0;
  if (crypto_secretstream_xchacha20poly1305_pull(
          &s.stream, s.plain.data(), &got, &tag, s.cipher.data(), length + kTagBytes,
          first ? s.fields : nullptr, first ? kFieldsBytes : 0) != 0 ||
      got != length) {
    s.plain.clear();
    return invalid_argument(
        "{}: byte offset {}: chunk {} of {} failed authentication: the file was altered or "
        "damaged{}",
        s.path, file_offset, s.next_chunk, s.chunks,
        first ? " (or its header was, which the first chunk authenticates)" : "");
  }
  const bool last = s.next_chunk + 1 == s.chunks;
  if (last != (tag == crypto_secretstream_xchacha20poly1305_TAG_FINAL)) {
    s.plain.clear();
    return invalid_argument("{}: byte offset {}: chunk {} of {} is {}marked as the last one",
                            s.path, file_offset, s.next_chunk, s.chunks, last ? "not " : "");
  }
  s.plain_begin = begin;
  ++s.next_chunk;
  return ok_status();
}

Status EncryptedFileReader::read_at(void* data, size_t size, uint64_t offset) {
  State& s = *state_;
  if (offset < s.plain_begin)
    return failed_precondition(
        "{}: plaintext offset {} is behind the stream (at {}): encrypted files read forward only",
        s.path, offset, s.plain_begin);
  if (size > s.total || offset > s.total - size)
    return out_of_range("{}: plaintext bytes {}..{} run past its end ({} bytes)", s.path, offset,
                        offset + size, s.total);
  auto* out = static_cast<uint8_t*>(data);
  while (size > 0) {
    while (offset >= s.plain_begin + s.plain.size())
      TESSEL_TRY(pull_chunk());
    const size_t at = size_t(offset - s.plain_begin);
    const size_t take = std::min(size, s.plain.size() - at);
    std::memcpy(out, s.plain.data() + at, take);
    out += take;
    offset += take;
    size -= take;
  }
  return ok_status();
}

Status EncryptedFileReader::finish() {
  while (state_->next_chunk < state_->chunks)
    TESSEL_TRY(pull_chunk());
  return ok_status();
}

// ---- whole files

Status encrypt_file(const std::string& in, const std::string& out, const SecretKey& key) {
  Fd fd(::open(in.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return errno_error("open " + in);
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return errno_error("stat " + in);
  const auto size = uint64_t(st.st_size);
  TESSEL_ASSIGN_OR_RETURN(EncryptedFileWriter writer, EncryptedFileWriter::open(out, key, size));
  std::vector<uint8_t> buffer(kDefaultChunkBytes);
  for (uint64_t at = 0; at < size;) {
    const size_t take = size_t(std::min<uint64_t>(buffer.size(), size - at));
    TESSEL_TRY(pread_all(fd.get(), in, buffer.data(), take, at));
    TESSEL_TRY(writer.write(buffer.data(), take));
    at += take;
  }
  sodium_memzero(buffer.data(), buffer.size());
  return writer.commit();
}

Status decrypt_file(const std::string& in, const std::string& out, const SecretKey& key) {
  TESSEL_ASSIGN_OR_RETURN(EncryptedFileReader reader, EncryptedFileReader::open(in, key));
  TESSEL_ASSIGN_OR_RETURN(AtomicFileWriter writer, AtomicFileWriter::open(out));
  std::vector<uint8_t> buffer(kDefaultChunkBytes);
  for (uint64_t at = 0; at < reader.size();) {
    const size_t take = size_t(std::min<uint64_t>(buffer.size(), reader.size() - at));
    TESSEL_TRY(reader.read_at(buffer.data(), take, at));
    TESSEL_TRY(writer.write(buffer.data(), take));
    at += take;
  }
  sodium_memzero(buffer.data(), buffer.size());
  TESSEL_TRY(reader.finish());
  return writer.commit();  // only now does a plaintext file appear
}

Expected<uint64_t> verify_file(const std::string& path, const SecretKey& key) {
  TESSEL_ASSIGN_OR_RETURN(EncryptedFileReader reader, EncryptedFileReader::open(path, key));
  TESSEL_TRY(reader.finish());
  return reader.size();
}

}  // namespace tessel::secure
