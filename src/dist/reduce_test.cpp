// Checks the reduction loops against a plain reference: exact integer arithmetic (wrapped to
// the type's width), doubles for floats, GCC's _Float16 for binary16, and a
// nearest-of-two-candidates rounding for bfloat16 (element access and rounding shared with the
// collective tests in dist/testing/collective_check.h, none of it tessel's conversion code).
#include "dist/reduce.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "dist/testing/collective_check.h"

namespace tessel::dist {
namespace {

using testing::bf16_bits_to_float;
using testing::combine;
using testing::float_to_bf16_bits;
using testing::load_value;
using testing::store_value;

// One f16 input is widened to f32 and rounded back: every bit pattern must survive.
TEST(Reduce, HalfValuesRoundTripThroughTheF32Accumulator) {
  std::vector<uint16_t> all(0x10000), out(0x10000);
  for (uint32_t bits = 0; bits < 0x10000; ++bits)
    all[bits] = static_cast<uint16_t>(bits);
  for (DataType type : {DataType::kFloat16, DataType::kBfloat16}) {
    const void* in[1] = {all.data()};
    reduce(out.data(), nullptr, in, 1, all.size(), type, RedOp::kMax, 1);
    auto is_nan = [&](uint32_t bits) {
      return type == DataType::kFloat16 ? (bits & 0x7C00) == 0x7C00 && (bits & 0x3FF)
                                        : (bits & 0x7F80) == 0x7F80 && (bits & 0x7F);
    };
    for (uint32_t bits = 0; bits < 0x10000; ++bits) {
      if (is_nan(bits)) {
        EXPECT_TRUE(is_nan(out[bits]))
            << dtype_name(type) << " NaN " << bits << " became " << out[bits];
        continue;
      }
      ASSERT_EQ(out[bits], bits) << dtype_name(type) << " bits " << bits;
    }
  }
}

// Sums of two values round once, to nearest even: compare with GCC's _Float16 arithmetic and
// with a bfloat16 rounding written here.
TEST(Reduce, SixteenBitSumsRoundLikeTheReference) {
  std::mt19937 rng(1);
  std::uniform_int_distribution<uint32_t> any(0, 0xFFFF);
  const size_t n = 200000;
  std::vector<uint16_t> a(n), b(n), out(n);
  for (size_t i = 0; i < n; ++i) {
    a[i] = static_cast<uint16_t>(any(rng) & 0x7BFF);  // finite, either sign
    b[i] = static_cast<uint16_t>(any(rng) & 0x7BFF);
  }
  const void* in[2] = {a.data(), b.data()};
  reduce(out.data(), nullptr, in, 2, n, DataType::kFloat16, RedOp::kSum, 2);
  for (size_t i = 0; i < n; ++i) {
    _Float16 x, y;
    std::memcpy(&x, &a[i], 2);
    std::memcpy(&y, &b[i], 2);
    _Float16 want = static_cast<_Float16>(static_cast<float>(x) + static_cast<float>(y));
    uint16_t want_bits;
    std::memcpy(&want_bits, &want, 2);
    ASSERT_EQ(out[i], want_bits) << "f16 " << a[i] << " + " << b[i];
  }
  for (size_t i = 0; i < n; ++i) {
    a[i] = static_cast<uint16_t>(any(rng) & 0x7F7F);
    b[i] = static_cast<uint16_t>(any(rng) & 0x7F7F);
  }
  reduce(out.data(), nullptr, in, 2, n, DataType::kBfloat16, RedOp::kSum, 2);
  for (size_t i = 0; i < n; ++i) {
    float sum = bf16_bits_to_float(a[i]) + bf16_bits_to_float(b[i]);
    if (std::isinf(bf16_bits_to_float(float_to_bf16_bits(sum)))) continue;
    ASSERT_EQ(out[i], float_to_bf16_bits(sum)) << "bf16 " << a[i] << " + " << b[i];
  }
}

template <typename T>
T wrap(int64_t exact) {
  return static_cast<T>(static_cast<uint64_t>(exact));
}

struct Case {
  DataType type;
  RedOp op;
  int n;
  size_t count;
};

// Element i of input k, as a double the type represents exactly.
double input_value(DataType type, RedOp op, int k, size_t i) {
  uint64_t h = (i * 2654435761u + k * 40503u + 12345u) % 1000003u;
  if (op == RedOp::kProd) {
    static const double kProdValues[] = {1, -1, 2, 0.5, 1, -2, 1, 1.5};
    double v = kProdValues[h % 8];
    if (!is_floating(type)) v = std::trunc(v);
    if (type == DataType::kUint8 || type == DataType::kUint32 || type == DataType::kUint64)
      v = std::abs(v);
    return v;
  }
  if (is_floating(type)) return (static_cast<double>(h % 512) - 256.0) / 16.0;
  double v = static_cast<double>(h % 201) - 100.0;
  if (type == DataType::kUint8 || type == DataType::kUint32 || type == DataType::kUint64)
    v = std::abs(v);
  return v;
}

// What the type holds after storing the exact result `v` (integers wrap, floats round).
double expected_stored(DataType type, double v) {
  std::vector<unsigned char> cell(8);
  switch (type) {
    case DataType::kInt8:
      return static_cast<int8_t>(wrap<uint8_t>(static_cast<int64_t>(v)));
    case DataType::kUint8:
      return wrap<uint8_t>(static_cast<int64_t>(v));
    case DataType::kInt32:
      return static_cast<int32_t>(wrap<uint32_t>(static_cast<int64_t>(v)));
    case DataType::kUint32:
      return wrap<uint32_t>(static_cast<int64_t>(v));
    default:
      store_value(type, cell.data(), 0, v);
      return load_value(type, cell.data(), 0);
  }
}

double reference(const Case& c, size_t i) {
  double acc = input_value(c.type, c.op, 0, i);
  for (int k = 1; k < c.n; ++k)
    acc = combine(c.op, acc, input_value(c.type, c.op, k, i));
  if (c.op == RedOp::kAvg) acc = is_floating(c.type) ? acc / c.n : std::trunc(acc / c.n);
  return acc;
}

using ReduceFn = void (*)(void*, void*, const void* const*, int, size_t, DataType, RedOp, int);

void reduce_cached(void* out, void* out2, const void* const* inputs, int n, size_t count,
                   DataType type, RedOp op, int avg_divisor) {
  reduce(out, out2, inputs, n, count, type, op, avg_divisor);
}
void reduce_streamed(void* out, void* out2, const void* const* inputs, int n, size_t count,
                     DataType type, RedOp op, int avg_divisor) {
  reduce(out, out2, inputs, n, count, type, op, avg_divisor, /*stream_out=*/true);
  store_fence();
}

void run_case(const Case& c, bool in_place, ReduceFn fn = reduce_cached) {
  const size_t elem = dtype_size(c.type);
  std::vector<std::vector<unsigned char>> in(c.n, std::vector<unsigned char>(c.count * elem + 1));
  for (int k = 0; k < c.n; ++k)
    for (size_t i = 0; i < c.count; ++i)
      store_value(c.type, in[k].data(), i, input_value(c.type, c.op, k, i));
  std::vector<unsigned char> out(c.count * elem + 1, 0xEE), out2(c.count * elem + 1, 0xDD);
  std::vector<const void*> ptrs;
  for (auto& v : in)
    ptrs.push_back(v.data());
  void* dst = in_place ? in[0].data() : out.data();
  fn(dst, out2.data(), ptrs.data(), c.n, c.count, c.type, c.op, c.n);
  for (size_t i = 0; i < c.count; ++i) {
    double want = expected_stored(c.type, reference(c, i));
    double got = load_value(c.type, dst, i);
    double got2 = load_value(c.type, out2.data(), i);
    // Inputs are exact in every type and sums stay small, so f32 accumulation is exact and the
    // only rounding is the final one (avg); allow one unit in the last place of the storage type.
    double ulp = c.type == DataType::kFloat16    ? 0x1.0p-10
                 : c.type == DataType::kBfloat16 ? 0x1.0p-7
                 : c.type == DataType::kFloat32  ? 0x1.0p-23
                                                 : 0x1.0p-52;
    double tol = is_floating(c.type) ? ulp * std::max(1.0, std::abs(want)) : 0.0;
    ASSERT_NEAR(got, want, tol) << dtype_name(c.type) << " " << redop_name(c.op) << " n=" << c.n
                                << " count=" << c.count << " i=" << i;
    ASSERT_EQ(got, got2) << "second output differs at " << i;
  }
  if (!in_place) {
    EXPECT_EQ(out[c.count * elem], 0xEE) << "wrote past the end";
  }
  EXPECT_EQ(out2[c.count * elem], 0xDD) << "wrote past the end";
}

TEST(Reduce, EveryTypeAndOperatorMatchesReference) {
  for (int t = 0; t < kNumDataTypes; ++t)
    for (int o = 0; o < kNumRedOps; ++o)
      for (int n : {1, 2, 3, 8})
        for (size_t count :
             {size_t{0}, size_t{1}, size_t{7}, size_t{1023}, size_t{1025}, size_t{4099}})
          run_case({static_cast<DataType>(t), static_cast<RedOp>(o), n, count}, false);
}

TEST(Reduce, BaselineLoopsMatchReference) {
  for (int t = 0; t < kNumDataTypes; ++t)
    for (int o = 0; o < kNumRedOps; ++o)
      run_case({static_cast<DataType>(t), static_cast<RedOp>(o), 3, 2051}, false, reduce_baseline);
}

TEST(Reduce, StreamedOutputMatchesReference) {
  for (int t = 0; t < kNumDataTypes; ++t)
    run_case({static_cast<DataType>(t), RedOp::kSum, 2, 5003}, false, reduce_streamed);
}

TEST(Reduce, NonTemporalCopyIsACopyAtAnyAlignment) {
  std::vector<unsigned char> src(10000), dst(10000);
  for (size_t i = 0; i < src.size(); ++i)
    src[i] = static_cast<unsigned char>(i * 131 + 7);
  for (size_t offset : {size_t{0}, size_t{1}, size_t{3}, size_t{16}, size_t{31}, size_t{33}})
    for (size_t bytes :
         {size_t{0}, size_t{1}, size_t{31}, size_t{32}, size_t{100}, size_t{4097}, size_t{9000}}) {
      std::fill(dst.begin(), dst.end(), 0);
      copy_nontemporal(dst.data() + offset, src.data() + (offset * 7) % 50, bytes);
      store_fence();
      ASSERT_EQ(std::memcmp(dst.data() + offset, src.data() + (offset * 7) % 50, bytes), 0)
          << offset << " " << bytes;
      ASSERT_EQ(dst[offset + bytes], 0) << "wrote past the end";
      if (offset > 0) {
        ASSERT_EQ(dst[offset - 1], 0) << "wrote before the start";
      }
    }
}

TEST(Reduce, OutputMayBeAnInput) {
  for (int t = 0; t < kNumDataTypes; ++t)
    run_case({static_cast<DataType>(t), RedOp::kSum, 3, 3001}, true);
}

TEST(Reduce, IntegersWrapLikeUnsignedArithmetic) {
  int8_t a[2] = {100, -100}, b[2] = {100, -100}, out[2];
  const void* in[2] = {a, b};
  reduce(out, nullptr, in, 2, 2, DataType::kInt8, RedOp::kSum, 2);
  EXPECT_EQ(out[0], static_cast<int8_t>(200 - 256));
  EXPECT_EQ(out[1], static_cast<int8_t>(-200 + 256));
  int32_t c[1] = {-7}, d[1] = {2}, avg[1];
  const void* in2[2] = {c, d};
  reduce(avg, nullptr, in2, 2, 1, DataType::kInt32, RedOp::kAvg, 2);
  EXPECT_EQ(avg[0], -2);  // (-7 + 2) / 2 truncates toward zero
}

TEST(Reduce, VariantIsChosenFromCpuid) {
  std::string variant = reduce_variant();
#if defined(__x86_64__)
  __builtin_cpu_init();
  bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c") &&
              __builtin_cpu_supports("fma");
  EXPECT_EQ(variant, avx2 ? "avx2" : "baseline");
#else
  EXPECT_EQ(variant, "baseline");
#endif
}

}  // namespace
}  // namespace tessel::dist
