// safetensors writer and validating reader.
#include "io/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <tuple>
#include <vector>

#include "secure/encrypted_file.h"
#include "support/atomic_file.h"
#include "support/hash.h"

namespace tessel {
namespace {

// The reference implementation refuses headers above 100 MB; so does this reader.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

struct DTypeName {
  DType dtype;
  const char* name;
};
constexpr DTypeName kDTypeNames[] = {
    {DType::kF64, "F64"}, {DType::kF32, "F32"},   {DType::kF16, "F16"}, {DType::kBF16, "BF16"},
    {DType::kI64, "I64"}, {DType::kI32, "I32"},   {DType::kI16, "I16"}, {DType::kI8, "I8"},
    {DType::kU8, "U8"},   {DType::kBool, "BOOL"},
};
// Integrity: "__metadata__" carries an XXH64 of every tensor's bytes and one of the header text
// itself, taken with its own 16 hex digits written as zeros (the value sits inside what it
// covers). Other tools ignore these strings; this reader checks them whenever they are present.
constexpr std::string_view kTensorHashPrefix = "tessel.xxh64.";
constexpr std::string_view kHeaderHashKey = "tessel.header_xxh64";
constexpr std::string_view kHashPlaceholder = "0000000000000000";

// Where the header hash's 16 digits start in the header text, or npos when the key is absent;
// an error when it appears more than once or its value is not 16 hex digits.
Expected<size_t> find_header_hash(const std::string& path, const std::string& text) {
  const std::string pattern = fmt::format("\"{}\":\"", kHeaderHashKey);
  const size_t at = text.find(pattern);
  if (at == std::string::npos) return std::string::npos;
  if (text.find(pattern, at + 1) != std::string::npos)
    return invalid_argument("{}: header (byte offset {}): '{}' appears twice", path, 8 + at,
                            kHeaderHashKey);
  const size_t digits = at + pattern.size();
  bool hex = digits + 17 <= text.size() && text[digits + 16] == '"';
  for (size_t i = digits; hex && i < digits + 16; ++i)
    hex = (text[i] >= '0' && text[i] <= '9') || (text[i] >= 'a' && text[i] <= 'f');
  if (!hex)
    return invalid_argument("{}: header (byte offset {}): '{}' must be 16 hex digits", path,
                            8 + digits, kHeaderHashKey);
  return digits;
}

uint64_t header_hash(std::string text, size_t digits) {
  text.replace(digits, kHashPlaceholder.size(), kHashPlaceholder);
  return hash_text(text);
}

// Types of the format that tessel has no dtype for.
constexpr const char* kUnsupported[] = {
    "I16", "U16", "U32", "U64", "F8_E4M3", "F8_E5M2", "F8_E8M0", "F6_E2M3", "F6_E3M2", "F4", "C64"};

class ReadFile {
 public:
  explicit ReadFile(int fd) : fd_(fd) {}
  ~ReadFile() {
    if (fd_ >= 0) ::close(fd_);
  }
  ReadFile(const ReadFile&) = delete;
  ReadFile& operator=(const ReadFile&) = delete;
  int fd() const { return fd_; }

