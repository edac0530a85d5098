// DTypes and 16-bit float conversion.
//
// The references here are written independently of dtype.h: decoding builds the value from sign,
// exponent and mantissa with ldexp in double; encoding scales |x| by a power of two so that the
// format's last mantissa bit has weight 1, rounds that in double with an explicit ties-to-even
// rule, and assembles the bits. Every half and bfloat16 bit pattern is decoded; encoding is checked
// on every representable value, every midpoint between neighbours (the ties), the floats just
// either side of each midpoint, special values and a million random floats.
#include "support/dtype.h"

#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace tessel {
namespace {

uint32_t bits_of(float f) {
  return std::bit_cast<uint32_t>(f);
}
float float_of(uint32_t u) {
  return std::bit_cast<float>(u);
}

// A binary floating-point format with `exponent_bits` and `mantissa_bits` (stored, no hidden bit).
struct Format {
  int exponent_bits;
  int mantissa_bits;
  int bias() const { return (1 << (exponent_bits - 1)) - 1; }
  uint32_t exponent_all_ones() const { return (1u << exponent_bits) - 1; }
  uint32_t sign_bit() const { return 1u << (exponent_bits + mantissa_bits); }
  uint32_t inf_bits() const { return exponent_all_ones() << mantissa_bits; }
};
constexpr Format kHalf{5, 10};
constexpr Format kBFloat16{8, 7};

// Reference decode: value of a bit pattern, in double (NaN for NaNs).
double reference_decode(uint32_t bits, Format f) {
  const bool negative = (bits & f.sign_bit()) != 0;
  const uint32_t exponent = (bits >> f.mantissa_bits) & f.exponent_all_ones();
  const uint32_t mantissa = bits & ((1u << f.mantissa_bits) - 1);
  double magnitude;
  if (exponent == f.exponent_all_ones()) {
    magnitude = mantissa == 0 ? INFINITY : NAN;
  } else if (exponent == 0) {  // subnormal: 0.mantissa * 2^(1 - bias)
    magnitude = std::ldexp(static_cast<double>(mantissa), 1 - f.bias() - f.mantissa_bits);
  } else {  // normal: 1.mantissa * 2^(exponent - bias)
    magnitude = std::ldexp(static_cast<double>((1u << f.mantissa_bits) + mantissa),
                           static_cast<int>(exponent) - f.bias() - f.mantissa_bits);
  }
  return negative ? -magnitude : magnitude;
}

// Reference encode of a non-NaN value: round to nearest, ties to even, overflow to Inf.
uint32_t reference_encode(double x, Format f) {
  const uint32_t sign = std::signbit(x) ? f.sign_bit() : 0;
  const double a = std::fabs(x);
  if (std::isinf(a)) return sign | f.inf_bits();
  if (a == 0) return sign;
  int e2;
  std::frexp(a, &e2);  // a = fraction * 2^e2, fraction in [0.5, 1)
  const int min_exponent = 1 - f.bias();
  int exponent = std::max(e2 - 1, min_exponent);  // a in [2^exponent, 2^(exponent+1)) if normal
  // Units of the last mantissa place at this exponent: scaling by a power of two is exact.
  const double units = std::ldexp(a, f.mantissa_bits - exponent);
  double r = std::floor(units);
  const double fraction = units - r;
  if (fraction > 0.5 || (fraction == 0.5 && std::fmod(r, 2.0) == 1.0)) r += 1;
  const double hidden = std::ldexp(1.0, f.mantissa_bits);  // 2^mantissa_bits
  if (r == 2 * hidden) {                                   // rounded up to the next power of two
    r = hidden;
    exponent += 1;
  }
  if (exponent > f.bias()) return sign | f.inf_bits();
  if (r < hidden) return sign | static_cast<uint32_t>(r);  // subnormal (exponent is the minimum)
  return sign | (static_cast<uint32_t>(exponent + f.bias()) << f.mantissa_bits) |
         static_cast<uint32_t>(r - hidden);
}

// Checks one float -> 16-bit conversion against the reference, NaNs included.
void expect_encoded(float x, uint16_t got, Format f, const char* what) {
  if (std::isnan(x)) {
    const uint32_t quiet_bit = 1u << (f.mantissa_bits - 1);
    const uint32_t payload_bits = f.mantissa_bits - 1;  // kept from the top of float's payload
    const uint32_t payload = (bits_of(x) >> (22 - payload_bits)) & ((1u << payload_bits) - 1);
    const uint32_t expected =
        (std::signbit(x) ? f.sign_bit() : 0) | f.inf_bits() | quiet_bit | payload;
    ASSERT_EQ(got, expected) << what << " of NaN 0x" << std::hex << bits_of(x);
    return;
  }
  ASSERT_EQ(got, reference_encode(x, f))
      << what << " of " << x << " (0x" << std::hex << bits_of(x) << ")";
}

// Inputs that exercise rounding for a format: all values, all midpoints and their float
// neighbours, both signs.
std::vector<float> rounding_inputs(Format f) {
  std::vector<float> inputs;
  const uint32_t max_finite = f.inf_bits() - 1;
  for (uint32_t h = 0; h <= max_finite; ++h) {
    const double low = reference_decode(h, f);
    // The neighbour above max_finite is where the next binade would start (the Inf threshold).
    const double high =
        h == max_finite ? std::ldexp(1.0, f.bias() + 1) : reference_decode(h + 1, f);
    const double mid = (low + high) / 2;  // exact: one bit more than the format, within float
    const float mid_f = static_cast<float>(mid);
    EXPECT_EQ(static_cast<double>(mid_f), mid);
    for (float v : {static_cast<float>(low), mid_f, std::nextafter(mid_f, 0.0f),
                    std::nextafter(mid_f, INFINITY)}) {
      inputs.push_back(v);
      inputs.push_back(-v);
    }
  }
  return inputs;
}

std::vector<float> special_inputs() {
  std::vector<float> v = {0.0f,
                          -0.0f,
                          INFINITY,
                          -INFINITY,
                          FLT_MAX,
                          -FLT_MAX,
                          FLT_MIN,
                          -FLT_MIN,
                          FLT_TRUE_MIN,
                          -FLT_TRUE_MIN,
                          65504.0f,
                          65519.99f,
                          65520.0f,
                          1e10f,
                          5.960464477539063e-08f /* 2^-24 */,
                          2.9802322387695312e-08f /* 2^-25 */};
  for (uint32_t nan : {0x7f800001u, 0x7fc00000u, 0xffc00000u, 0x7fbfffffu, 0xff812345u, 0x7fe00001u,
                       0x7f802000u}) {
    v.push_back(float_of(nan));
  }
  return v;
}

std::vector<float> random_inputs() {
  std::mt19937 rng(12345);
  std::vector<float> v(1 << 20);
  for (float& x : v)
    x = float_of(static_cast<uint32_t>(rng()));
  return v;
}

TEST(DType, NamesSizesAndParsing) {
  struct Row {
    DType dtype;
    const char* name;
    size_t size;
    bool floating;
  };
  const Row rows[] = {{DType::kF32, "f32", 4, true},   {DType::kF64, "f64", 8, true},
                      {DType::kF16, "f16", 2, true},   {DType::kBF16, "bf16", 2, true},
                      {DType::kI8, "i8", 1, false},    {DType::kU8, "u8", 1, false},
                      {DType::kI32, "i32", 4, false},  {DType::kI64, "i64", 8, false},
                      {DType::kBool, "bool", 1, false}};
  for (const Row& r : rows) {
    EXPECT_STREQ(dtype_name(r.dtype), r.name);
    EXPECT_EQ(dtype_size(r.dtype), r.size);
    EXPECT_EQ(is_floating_point(r.dtype), r.floating);
    EXPECT_EQ(*parse_dtype(r.name), r.dtype);
  }
  EXPECT_EQ(*parse_dtype("bfloat16"), DType::kBF16);
  EXPECT_EQ(*parse_dtype("float32"), DType::kF32);
  EXPECT_EQ(*parse_dtype("half"), DType::kF16);
  EXPECT_EQ(*parse_dtype("int64"), DType::kI64);
  Expected<DType> bad = parse_dtype("f33");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), Code::kInvalidArgument);
  EXPECT_EQ(
      bad.status().message(),
      "unknown dtype 'f33': expected one of f32, f64, f16, bf16, i8, u8, i32, i64, bool, i16");
  EXPECT_EQ(dtype_of<float>, DType::kF32);
  EXPECT_EQ(dtype_of<BFloat16>, DType::kBF16);
  EXPECT_EQ(dtype_of<int64_t>, DType::kI64);
}

