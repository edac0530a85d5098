// A fast 64-bit content hash (XXH64, written here from its specification) for cache keys and
// content checks: the JIT cache keys a compiled kernel by the hash of its source, target, options
// and compiler version.
//
//   std::string key = Hasher().add_field(source).add_field(target).add_field(flags).hex_digest();
//   uint64_t h = hash_bytes(bytes.data(), bytes.size());
//
// Not cryptographic: good against accidents (2^-64 per pair of different inputs), not against an
// adversary. Results equal the reference xxHash64 on little-endian machines, so other tools can
// compute the same keys.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace tessel {

// Two names, not two overloads: hash_text("abc", 1) must not pick the pointer + size version.
uint64_t hash_bytes(const void* data, size_t size, uint64_t seed = 0);
inline uint64_t hash_text(std::string_view text, uint64_t seed = 0) {
  return hash_bytes(text.data(), text.size(), seed);
}
// 16 lower-case hex digits, most significant first.
std::string hash_hex(uint64_t hash);

// The same hash over input given in pieces.
class Hasher {
 public:
  explicit Hasher(uint64_t seed = 0);
  Hasher& update(const void* data, size_t size);
  Hasher& update(std::string_view text) { return update(text.data(), text.size()); }
  // Adds the part's length before the part, so that ("ab", "c") and ("a", "bc") hash differently.
  Hasher& add_field(std::string_view part);
  uint64_t digest() const;
  std::string hex_digest() const { return hash_hex(digest()); }

 private:
  uint64_t seed_;
  uint64_t acc_[4];
  unsigned char buffer_[32];
  size_t buffered_ = 0;
  uint64_t total_ = 0;
};

}  // namespace tessel
