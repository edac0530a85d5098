// Tests of the CPU gemm templates (tile_gemm.h), run through every ISA variant that this CPU
// supports (the others are skipped, saying so), against a plain triple loop in double precision
// written here. Shapes include 1, primes and sizes that are not multiples of any tile or
// micro-tile size; tiles are also set small and odd so that one gemm crosses many block, K-step
// and micro-tile edges; both operands are used plain and transposed, with leading dimensions
// larger than the rows; both forms of the contract (edge and padded tiles) and both schedules
// (shared tiles, each block packing its own) are run.
//
// Tolerance per element, with S = sum_k |a_ik| |b_kj| over the values as stored and u = 2^-24:
//   f32, f16 and bf16 inputs, f32 accumulation:  |c - ref| <= 2 K u S   (the bound of any f32
//       summation order, doubled for the paired products of vdpbf16ps)
//   f32 or f16 inputs rounded to bf16 in packing: |c - ref| <= (2^-7 + 2^-16 + 2 K u) S  (each
//       factor off by at most 2^-8 relative, plus the f32 sum)
#include "tile/codegen/cpu/templates/reference_gemm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace tessel::tile {
namespace {

// Conversions written here, independent of the templates' own.
float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
uint16_t round_to_bf16(float f) {  // nearest even; test data has no NaN
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
float bf16_value(uint16_t h) {
  return bits_float(uint32_t(h) << 16);
}
uint16_t to_f16(float f) {  // for |f| in [2^-14, 65504] or 0, which is all the data here
  if (f == 0) return 0;
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const int exponent = int((u >> 23) & 0xff) - 127 + 15;
  uint32_t mantissa = u & 0x7fffffu;
  uint32_t h = sign | uint32_t(exponent) << 10 | mantissa >> 13;
  const uint32_t rest = mantissa & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;
  return uint16_t(h);
}
float f16_value(uint16_t h) {
  const int exponent = (h >> 10) & 0x1f;
  const float magnitude = exponent == 0 ? std::ldexp(float(h & 0x3ff), -24)
                                        : std::ldexp(float((h & 0x3ff) | 0x400), exponent - 25);
  return (h & 0x8000) ? -magnitude : magnitude;
}

struct Operand {
  std::vector<float> values;   // the element values as stored, row-major rows x cols
  std::vector<float> f32;      // storage as f32
  std::vector<uint16_t> bits;  // storage as f16 or bf16
  int64_t row_stride = 0, col_stride = 0;
};

// A rows x cols operand with random values exactly representable in `input`, stored plain
// (row-major, leading dimension cols + 3) or transposed (column-major, leading dimension rows + 5).
Operand make_operand(int64_t rows, int64_t cols, GemmInput input, bool transposed,
                     std::mt19937& rng) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  Operand op;
  const int64_t ld = transposed ? rows + 5 : cols + 3;
  const int64_t storage = (transposed ? cols : rows) * ld;
  op.row_stride = transposed ? 1 : ld;
  op.col_stride = transposed ? ld : 1;
  op.values.resize(size_t(rows * cols));
  op.f32.assign(size_t(storage), std::numeric_limits<float>::quiet_NaN());  // gaps stay NaN
  op.bits.assign(size_t(storage), 0x7e00);                                  // NaN in f16 and bf16
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) {
      float v = dist(rng);
      if (std::fabs(v) < 1e-3f) v = 0.5f;  // keep f16 values normal
      const size_t at = size_t(i * op.row_stride + j * op.col_stride);
      if (input == GemmInput::kBf16) {
        op.bits[at] = round_to_bf16(v);
        v = bf16_value(op.bits[at]);
      } else if (input == GemmInput::kF16) {
        op.bits[at] = to_f16(v);
        v = f16_value(op.bits[at]);
      }
      op.f32[at] = v;
      op.values[size_t(i * cols + j)] = v;
    }
  return op;
}

struct Case {
  int64_t m, n, k;
  GemmInput input;
  bool bf16_compute;
  bool a_transposed, b_transposed;
};