TEST(Half, DecodesEveryBitPattern) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float got = half_bits_to_float(static_cast<uint16_t>(h));
    const double expected = reference_decode(h, kHalf);
    if (std::isnan(expected)) {
      ASSERT_TRUE(std::isnan(got)) << std::hex << h;
      EXPECT_EQ(std::signbit(got), (h & 0x8000) != 0) << std::hex << h;
      EXPECT_NE(bits_of(got) & 0x400000, 0u) << "not quiet: " << std::hex << h;
      EXPECT_EQ((bits_of(got) >> 13) & 0x1ff, h & 0x1ff) << "payload: " << std::hex << h;
    } else {
      ASSERT_EQ(static_cast<double>(got), expected) << std::hex << h;
      ASSERT_EQ(std::signbit(got), std::signbit(expected)) << std::hex << h;
    }
  }
}

TEST(BFloat16, DecodesEveryBitPattern) {
  for (uint32_t b = 0; b < 65536; ++b) {
    const float got = bfloat16_bits_to_float(static_cast<uint16_t>(b));
    const double expected = reference_decode(b, kBFloat16);
    if (std::isnan(expected)) {
      ASSERT_TRUE(std::isnan(got)) << std::hex << b;
      EXPECT_EQ(std::signbit(got), (b & 0x8000) != 0) << std::hex << b;
      EXPECT_NE(bits_of(got) & 0x400000, 0u) << "not quiet: " << std::hex << b;
      EXPECT_EQ((bits_of(got) >> 16) & 0x3f, b & 0x3f) << "payload: " << std::hex << b;
    } else {
      ASSERT_EQ(static_cast<double>(got), expected) << std::hex << b;
      ASSERT_EQ(std::signbit(got), std::signbit(expected)) << std::hex << b;
    }
  }
}

