// A 256-bit secret key for tessel's symmetric cryptography (encrypted files, keyed pseudonyms),
// read from a key file or an environment variable, never from a config file.
//
//   TESSEL_ASSIGN_OR_RETURN(SecretKey key, SecretKey::from_file("run/ckpt.key"));
//   TESSEL_ASSIGN_OR_RETURN(SecretKey key, SecretKey::from_env("TESSEL_CHECKPOINT_KEY"));
//   SecretKey fresh = SecretKey::generate();      // libsodium's randombytes
//   TESSEL_TRY(fresh.save("run/ckpt.key"));       // 64 hex digits and a newline, mode 0600
//
// A key file holds either the 32 raw bytes or 64 hex digits (whitespace around them is ignored);
// an environment variable holds 64 hex digits. The key lives in memory from sodium_malloc
// (guard pages, locked against swapping where the system allows) and is wiped when freed.
// key_id() is a public fingerprint (BLAKE2b of the key under a fixed label): files record it so
// a wrong key is told apart from a damaged file.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>

#include "support/status.h"

namespace tessel::secure {

// Initialises libsodium once (thread-safe); an error if the library cannot start.
Status init_sodium();

class SecretKey {
 public:
  static constexpr size_t kBytes = 32;

  static SecretKey generate();
  static Expected<SecretKey> from_file(const std::string& path);
  static Expected<SecretKey> from_env(const std::string& variable);
  // 64 hex digits; `what` names the source in messages.
  static Expected<SecretKey> from_hex(const std::string& text, const std::string& what);
  static SecretKey from_bytes(const uint8_t* bytes);

  const uint8_t* data() const { return bytes_.get(); }
  // The first 8 bytes of BLAKE2b-256("tessel key id", key), as 16 hex digits.
  std::string key_id() const;
  // Writes the key as hex with permissions 0600 (an existing file is an error).
  Status save(const std::string& path) const;

 private:
  struct Free {
    void operator()(uint8_t* p) const;
  };
  SecretKey();
  std::unique_ptr<uint8_t, Free> bytes_;
};

}  // namespace tessel::secure
