// tessel's random number generator: PCG32 (PCG-XSH-RR 64/32, M. O'Neill,
// https://www.pcg-random.org), written here so that a seed gives the same shuffles and the same
// sampled windows on every platform and compiler, and so that its whole state (two 64-bit words)
// can be saved in a checkpoint and restored to continue the same stream.
//
//   Pcg32 rng(/*seed=*/42, /*stream=*/54);
//   uint32_t r = rng.next_u32();            // 0xa15c02b7 for (42, 54), as the reference prints
//   uint32_t die = rng.below(6);            // uniform in [0, 6), no modulo bias
//   std::vector<int64_t> p = shuffled_indices(n, rng);   // Fisher-Yates permutation of [0, n)
//   std::string saved = rng.state_string();  // "pcg32:<state hex>:<increment hex>"
//   Pcg32 again = *Pcg32::from_state_string(saved);
//
// std::mt19937 would also be reproducible, but std::uniform_int_distribution and std::shuffle are
// not (each standard library draws differently), so the draws are written out here too.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "support/status.h"

namespace tessel {

class Pcg32 {
 public:
  // The reference pcg32_srandom_r(seed, stream): streams with different `stream` never overlap.
  explicit Pcg32(uint64_t seed = 0x853c49e6748fea9bULL, uint64_t stream = 0xda3e39cb94b95bdbULL);

  uint32_t next_u32();
  // Uniform in [0, bound) by rejection (the reference pcg32_boundedrand_r); bound > 0.
  uint32_t below(uint32_t bound);
  // Uniform in [0, bound) for bounds past 32 bits: two draws make 64 bits, rejection as above.
  uint64_t below_u64(uint64_t bound);
  // Uniform in [0, 1) with 24 random bits (exact in float).
  float next_float();

  // The complete state: restoring it continues the same sequence.
  uint64_t state() const { return state_; }
  uint64_t increment() const { return increment_; }
  static Pcg32 from_state(uint64_t state, uint64_t increment);
  std::string state_string() const;
  // Parses state_string(); an error says what was expected.
  static Expected<Pcg32> from_state_string(std::string_view text);

  bool operator==(const Pcg32& other) const = default;

 private:
  uint64_t state_ = 0;
  uint64_t increment_ = 1;  // always odd
};

// A uniformly random permutation of [0, n) (Fisher-Yates, drawing with rng.below_u64).
std::vector<int64_t> shuffled_indices(int64_t n, Pcg32& rng);

}  // namespace tessel