TEST(Half, EveryNonNaNPatternRoundTrips) {
  for (uint32_t h = 0; h < 65536; ++h) {
    if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0) continue;  // NaN: checked elsewhere
    ASSERT_EQ(float_to_half_bits(half_bits_to_float(static_cast<uint16_t>(h))), h) << std::hex << h;
  }
}

TEST(BFloat16, EveryNonNaNPatternRoundTrips) {
  for (uint32_t b = 0; b < 65536; ++b) {
    if ((b & 0x7f80) == 0x7f80 && (b & 0x7f) != 0) continue;
    ASSERT_EQ(float_to_bfloat16_bits(bfloat16_bits_to_float(static_cast<uint16_t>(b))), b)
        << std::hex << b;
  }
}

TEST(Half, EncodesMidpointsNeighboursSpecialsAndRandomFloats) {
  for (float x : rounding_inputs(kHalf))
    expect_encoded(x, float_to_half_bits(x), kHalf, "f16");
  for (float x : special_inputs())
    expect_encoded(x, float_to_half_bits(x), kHalf, "f16");
  for (float x : random_inputs())
    expect_encoded(x, float_to_half_bits(x), kHalf, "f16");
  // Spot checks that a reader can verify by hand.
  EXPECT_EQ(float_to_half_bits(1.0f), 0x3c00);
  EXPECT_EQ(float_to_half_bits(65504.0f), 0x7bff);
  EXPECT_EQ(float_to_half_bits(65520.0f), 0x7c00);         // tie between 65504 and 2^16: to Inf
  EXPECT_EQ(float_to_half_bits(0x1p-24f), 0x0001);         // smallest subnormal
  EXPECT_EQ(float_to_half_bits(0x1p-25f), 0x0000);         // tie between 0 and 2^-24: to 0
  EXPECT_EQ(float_to_half_bits(0x1.8p-24f), 0x0002);       // tie between 1 and 2 units: to 2
  EXPECT_EQ(float_to_half_bits(1.0f + 0x1p-11f), 0x3c00);  // tie: to even 1.0
  EXPECT_EQ(float_to_half_bits(1.0f + 0x3p-11f), 0x3c02);  // tie: to even 1 + 2^-9
}

