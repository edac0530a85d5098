// Files encrypted and authenticated as a stream (libsodium's crypto_secretstream, XChaCha20-
// Poly1305), written and read in chunks so that a multi-GB checkpoint is never held twice.
//
//   bytes 0..7    "TSLCRYPT"
//   bytes 8..11   format version (1), little-endian
//   bytes 12..15  plaintext bytes per chunk (65536), little-endian
//   bytes 16..23  plaintext size, little-endian
//   bytes 24..31  key id (SecretKey::key_id), so a wrong key is named as such
//   bytes 32..55  the secretstream header (its nonce)
//   bytes 56..    the chunks: each the ciphertext of up to `chunk` plaintext bytes plus a 17-byte
//                 tag; the last is tagged FINAL, and bytes 0..31 are the first chunk's additional
//                 data, so the sizes and the key id are authenticated with it
//
// secretstream chains the chunks (each one's nonce follows from the last), so a chunk dropped,
// repeated, reordered, changed or cut off is an authentication failure, and a stream that ends
// before its FINAL chunk is reported as truncated. Every error names the file, the byte offset
// and what failed.
//
//   TESSEL_ASSIGN_OR_RETURN(auto out, EncryptedFileWriter::open(path, key, total_bytes));
//   TESSEL_TRY(out.write(data, n));  ...  TESSEL_TRY(out.commit());    // atomic, like the plain
//   file TESSEL_ASSIGN_OR_RETURN(auto in, EncryptedFileReader::open(path, key)); in.size();
//   TESSEL_TRY(in.read_at(buffer, n, offset));             // offsets only move forward
//   TESSEL_TRY(in.finish());                                          // the rest authenticates too
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "secure/secret_key.h"
#include "support/atomic_file.h"

namespace tessel::secure {

inline constexpr char kEncryptedMagic[8] = {'T', 'S', 'L', 'C', 'R', 'Y', 'P', 'T'};
inline constexpr uint32_t kEncryptedVersion = 1;
inline constexpr uint32_t kDefaultChunkBytes = 64 * 1024;

// Whether the file starts with kEncryptedMagic (false for a missing or short file).
bool is_encrypted_file(const std::string& path);

class EncryptedFileWriter {
 public:
  // `plaintext_size` is exactly what the writes will add up to (it is authenticated up front).
  static Expected<EncryptedFileWriter> open(const std::string& path, const SecretKey& key,
                                            uint64_t plaintext_size,
                                            uint32_t chunk_bytes = kDefaultChunkBytes);
  EncryptedFileWriter(EncryptedFileWriter&&) noexcept;
  EncryptedFileWriter& operator=(EncryptedFileWriter&&) noexcept;
  ~EncryptedFileWriter();

  Status write(const void* data, size_t size);
  // Checks that plaintext_size bytes were written, then renames the file into place.
  Status commit();

 private:
  struct State;
  explicit EncryptedFileWriter(std::unique_ptr<State> state);
  Status push_chunk();
  std::unique_ptr<State> state_;
};

class EncryptedFileReader {
 public:
  // Checks the magic, version, key id and the file's size against its header, and authenticates
  // the first chunk (which covers the header).
  static Expected<EncryptedFileReader> open(const std::string& path, const SecretKey& key);
  EncryptedFileReader(EncryptedFileReader&&) noexcept;
  EncryptedFileReader& operator=(EncryptedFileReader&&) noexcept;
  ~EncryptedFileReader();

  uint64_t size() const;  // of the plaintext
  const std::string& path() const;
  // Plaintext bytes [offset, offset + size); offset may not go back before the previous read's
  // end (the stream is decrypted in order; the bytes skipped are still authenticated).
  Status read_at(void* data, size_t size, uint64_t offset);
  // Decrypts and authenticates the rest of the stream, up to and including its FINAL chunk.
  Status finish();

 private:
  struct State;
  explicit EncryptedFileReader(std::unique_ptr<State> state);
  Status pull_chunk();
  std::unique_ptr<State> state_;
};

// Whole files, for `tessel checkpoint encrypt|decrypt|verify`: a stream in, a stream out, one
// chunk in memory. decrypt writes `out` atomically only once every chunk has authenticated.
Status encrypt_file(const std::string& in, const std::string& out, const SecretKey& key);
Status decrypt_file(const std::string& in, const std::string& out, const SecretKey& key);
// Authenticates every chunk; returns the plaintext size.
Expected<uint64_t> verify_file(const std::string& path, const SecretKey& key);

}  // namespace tessel::secure
