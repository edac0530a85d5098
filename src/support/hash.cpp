// XXH64: four accumulators over 32-byte stripes, then the tail and a final avalanche.
#include "support/hash.h"

#include <bit>
#include <cstring>

#include <fmt/format.h>

namespace tessel {
namespace {

static_assert(std::endian::native == std::endian::little, "XXH64 here reads little-endian words");

constexpr uint64_t kPrime1 = 0x9E3779B185EBCA87ull;
constexpr uint64_t kPrime2 = 0xC2B2AE3D27D4EB4Full;
constexpr uint64_t kPrime3 = 0x165667B19E3779F9ull;
constexpr uint64_t kPrime4 = 0x85EBCA77C2B2AE63ull;
constexpr uint64_t kPrime5 = 0x27D4EB2F165667C5ull;

uint64_t read64(const unsigned char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

uint32_t read32(const unsigned char* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

uint64_t round(uint64_t acc, uint64_t input) {
  acc += input * kPrime2;
  acc = std::rotl(acc, 31);
  return acc * kPrime1;
}

uint64_t merge_round(uint64_t h, uint64_t acc) {
  h ^= round(0, acc);
  return h * kPrime1 + kPrime4;
}

void consume_stripe(uint64_t acc[4], const unsigned char* p) {
  for (int i = 0; i < 4; ++i)
    acc[i] = round(acc[i], read64(p + 8 * i));
}

}  // namespace

Hasher::Hasher(uint64_t seed)
    : seed_(seed), acc_{seed + kPrime1 + kPrime2, seed + kPrime2, seed, seed - kPrime1} {}

Hasher& Hasher::update(const void* data, size_t size) {
  const auto* p = static_cast<const unsigned char*>(data);
  total_ += size;
  if (buffered_ > 0) {  // complete the stripe left over from the last call first
    const size_t take = std::min(size, sizeof(buffer_) - buffered_);
    std::memcpy(buffer_ + buffered_, p, take);
    buffered_ += take;
    p += take;
    size -= take;
    if (buffered_ < sizeof(buffer_)) return *this;
    consume_stripe(acc_, buffer_);
    buffered_ = 0;
  }
  for (; size >= 32; p += 32, size -= 32)
    consume_stripe(acc_, p);
  if (size > 0) std::memcpy(buffer_, p, size);
  buffered_ = size;
  return *this;
}

Hasher& Hasher::add_field(std::string_view part) {
  const uint64_t length = part.size();
  update(&length, sizeof(length));
  return update(part);
}

uint64_t Hasher::digest() const {
  uint64_t h;
  if (total_ >= 32) {
    h = std::rotl(acc_[0], 1) + std::rotl(acc_[1], 7) + std::rotl(acc_[2], 12) +
        std::rotl(acc_[3], 18);
    for (uint64_t acc : acc_)
      h = merge_round(h, acc);
  } else {
    h = seed_ + kPrime5;
  }
  h += total_;

  const unsigned char* p = buffer_;
  size_t left = buffered_;
  for (; left >= 8; p += 8, left -= 8)
    h = std::rotl(h ^ round(0, read64(p)), 27) * kPrime1 + kPrime4;
  if (left >= 4) {
    h = std::rotl(h ^ (static_cast<uint64_t>(read32(p)) * kPrime1), 23) * kPrime2 + kPrime3;
    p += 4;
    left -= 4;
  }
  for (; left > 0; ++p, --left)
    h = std::rotl(h ^ (*p * kPrime5), 11) * kPrime1;

  h ^= h >> 33;
  h *= kPrime2;
  h ^= h >> 29;
  h *= kPrime3;
  h ^= h >> 32;
  return h;
}

uint64_t hash_bytes(const void* data, size_t size, uint64_t seed) {
  return Hasher(seed).update(data, size).digest();
}

std::string hash_hex(uint64_t hash) {
  return fmt::format("{:016x}", hash);
}

}  // namespace tessel