std::string describe(const Case& c, const ReferenceGemmCall& call) {
  return std::string(gemm_input_name(c.input)) + (c.bf16_compute ? "->bf16" : "") +
         " m=" + std::to_string(c.m) + " n=" + std::to_string(c.n) + " k=" + std::to_string(c.k) +
         (c.a_transposed ? " A^T" : "") + (c.b_transposed ? " B^T" : "") +
         (call.bm == 0 ? std::string(" default tiles")
                       : " tiles=" + std::to_string(call.bm) + "x" + std::to_string(call.bn) + "x" +
                             std::to_string(call.bk)) +
         (call.share_tiles ? " shared" : " per-block") + (call.padded_tiles ? " padded" : " edge") +
         (call.read_a_in_place ? "" : " A packed") + (call.read_b_in_place ? "" : " B packed") +
         " threads=" + std::to_string(call.threads);
}

class ReferenceGemmTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (!ReferenceGemm::supported_here(GetParam()))
      GTEST_SKIP() << "this CPU does not run the " << GetParam() << " variant";
    Expected<ReferenceGemm> gemm = ReferenceGemm::create(GetParam());
    ASSERT_TRUE(gemm.ok()) << gemm.status().to_string();
    gemm_.emplace(std::move(gemm).value());
  }

  // Runs `c` under each call setting in `settings` and checks every element against the double
  // reference, and that C's padding columns are left alone.
  void check(const Case& c, const std::vector<ReferenceGemmCall>& settings) {
    std::mt19937 rng(uint32_t(c.m * 1000003 + c.n * 1009 + c.k));
    const Operand a = make_operand(c.m, c.k, c.input, c.a_transposed, rng);
    const Operand b = make_operand(c.k, c.n, c.input, c.b_transposed, rng);
    std::vector<double> ref(size_t(c.m * c.n)), bound(size_t(c.m * c.n));
    const double u = std::ldexp(1.0, -24);
    const double relative = c.bf16_compute ? std::ldexp(1.0, -7) + std::ldexp(1.0, -16) : 0.0;
    for (int64_t i = 0; i < c.m; ++i)
      for (int64_t j = 0; j < c.n; ++j) {
        double sum = 0, magnitude = 0;
        for (int64_t p = 0; p < c.k; ++p) {
          const double x = a.values[size_t(i * c.k + p)], y = b.values[size_t(p * c.n + j)];
          sum += x * y;
          magnitude += std::fabs(x * y);
        }
        ref[size_t(i * c.n + j)] = sum;
        bound[size_t(i * c.n + j)] = (relative + 2.0 * double(c.k) * u) * magnitude;
      }
    const bool stored_as_bits = c.input != GemmInput::kF32;
    const int64_t ldc = c.n + 2;
    for (ReferenceGemmCall call : settings) {
      call.m = c.m;
      call.n = c.n;
      call.k = c.k;
      call.input = c.input;
      call.bf16_compute = c.bf16_compute;
      call.a = stored_as_bits ? static_cast<const void*>(a.bits.data()) : a.f32.data();
      call.a_row_stride = a.row_stride;
      call.a_col_stride = a.col_stride;
      call.b = stored_as_bits ? static_cast<const void*>(b.bits.data()) : b.f32.data();
      call.b_row_stride = b.row_stride;
      call.b_col_stride = b.col_stride;
      std::vector<float> out(size_t(c.m * ldc), std::numeric_limits<float>::quiet_NaN());
      for (int64_t i = 0; i < c.m; ++i)
        out[size_t(i * ldc + c.n)] = 1234.5f;  // padding
      call.c = out.data();
      call.ldc = ldc;
      ASSERT_TRUE(gemm_->run(call).ok()) << describe(c, call);
      int64_t bad = 0;
      for (int64_t i = 0; i < c.m; ++i) {
        for (int64_t j = 0; j < c.n; ++j) {
          const double got = out[size_t(i * ldc + j)], want = ref[size_t(i * c.n + j)];
          if (!(std::fabs(got - want) <= bound[size_t(i * c.n + j)] + 1e-30) && bad++ < 3)
            ADD_FAILURE() << describe(c, call) << ": C(" << i << "," << j << ") = " << got
                          << ", want " << want << " +- " << bound[size_t(i * c.n + j)];
        }
        if (out[size_t(i * ldc + c.n)] != 1234.5f && bad++ < 3)
          ADD_FAILURE() << describe(c, call) << ": wrote past column n in row " << i;
      }
      if (bad > 0) return;
    }
  }

  // Every schedule and form, with the variant's default tiles and with small odd ones (20 rows:
  // not a multiple of any MR; 40 columns: not a multiple of NR 32; 33: odd, not a K pair). Form
  // 3 packs A where forms 0 and 1 read it in place (when the types and strides allow); form 4
  // packs B where form 1 reads it in place (per-block tiles, row-major f32, a whole panel).
  static std::vector<ReferenceGemmCall> all_settings() {
    std::vector<ReferenceGemmCall> settings;
    for (int small = 0; small < 2; ++small)
      for (int form = 0; form < 5; ++form) {
        ReferenceGemmCall call;
        if (small) {
          call.bm = 20;
          call.bn = 40;
          call.bk = 33;
        }
        call.share_tiles = form != 1;
        call.padded_tiles = form == 2;
        call.read_a_in_place = form != 3;
        call.read_b_in_place = form != 4;
        call.threads = form == 0 ? 2 : form == 1 ? 3 : 1;
        settings.push_back(call);
      }
    return settings;
  }

  std::optional<ReferenceGemm> gemm_;
};

