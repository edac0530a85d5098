// PCG32: the reference algorithm (pcg_basic.c) transcribed, plus state save/restore.
#include "support/random.h"

#include <fmt/format.h>

#include <charconv>
#include <utility>

namespace tessel {
namespace {
constexpr uint64_t kMultiplier = 6364136223846793005ULL;
}  // namespace

Pcg32::Pcg32(uint64_t seed, uint64_t stream) {
  state_ = 0;
  increment_ = (stream << 1u) | 1u;
  next_u32();
  state_ += seed;
  next_u32();
}

uint32_t Pcg32::next_u32() {
  const uint64_t old = state_;
  state_ = old * kMultiplier + increment_;
  const uint32_t xorshifted = static_cast<uint32_t>(((old >> 18u) ^ old) >> 27u);
  const uint32_t rot = static_cast<uint32_t>(old >> 59u);
  return (xorshifted >> rot) | (xorshifted << ((-rot) & 31));
}

uint32_t Pcg32::below(uint32_t bound) {
  TESSEL_CHECK(bound > 0, "Pcg32::below(0)");
  // Values below 2^32 mod bound would make the low results more likely: reject them.
  const uint32_t threshold = -bound % bound;
  for (;;) {
    const uint32_t r = next_u32();
    if (r >= threshold) return r % bound;
  }
}

uint64_t Pcg32::below_u64(uint64_t bound) {
  TESSEL_CHECK(bound > 0, "Pcg32::below_u64(0)");
  if (bound <= UINT32_MAX) return below(static_cast<uint32_t>(bound));
  const uint64_t threshold = -bound % bound;
  for (;;) {
    const uint64_t high = next_u32();
    const uint64_t r = (high << 32) | next_u32();
    if (r >= threshold) return r % bound;
  }
}

float Pcg32::next_float() {
  return static_cast<float>(next_u32() >> 8) * 0x1p-24f;
}

Pcg32 Pcg32::from_state(uint64_t state, uint64_t increment) {
  Pcg32 rng;
  rng.state_ = state;
  rng.increment_ = increment | 1u;
  return rng;
}

std::string Pcg32::state_string() const {
  return fmt::format("pcg32:{:016x}:{:016x}", state_, increment_);
}

Expected<Pcg32> Pcg32::from_state_string(std::string_view text) {
  const auto bad = [&] {
    return invalid_argument(
        "random generator state '{}': expected 'pcg32:<16 hex digits>:<16 hex digits>' (the "
        "increment odd)",
        text);
  };
  constexpr std::string_view kPrefix = "pcg32:";
  if (text.size() != kPrefix.size() + 33 || text.substr(0, kPrefix.size()) != kPrefix ||
      text[kPrefix.size() + 16] != ':')
    return bad();
  uint64_t words[2];
  for (int i = 0; i < 2; ++i) {
    const char* begin = text.data() + kPrefix.size() + 17 * i;
    const auto [end, ec] = std::from_chars(begin, begin + 16, words[i], 16);
    if (ec != std::errc() || end != begin + 16) return bad();
  }
  if ((words[1] & 1) == 0) return bad();
  return from_state(words[0], words[1]);
}

std::vector<int64_t> shuffled_indices(int64_t n, Pcg32& rng) {
  std::vector<int64_t> order(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    order[i] = i;
  for (int64_t i = n - 1; i > 0; --i) {
    const auto j = static_cast<int64_t>(rng.below_u64(static_cast<uint64_t>(i) + 1));
    std::swap(order[i], order[j]);
  }
  return order;
}

}  // namespace tessel