 private:
  int fd_;
};

Status read_at(int fd, const std::string& path, void* data, size_t size, uint64_t offset) {
  size_t done = 0;
  while (done < size) {
    const ssize_t got = ::pread(fd, static_cast<char*>(data) + done, size - done,
                                static_cast<off_t>(offset + done));
    if (got < 0) {
      if (errno == EINTR) continue;
      return errno_error(fmt::format("read {} at byte offset {}", path, offset + done));
    }
    if (got == 0) {
      return io_error("{}: byte offset {}: the file ended while reading {} bytes (did it shrink?)",
                      path, offset + done, size);
    }
    done += static_cast<size_t>(got);
  }
  return ok_status();
}

struct Entry {
  std::string name;
  DType dtype;
  Shape shape;
  uint64_t begin, end;  // in the data buffer
};

Expected<Entry> parse_entry(const std::string& path, const std::string& name,
                            const nlohmann::json& info) {
  const auto bad = [&](const std::string& what) {
    return invalid_argument("{}: header (byte offset 8), tensor '{}': {}", path, name, what);
  };
  if (!info.is_object()) return bad("expected an object with dtype, shape and data_offsets");
  for (const char* key : {"dtype", "shape", "data_offsets"})
    if (!info.contains(key)) return bad(fmt::format("expected a '{}' entry", key));
  if (!info["dtype"].is_string()) return bad("expected 'dtype' to be a string");
  const std::string dtype = info["dtype"].get<std::string>();
  Entry entry{name, DType::kF32, {}, 0, 0};
  bool known = false;
  for (const DTypeName& d : kDTypeNames) {
    if (dtype == d.name) {
      entry.dtype = d.dtype;
      known = true;
    }
  }
  if (!known) {
    for (const char* other : kUnsupported) {
      if (dtype == other) {
        return unimplemented("{}: tensor '{}' has dtype {}, which tessel does not support", path,
                             name, dtype);
      }
    }
    return bad(
        fmt::format("unknown dtype '{}' (expected F64, F32, F16, BF16, I64, I32, I8, U8 or "
                    "BOOL)",
                    dtype));
  }
  const nlohmann::json& shape = info["shape"];
  if (!shape.is_array()) return bad("expected 'shape' to be an array of sizes");
  for (const nlohmann::json& size : shape) {
    if (!size.is_number_unsigned()) return bad("expected 'shape' to hold non-negative integers");
    entry.shape.push_back(static_cast<int64_t>(size.get<uint64_t>()));
  }
  if (Status s = check_shape(entry.shape, dtype_size(entry.dtype)); !s.ok())
    return bad(s.message());
  const nlohmann::json& offsets = info["data_offsets"];
  if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
      !offsets[1].is_number_unsigned())
    return bad("expected 'data_offsets' to be [begin, end], two non-negative integers");
  entry.begin = offsets[0].get<uint64_t>();
  entry.end = offsets[1].get<uint64_t>();
  if (entry.end < entry.begin)
    return bad(fmt::format("data_offsets [{}, {}] end before they begin", entry.begin, entry.end));
  const uint64_t expected =
      static_cast<uint64_t>(shape_numel(entry.shape)) * dtype_size(entry.dtype);
  if (entry.end - entry.begin != expected) {
    return bad(fmt::format("data_offsets [{}, {}] span {} bytes, but {} {} needs {}", entry.begin,
                           entry.end, entry.end - entry.begin, dtype, shape_string(entry.shape),
                           expected));
  }
  return entry;
}

// Moves the checksum entries out of `metadata` into `hashes`. A file with a header checksum was
// written by tessel, so each of its tensors must have one; a checksum of no tensor is an error.
Status take_checksums(const std::string& path, bool checksummed, const std::vector<Entry>& entries,
                      StringMap& metadata, std::map<std::string, std::string>* hashes) {
  metadata.erase(std::string(kHeaderHashKey));
  for (auto it = metadata.begin(); it != metadata.end();) {
    if (!it->first.starts_with(kTensorHashPrefix)) {
      ++it;
      continue;
    }
    (*hashes)[it->first.substr(kTensorHashPrefix.size())] = it->second;
    it = metadata.erase(it);
  }
  std::map<std::string, const Entry*> by_name;
  for (const Entry& e : entries)
    by_name[e.name] = &e;
  for (const auto& [name, hash] : *hashes)
    if (!by_name.contains(name))
      return invalid_argument(
          "{}: header (byte offset 8): a checksum for tensor '{}', which the file "
          "does not hold",
          path, name);
  if (checksummed)
    for (const Entry& e : entries)
      if (!hashes->contains(e.name))
        return invalid_argument("{}: header (byte offset 8): tensor '{}' has no checksum", path,
                                e.name);
  return ok_status();
}

}  // namespace

const char* safetensors_dtype_name(DType dtype) {
  for (const DTypeName& d : kDTypeNames)
    if (d.dtype == dtype) return d.name;
  TESSEL_CHECK(false, "dtype {} has no safetensors name", dtype_name(dtype));
  return "";
}