TEST(BFloat16, EncodesMidpointsNeighboursSpecialsAndRandomFloats) {
  for (float x : rounding_inputs(kBFloat16)) {
    expect_encoded(x, float_to_bfloat16_bits(x), kBFloat16, "bf16");
  }
  for (float x : special_inputs())
    expect_encoded(x, float_to_bfloat16_bits(x), kBFloat16, "bf16");
  for (float x : random_inputs())
    expect_encoded(x, float_to_bfloat16_bits(x), kBFloat16, "bf16");
  EXPECT_EQ(float_to_bfloat16_bits(1.0f), 0x3f80);
  EXPECT_EQ(float_to_bfloat16_bits(FLT_MAX), 0x7f80);  // above the last midpoint: Inf
  EXPECT_EQ(float_to_bfloat16_bits(1.0f + 0x1p-8f), 0x3f80);
  EXPECT_EQ(float_to_bfloat16_bits(1.0f + 0x3p-8f), 0x3f82);
}

#if defined(__FLT16_MAX__) && defined(__x86_64__)
// A second, unrelated implementation where the compiler has one: GCC's _Float16 conversions
// (libgcc's soft-float routines, or F16C instructions).
TEST(Half, AgreesWithCompilerFloat16) {
  for (float x : random_inputs()) {
    if (std::isnan(x)) continue;  // payload handling of NaNs is not specified for _Float16
    const _Float16 h = static_cast<_Float16>(x);
    uint16_t expected;
    std::memcpy(&expected, &h, 2);
    ASSERT_EQ(float_to_half_bits(x), expected) << x;
  }
  for (uint32_t h = 0; h < 65536; ++h) {
    if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0) continue;
    _Float16 v;
    const uint16_t bits = static_cast<uint16_t>(h);
    std::memcpy(&v, &bits, 2);
    ASSERT_EQ(bits_of(half_bits_to_float(bits)), bits_of(static_cast<float>(v))) << std::hex << h;
  }
}
#endif

TEST(HalfTypes, WrapTheConversions) {
  const Half h(2.5f);
  EXPECT_EQ(h.bits, 0x4100);
  EXPECT_EQ(static_cast<float>(h), 2.5f);
  EXPECT_EQ(static_cast<float>(Half::from_bits(0xfc00)), -INFINITY);
  const BFloat16 b(-3.0f);
  EXPECT_EQ(b.bits, 0xc040);
  EXPECT_EQ(b + 1.0f, -2.0f);  // arithmetic happens in float
}

TEST(Scalars, LoadAndStoreEveryDType) {
  unsigned char buffer[8];
  struct Case {
    DType dtype;
    double in;
    double out;
  };
  const Case cases[] = {
      {DType::kF32, 0.1, static_cast<double>(0.1f)},
      {DType::kF64, 0.1, 0.1},
      {DType::kF16, 0.1, 0.0999755859375},  // 0x2e66 = 1638 * 2^-14
      {DType::kBF16, 0.1, 0.10009765625},   // 0x3dcd = 205 * 2^-11
      {DType::kI8, -3.9, -3},               // truncates toward zero
      {DType::kI8, 1000, 127},              // saturates
      {DType::kU8, -5, 0},
      {DType::kU8, 255.5, 255},
      {DType::kI32, 3e10, 2147483647},
      {DType::kI64, -1e30, -9223372036854775808.0},
      {DType::kI64, NAN, 0},
      {DType::kBool, 0.5, 1},
      {DType::kBool, 0, 0},
  };
  for (const Case& c : cases) {
    store_scalar(c.dtype, c.in, buffer);
    EXPECT_EQ(load_scalar(c.dtype, buffer), c.out) << dtype_name(c.dtype) << " " << c.in;
  }
  store_scalar(DType::kI64, 9007199254740993.0, buffer);  // 2^53 + 1 is not a double: 2^53
  int64_t i64;
  std::memcpy(&i64, buffer, 8);
  EXPECT_EQ(i64, int64_t{1} << 53);
}

}  // namespace
}  // namespace tessel
