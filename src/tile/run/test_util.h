// Helpers for tile kernel tests: random data, 16-bit float rounding written independently of
// the code under test, the kernels directory, and comparison with a stated tolerance.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace tessel::tile::testing {

inline std::string kernels_dir() {
  const char* d = std::getenv("TESSEL_SOURCE_DIR");
  return std::string(d ? d : ".") + "/kernels";
}

inline std::vector<float> random_floats(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// bf16 and f16 bit patterns, round to nearest even (finite inputs of moderate size only).
inline uint16_t to_bf16_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
inline float from_bf16_bits(uint16_t b) {
  uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint16_t to_f16_bits(float f) {
  // Via frexp: f = m * 2^e with 0.5 <= |m| < 1; normal halves have 11 significant bits.
  if (f == 0) return std::signbit(f) ? 0x8000 : 0;
  uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  double a = std::fabs(static_cast<double>(f));
  int e;
  std::frexp(a, &e);  // a = m * 2^e
  int exp16 = e - 1 + 15;
  if (exp16 <= 0) return static_cast<uint16_t>(sign | static_cast<uint16_t>(std::nearbyint(a * 16777216.0)));
  double mant = std::nearbyint(std::ldexp(a, 11 - e));  // in [1024, 2048]
  if (mant >= 2048) {
    mant /= 2;
    ++exp16;
  }
  return static_cast<uint16_t>(sign | (exp16 << 10) | (static_cast<int>(mant) - 1024));
}
inline float from_f16_bits(uint16_t h) {
  int exp16 = (h >> 10) & 0x1f, mant = h & 0x3ff;
  double v = exp16 == 0 ? std::ldexp(mant, -24) : std::ldexp(1024 + mant, exp16 - 25);
  return static_cast<float>((h & 0x8000) ? -v : v);
}

// Expects |got - want| <= abs_tol + rel_tol * |want| everywhere; reports the first few misses.
inline void expect_close(const std::vector<float>& got, const std::vector<double>& want, double abs_tol,
                         double rel_tol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int misses = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    double err = std::fabs(static_cast<double>(got[i]) - want[i]);
    if (!(err <= abs_tol + rel_tol * std::fabs(want[i]))) {
      if (++misses <= 5) ADD_FAILURE() << what << ": element " << i << " is " << got[i] << ", want " << want[i];
    }
  }
  EXPECT_EQ(misses, 0) << what << ": " << misses << " of " << got.size() << " elements out of tolerance";
}

}  // namespace tessel::tile::testing