Status save_safetensors(const std::string& path, const NamedTensors& tensors,
                        const StringMap& metadata, const secure::SecretKey* key) {
  struct Item {
    const std::string* name;
    Tensor host;  // contiguous, on the CPU
  };
  std::vector<Item> items;
  for (const auto& [name, tensor] : tensors) {
    if (name.empty() || name == "__metadata__")
      return invalid_argument("save {}: '{}' cannot name a tensor", path, name);
    if (!tensor.defined()) return invalid_argument("save {}: tensor '{}' is undefined", path, name);
    Expected<Tensor> host = tensor.to(cpu_device());
    if (host.ok()) host = host->contiguous();
    if (!host.ok()) return host.status().with_context("save {}: tensor '{}'", path, name);
    items.push_back({&name, std::move(*host)});
  }
  // Largest elements first: with an 8-aligned data buffer every tensor starts aligned.
  std::stable_sort(items.begin(), items.end(), [](const Item& a, const Item& b) {
    return a.host.element_size() > b.host.element_size();
  });

  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  nlohmann::ordered_json meta = nlohmann::ordered_json::object();
  for (const auto& [key, value] : metadata) {
    if (key.starts_with(kTensorHashPrefix) || key == kHeaderHashKey)
      return invalid_argument("save {}: metadata key '{}' is reserved for checksums", path, key);
    meta[key] = value;
  }
  for (const Item& item : items)
    meta[std::string(kTensorHashPrefix) + *item.name] =
        hash_hex(hash_bytes(static_cast<const unsigned char*>(item.host.storage()->host_address()) +
                                item.host.offset_bytes(),
                            item.host.nbytes()));
  meta[std::string(kHeaderHashKey)] = std::string(kHashPlaceholder);
  header["__metadata__"] = std::move(meta);
  uint64_t offset = 0;
  for (const Item& item : items) {
    const uint64_t size = item.host.nbytes();
    header[*item.name] = {{"dtype", safetensors_dtype_name(item.host.dtype())},
                          {"shape", item.host.shape()},
                          {"data_offsets", {offset, offset + size}}};
    offset += size;
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::json::exception& e) {  // a name or value that is not UTF-8
    return invalid_argument("save {}: a tensor name or metadata string is not valid UTF-8 ({})",
                            path, e.what());
  }
  text.append((8 - text.size() % 8) % 8, ' ');
  TESSEL_ASSIGN_OR_RETURN(size_t digits, find_header_hash(path, text));
  TESSEL_CHECK(digits != std::string::npos, "the header hash placeholder is missing");
  text.replace(digits, kHashPlaceholder.size(), hash_hex(header_hash(text, digits)));
  unsigned char length[8];
  for (int i = 0; i < 8; ++i)
    length[i] = static_cast<unsigned char>(text.size() >> (8 * i));

  const auto write_all = [&](auto& out) -> Status {
    TESSEL_TRY(out.write(length, 8));
    TESSEL_TRY(out.write(text.data(), text.size()));
    for (const Item& item : items) {
      const auto* bytes = static_cast<const unsigned char*>(item.host.storage()->host_address()) +
                          item.host.offset_bytes();
      TESSEL_TRY(out.write(bytes, item.host.nbytes()));
    }
    return out.commit();
  };
  if (key) {  // the same bytes, through the encrypting stream (secure/encrypted_file.h)
    TESSEL_ASSIGN_OR_RETURN(
        secure::EncryptedFileWriter out,
        secure::EncryptedFileWriter::open(path, *key, 8 + text.size() + offset));
    return write_all(out);
  }
  TESSEL_ASSIGN_OR_RETURN(AtomicFileWriter out, AtomicFileWriter::open(path));
  return write_all(out);
}