const GemmInput kInputs[] = {GemmInput::kF32, GemmInput::kF16, GemmInput::kBf16};

TEST_P(ReferenceGemmTest, SmallAndDegenerateShapesEveryTypeAndTranspose) {
  const int64_t shapes[][3] = {{1, 1, 1}, {1, 1, 70}, {1, 53, 1},   {47, 1, 1},
                               {2, 3, 2}, {7, 13, 5}, {13, 33, 66}, {31, 67, 97}};
  for (const auto& s : shapes)
    for (GemmInput input : kInputs)
      for (int mixed = 0; mixed < (input == GemmInput::kBf16 ? 1 : 2); ++mixed)
        for (int t = 0; t < 4; ++t)
          check({s[0], s[1], s[2], input, mixed == 1, (t & 1) != 0, (t & 2) != 0}, all_settings());
}

TEST_P(ReferenceGemmTest, ShapesAcrossDefaultTiles) {
  // Past one default block in every direction (192 x 256 x 384 f32, x 512 bf16 on AVX-512).
  const int64_t shapes[][3] = {{197, 263, 521}, {389, 37, 257}};
  for (const auto& s : shapes)
    for (GemmInput input : kInputs)
      for (int t = 0; t < 4; t += 3) {
        ReferenceGemmCall shared, per_block, a_packed;
        shared.threads = 2;
        per_block.threads = 2;
        per_block.share_tiles = false;
        a_packed.threads = 2;
        a_packed.read_a_in_place = false;
        check({s[0], s[1], s[2], input, false, t != 0, t != 0}, {shared, per_block, a_packed});
      }
  ReferenceGemmCall call;
  call.threads = 2;
  check({197, 263, 521, GemmInput::kF32, true, false, false}, {call});
}

// Every width of a last micro-tile panel, N = 1..17 and past two panels: the AVX2 variant runs a
// half-wide micro-tile on a last panel of at most 8 columns (exactly 8 with whole rows writes
// acc directly, the rest through the edge copy). M = 12 is whole micro-tiles of 6, 13 is not;
// K = 37 crosses the small tiles' K step (33), so later steps accumulate; operands plain and
// transposed (K contiguous, so packing transposes 8 x 8 in registers, with a ragged last group).
TEST_P(ReferenceGemmTest, EveryLastPanelWidthPlainAndTransposed) {
  for (int64_t n = 1; n <= 17; ++n)
    for (int64_t m : {12, 13})
      for (int t = 0; t < 4; ++t)
        check({m, n, 37, GemmInput::kF32, false, (t & 1) != 0, (t & 2) != 0}, all_settings());
  for (int64_t n : {24, 25, 31})
    for (GemmInput input : kInputs)
      check({19, n, 40, input, false, false, true}, all_settings());
}

