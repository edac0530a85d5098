// Secret keys in libsodium's guarded memory.
#include "secure/secret_key.h"

#include <fcntl.h>
#include <sodium.h>
#include <unistd.h>

#include <cctype>
#include <cstdlib>
#include <cstring>

#include "support/atomic_file.h"

namespace tessel::secure {

Status init_sodium() {
  static const int result = sodium_init();  // 0: started now, 1: already started
  if (result < 0) return failed_precondition("libsodium could not initialise (sodium_init failed)");
  return ok_status();
}

void SecretKey::Free::operator()(uint8_t* p) const {
  sodium_free(p);
}

SecretKey::SecretKey() {
  TESSEL_CHECK(init_sodium().ok(), "libsodium did not start");
  bytes_.reset(static_cast<uint8_t*>(sodium_malloc(kBytes)));
  TESSEL_CHECK(bytes_ != nullptr, "sodium_malloc of a key failed");
}

SecretKey SecretKey::generate() {
  SecretKey key;
  randombytes_buf(key.bytes_.get(), kBytes);
  return key;
}

SecretKey SecretKey::from_bytes(const uint8_t* bytes) {
  SecretKey key;
  std::memcpy(key.bytes_.get(), bytes, kBytes);
  return key;
}

Expected<SecretKey> SecretKey::from_hex(const std::string& text, const std::string& what) {
  size_t begin = 0, end = text.size();
  while (begin < end && std::isspace(static_cast<unsigned char>(text[begin])))
    ++begin;
  while (end > begin && std::isspace(static_cast<unsigned char>(text[end - 1])))
    --end;
  SecretKey key;
  size_t written = 0;
  const char* stop = nullptr;
  if (end - begin != 2 * kBytes ||
      sodium_hex2bin(key.bytes_.get(), kBytes, text.data() + begin, end - begin, nullptr, &written,
                     &stop) != 0 ||
      written != kBytes || stop != text.data() + end) {
    return invalid_argument("{}: expected a key of {} hex digits (or, in a key file, {} raw bytes)",
                            what, 2 * kBytes, kBytes);
  }
  return key;
}

Expected<SecretKey> SecretKey::from_file(const std::string& path) {
  Expected<std::string> text = read_file(path);
  if (!text.ok()) return text.status().with_context("key file");
  if (text->size() == kBytes) {
    SecretKey key = from_bytes(reinterpret_cast<const uint8_t*>(text->data()));
    sodium_memzero(text->data(), text->size());
    return key;
  }
  Expected<SecretKey> key = from_hex(*text, "key file " + path);
  sodium_memzero(text->data(), text->size());
  return key;
}

Expected<SecretKey> SecretKey::from_env(const std::string& variable) {
  const char* value = std::getenv(variable.c_str());
  if (value == nullptr || *value == '\0')
    return not_found("environment variable {} (named as the key's source) is not set", variable);
  return from_hex(value, "environment variable " + variable);
}

std::string SecretKey::key_id() const {
  static constexpr char kLabel[] = "tessel key id";
  unsigned char digest[32];
  crypto_generichash(digest, sizeof digest, reinterpret_cast<const unsigned char*>(kLabel),
                     sizeof kLabel - 1, bytes_.get(), kBytes);
  char hex[17];
  sodium_bin2hex(hex, sizeof hex, digest, 8);
  return hex;
}

Status SecretKey::save(const std::string& path) const {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return errno_error("create key file " + path);
  char hex[2 * kBytes + 2];
  sodium_bin2hex(hex, 2 * kBytes + 1, bytes_.get(), kBytes);
  hex[2 * kBytes] = '\n';
  const ssize_t wrote = ::write(fd, hex, 2 * kBytes + 1);
  sodium_memzero(hex, sizeof hex);
  const bool synced = ::fsync(fd) == 0;
  ::close(fd);
  if (wrote != ssize_t(2 * kBytes + 1) || !synced) return errno_error("write key file " + path);
  return ok_status();
}

}  // namespace tessel::secure