Expected<SafetensorsFile> load_safetensors(const std::string& path, const secure::SecretKey* key) {
  // With a key the bytes are the plaintext of an encrypted file, decrypted as they are read;
  // the reads below go forward only (length, header, tensors by offset), as that stream needs.
  std::optional<secure::EncryptedFileReader> encrypted;
  int fd = -1;
  uint64_t file_size = 0;
  if (key) {
    TESSEL_ASSIGN_OR_RETURN(encrypted, secure::EncryptedFileReader::open(path, *key));
    file_size = encrypted->size();
  } else {
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return errno_error("open safetensors file " + path);
  }
  ReadFile file(fd);
  struct stat st;
  if (!key && ::fstat(fd, &st) != 0) return errno_error("stat " + path);
  if (!key) file_size = static_cast<uint64_t>(st.st_size);
  const auto read_at = [&](int fd, const std::string& path, void* data, size_t size,
                           uint64_t offset) {
    return encrypted ? encrypted->read_at(data, size, offset)
                     : tessel::read_at(fd, path, data, size, offset);
  };
  if (file_size < 8) {
    return invalid_argument(
        "{}: byte offset 0: expected an 8-byte header length, but the file "
        "has {} bytes",
        path, file_size);
  }
  unsigned char length_bytes[8];
  TESSEL_TRY(read_at(fd, path, length_bytes, 8, 0));
  uint64_t header_size = 0;
  for (int i = 7; i >= 0; --i)
    header_size = (header_size << 8) | length_bytes[i];
  if (header_size > file_size - 8 || header_size > kMaxHeaderBytes) {
    return invalid_argument(
        "{}: byte offset 0: the header length {} does not fit the file ({} "
        "bytes; at most {} allowed)",
        path, header_size, file_size, kMaxHeaderBytes);
  }
  std::string text(header_size, '\0');
  TESSEL_TRY(read_at(fd, path, text.data(), text.size(), 8));
  TESSEL_ASSIGN_OR_RETURN(size_t hash_digits, find_header_hash(path, text));
  const bool checksummed = hash_digits != std::string::npos;
  if (checksummed) {
    const std::string stored = text.substr(hash_digits, kHashPlaceholder.size());
    const std::string computed = hash_hex(header_hash(text, hash_digits));
    if (stored != computed)
      return invalid_argument(
          "{}: header (file bytes 8..{}): checksum mismatch (stored {}, computed {}): "
          "the header is damaged",
          path, 8 + header_size, stored, computed);
  }
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    return invalid_argument("{}: byte offset {}: the header is not valid JSON: {}", path,
                            8 + (e.byte > 0 ? e.byte - 1 : 0), e.what());
  } catch (const nlohmann::json::exception& e) {  // a number out of range: 4E294967296
    return invalid_argument("{}: byte offset 8: the header is not valid JSON: {}", path, e.what());
  }
  if (!header.is_object())
    return invalid_argument("{}: byte offset 8: expected the header to be a JSON object", path);

  SafetensorsFile result;
  std::vector<Entry> entries;
  std::map<std::string, std::string> hashes;  // tensor name -> stored checksum
  for (const auto& [name, info] : header.items()) {
    if (name == "__metadata__") {
      if (!info.is_object())
        return invalid_argument("{}: header (byte offset 8): '__metadata__' must be an object",
                                path);
      for (const auto& [key, value] : info.items()) {
        if (!value.is_string()) {
          return invalid_argument(
              "{}: header (byte offset 8): '__metadata__' entry '{}' must be a string", path, key);
        }
        result.metadata[key] = value.get<std::string>();
      }
      continue;
    }
    TESSEL_ASSIGN_OR_RETURN(Entry entry, parse_entry(path, name, info));
    entries.push_back(std::move(entry));
  }
  const uint64_t data_start = 8 + header_size;
  const uint64_t data_size = file_size - data_start;
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return std::tie(a.begin, a.end) < std::tie(b.begin, b.end);
  });
  for (size_t i = 0; i < entries.size(); ++i) {
    const Entry& e = entries[i];
    if (e.end > data_size) {
      return out_of_range(
          "{}: tensor '{}': data_offsets [{}, {}] (file bytes {}..{}) run past the end of the file "
          "at byte offset {}",
          path, e.name, e.begin, e.end, data_start + e.begin, data_start + e.end, file_size);
    }
    if (i > 0 && entries[i - 1].end > e.begin) {
      const Entry& p = entries[i - 1];
      return invalid_argument(
          "{}: tensors '{}' (file bytes {}..{}) and '{}' (file bytes {}..{}) overlap at byte "
          "offset {}",
          path, p.name, data_start + p.begin, data_start + p.end, e.name, data_start + e.begin,
          data_start + e.end, data_start + e.begin);
    }
  }
  // As the reference implementation demands: the data buffer is the tensors, back to back from
  // offset 0, and nothing after them (where a damaged or appended byte would go unnoticed).
  uint64_t covered = 0;
  for (const Entry& e : entries) {
    if (e.begin != covered)
      return invalid_argument(
          "{}: tensor '{}': data_offsets begin at {}, expected {} (the data of "
          "consecutive tensors must be back to back)",
          path, e.name, e.begin, covered);
    covered = e.end;
  }
  if (covered != data_size)
    return invalid_argument("{}: byte offset {}: {} bytes of trailing data after the last tensor",
                            path, data_start + covered, data_size - covered);
  TESSEL_TRY(take_checksums(path, checksummed, entries, result.metadata, &hashes));
  result.checksummed = checksummed;
  for (const Entry& e : entries) {
    TESSEL_ASSIGN_OR_RETURN(Tensor t, Tensor::empty(e.shape, e.dtype));
    if (e.end > e.begin)
      TESSEL_TRY(
          read_at(fd, path, t.storage()->host_address(), e.end - e.begin, data_start + e.begin));
    if (auto h = hashes.find(e.name); h != hashes.end()) {
      const std::string computed =
          hash_hex(hash_bytes(t.storage()->host_address(), e.end - e.begin));
      if (computed != h->second)
        return invalid_argument(
            "{}: tensor '{}' (file bytes {}..{}): checksum mismatch (stored {}, "
            "computed {}): the data is damaged",
            path, e.name, data_start + e.begin, data_start + e.end, h->second, computed);
    }
    result.tensors.emplace(e.name, std::move(t));
  }
  if (encrypted) TESSEL_TRY(encrypted->finish());
  return result;
}

}  // namespace tessel