// Rows of A 4 KiB apart are packed rather than read in place (tile_gemm.h, can_read_a_in_place):
// that path and the in-place one next to it, plain and transposed B, 1 and 2 threads. A's
// leading dimension is k + 3 (make_operand), so k = 1021 puts f32 rows 4 KiB apart.
TEST_P(ReferenceGemmTest, RowsOfAFourKiBApartAndTheirNeighbours) {
  for (GemmInput input : {GemmInput::kF32, GemmInput::kBf16}) {
    const int64_t aliasing_k = (input == GemmInput::kBf16 ? 2048 : 1024) - 3;
    for (int64_t k : {aliasing_k, aliasing_k + 16, aliasing_k + 2})
      for (int t = 0; t < 2; ++t) {
        ReferenceGemmCall one, two;
        two.threads = 2;
        check({29, 40, k, input, false, false, t != 0}, {one, two});
      }
  }
}

// B read in place (tile_gemm.h, gemm_direct_b): row-major f32 B whose rows are ldb = n + 3
// apart (make_operand), so n = 1021 puts them 4 KiB apart, where B is packed instead; its
// neighbours read in place. N = 16..49 crosses whole panels of 16 (AVX2) and 32 (AVX-512) with
// every kind of packed last panel; M and K odd; A plain (read in place too) and transposed
// (packed); one and two threads, small tiles (several K steps). Per-block tiles only: a tile
// shared by blocks is packed (the generated code's rule, cpu_renderer).
TEST_P(ReferenceGemmTest, RowMajorBReadInPlaceEveryPanelWidth) {
  ReferenceGemmCall one, two, shared, small, b_packed;
  for (ReferenceGemmCall* call : {&one, &two, &small, &b_packed})
    call->share_tiles = false;
  two.threads = 2;
  shared.threads = 2;
  small.bm = 20;
  small.bn = 40;
  small.bk = 33;
  b_packed.read_b_in_place = false;
  for (int64_t n = 16; n <= 49; ++n)
    for (int t = 0; t < 2; ++t)
      check({n % 2 ? 13 : 17, n, 37, GemmInput::kF32, false, t != 0, false},
            {one, two, shared, small});
  for (int64_t n : {1021, 1021 + 16, 1021 + 2})
    check({29, n, 45, GemmInput::kF32, false, false, false}, {one, two, b_packed});
}

TEST_P(ReferenceGemmTest, ZeroKClearsC) {
  std::vector<float> c(6, 7.0f);
  ReferenceGemmCall call;
  call.m = 2;
  call.n = 3;
  call.k = 0;
  call.c = c.data();
  call.ldc = 3;
  ASSERT_TRUE(gemm_->run(call).ok());
  for (float x : c)
    EXPECT_EQ(x, 0.0f);
}

TEST_P(ReferenceGemmTest, RejectsMalformedCalls) {
  float x = 0;
  ReferenceGemmCall call;
  call.m = call.n = call.k = 1;
  call.b = &x;
  call.b_row_stride = call.b_col_stride = 1;
  call.c = &x;
  call.ldc = 1;
  call.a_row_stride = call.a_col_stride = 1;
  Status missing_a = gemm_->run(call);
  EXPECT_EQ(missing_a.code(), Code::kInvalidArgument);
  EXPECT_NE(missing_a.message().find("A is null"), std::string::npos) << missing_a.message();
  call.a = &x;
  call.ldc = 0;
  EXPECT_EQ(gemm_->run(call).code(), Code::kInvalidArgument);
  call.ldc = 1;
  call.m = -1;
  EXPECT_EQ(gemm_->run(call).code(), Code::kInvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(Isa, ReferenceGemmTest,
                         ::testing::ValuesIn(ReferenceGemm::compiled_isas()),
                         [](const auto& info) { return info.param; });

TEST(ReferenceGemm, BestVariantRunsHereAndUnknownNamesAreErrors) {
  Expected<ReferenceGemm> best = ReferenceGemm::create();
  ASSERT_TRUE(best.ok()) << best.status().to_string();
  EXPECT_TRUE(ReferenceGemm::supported_here(best->isa()));
  EXPECT_EQ(ReferenceGemm::compiled_isas().back(), "portable");
  Expected<ReferenceGemm> unknown = ReferenceGemm::create("sse9");
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.status().code(), Code::kNotFound);
  EXPECT_NE(unknown.status().message().find("portable"), std::string::npos);
}

}  // namespace
}  // namespace tessel::tile
