// The reduction loops behind reduce.h, written once as templates and included by one .cpp file
// per instruction set (reduce.cpp: baseline x86-64; reduce_avx2.cpp: AVX2+F16C+FMA). Everything
// here has internal linkage, so each file gets its own copy compiled for its own ISA.
//
// Data flows through a block of f32/f64/integer accumulators small enough for L1: load input 0,
// combine inputs 1..n-1, finish (divide for avg, round for f16/bf16) and store. Every inner loop
// is a plain loop over the block that the compiler vectorizes.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "dist/reduce.h"
#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace tessel::dist {
namespace {

constexpr size_t kBlock = 1024;

struct F16 {  // storage tags for the two 16-bit floating types
  uint16_t bits;
};
struct BF16 {
  uint16_t bits;
};

inline float bits_to_f32(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
inline uint32_t f32_to_bits(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  return bits;
}

// Branch-free binary16 conversions (the method of Maratyszcza's FP16 library), so that the
// loops using them still vectorize where F16C is missing.
inline float half_bits_to_float(uint16_t h) {
  const uint32_t w = static_cast<uint32_t>(h) << 16;
  const uint32_t sign = w & 0x80000000u;
  const uint32_t two_w = w + w;
  const float normalized = bits_to_f32((two_w >> 4) + (0xE0u << 23)) * 0x1.0p-112f;
  const float denormalized = bits_to_f32((two_w >> 17) | (126u << 23)) - 0.5f;
  const uint32_t result =
      sign | (two_w < (1u << 27) ? f32_to_bits(denormalized) : f32_to_bits(normalized));
  return bits_to_f32(result);
}

inline uint16_t float_to_half_bits(float f) {
  float base = (std::abs(f) * 0x1.0p+112f) * 0x1.0p-110f;
  const uint32_t w = f32_to_bits(f);
  const uint32_t shl1_w = w + w;
  const uint32_t sign = w & 0x80000000u;
  uint32_t bias = shl1_w & 0xFF000000u;
  if (bias < 0x71000000u) bias = 0x71000000u;
  base = bits_to_f32((bias >> 1) + 0x07800000u) + base;
  const uint32_t bits = f32_to_bits(base);
  const uint32_t exp_bits = (bits >> 13) & 0x00007C00u;
  const uint32_t mantissa_bits = bits & 0x00000FFFu;
  const uint32_t nonsign = exp_bits + mantissa_bits;
  return static_cast<uint16_t>((sign >> 16) | (shl1_w > 0xFF000000u ? 0x7E00u : nonsign));
}

inline float bfloat_bits_to_float(uint16_t b) {
  return bits_to_f32(static_cast<uint32_t>(b) << 16);
}

inline uint16_t float_to_bfloat_bits(float f) {
  const uint32_t w = f32_to_bits(f);
  const uint32_t rounded = (w + 0x7FFFu + ((w >> 16) & 1u)) >> 16;
  const bool nan = (w & 0x7FFFFFFFu) > 0x7F800000u;
  return static_cast<uint16_t>(nan ? ((w >> 16) | 0x40u) : rounded);
}

// Storage type -> accumulator type. Signed integers accumulate as unsigned so that overflow
// wraps instead of being undefined.
template <typename S>
struct Acc {
  using type = S;
};
template <>
struct Acc<int8_t> {
  using type = uint8_t;
};
template <>
struct Acc<int32_t> {
  using type = uint32_t;
};
template <>
struct Acc<int64_t> {
  using type = uint64_t;
};
template <>
struct Acc<F16> {
  using type = float;
};
template <>
struct Acc<BF16> {
  using type = float;
};

// Converts a block of storage values into accumulators.
template <typename S, typename A>
inline void load_block(A* acc, const S* in, size_t len) {
  if constexpr (std::is_same_v<S, F16>) {
    const uint16_t* bits = reinterpret_cast<const uint16_t*>(in);
    size_t j = 0;
#if defined(__F16C__)
    for (; j + 8 <= len; j += 8)
      _mm256_storeu_ps(
          acc + j, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(bits + j))));
#endif
    for (; j < len; ++j)
      acc[j] = half_bits_to_float(bits[j]);
  } else if constexpr (std::is_same_v<S, BF16>) {
    const uint16_t* bits = reinterpret_cast<const uint16_t*>(in);
    for (size_t j = 0; j < len; ++j)
      acc[j] = bfloat_bits_to_float(bits[j]);
  } else {
    for (size_t j = 0; j < len; ++j)
      acc[j] = static_cast<A>(in[j]);
  }
}

// Rounds a block of accumulators into storage.
template <typename S, typename A>
inline void store_block(S* out, const A* acc, size_t len) {
  if constexpr (std::is_same_v<S, F16>) {
    uint16_t* bits = reinterpret_cast<uint16_t*>(out);
    size_t j = 0;
#if defined(__F16C__)
    for (; j + 8 <= len; j += 8)
      _mm_storeu_si128(reinterpret_cast<__m128i*>(bits + j),
                       _mm256_cvtps_ph(_mm256_loadu_ps(acc + j), _MM_FROUND_TO_NEAREST_INT));
#endif
    for (; j < len; ++j)
      bits[j] = float_to_half_bits(acc[j]);
  } else if constexpr (std::is_same_v<S, BF16>) {
    uint16_t* bits = reinterpret_cast<uint16_t*>(out);
    for (size_t j = 0; j < len; ++j)
      bits[j] = float_to_bfloat_bits(acc[j]);
  } else {
    for (size_t j = 0; j < len; ++j)
      out[j] = static_cast<S>(acc[j]);
  }
}

// Copies with stores that bypass the cache (see reduce.h); whatever is not aligned goes through
// memcpy.
inline void copy_streaming(void* dst_v, const void* src_v, size_t bytes) {
  auto* dst = static_cast<unsigned char*>(dst_v);
  auto* src = static_cast<const unsigned char*>(src_v);
#if defined(__AVX2__)
  constexpr size_t kVector = 32;
#elif defined(__SSE2__)
  constexpr size_t kVector = 16;
#else
  constexpr size_t kVector = 0;
#endif
  if constexpr (kVector > 0) {
    size_t head = (kVector - reinterpret_cast<uintptr_t>(dst) % kVector) % kVector;
    if (bytes >= head + kVector) {
      std::memcpy(dst, src, head);
      dst += head, src += head, bytes -= head;
      for (; bytes >= kVector; dst += kVector, src += kVector, bytes -= kVector) {
#if defined(__AVX2__)
        _mm256_stream_si256(reinterpret_cast<__m256i*>(dst),
                            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src)));
#elif defined(__SSE2__)
        _mm_stream_si128(reinterpret_cast<__m128i*>(dst),
                         _mm_loadu_si128(reinterpret_cast<const __m128i*>(src)));
#endif
      }
    }
  }
  std::memcpy(dst, src, bytes);
}

template <typename A>
struct SumOp {
  A operator()(A a, A b) const { return a + b; }
};
template <typename A>
struct ProdOp {
  A operator()(A a, A b) const { return a * b; }
};
template <typename A>
struct MaxOp {
  A operator()(A a, A b) const { return b > a ? b : a; }
};
template <typename A>
struct MinOp {
  A operator()(A a, A b) const { return b < a ? b : a; }
};

// Max and min compare in the signed domain, so for them a signed type stays signed.
template <template <typename> class Op>
inline constexpr bool kCompares = false;
template <>
inline constexpr bool kCompares<MaxOp> = true;
template <>
inline constexpr bool kCompares<MinOp> = true;

// Integers being averaged accumulate in 64 bits, so the mean of values of the type is exact.
template <typename S, template <typename> class Op, bool kAverage>
using AccumulatorOf = std::conditional_t<
    std::is_integral_v<S> && kAverage, uint64_t,
    std::conditional_t<kCompares<Op> && std::is_integral_v<S>, S, typename Acc<S>::type>>;

// Writes a block of results to `out` (around the cache if `stream`) and to `out2`.
template <typename S>
inline void emit_block(S* out, S* out2, const S* block, size_t len, bool stream) {
  if (stream) {
    copy_streaming(out, block, len * sizeof(S));
  } else {
    std::memcpy(out, block, len * sizeof(S));
  }
  if (out2) std::memcpy(out2, block, len * sizeof(S));
}

// Where storage and accumulator types agree (f32, f64 and integer sum, prod, max, min), inputs
// are combined element by element straight from memory: the first two in one pass, the rest
// into that block while it is in L1.
template <typename S, template <typename> class Op>
void reduce_direct(S* out, S* out2, const void* const* inputs_v, int n, size_t count,
                   bool stream) {
  const Op<S> op;
  alignas(64) S acc[kBlock];
  for (size_t base = 0; base < count; base += kBlock) {
    const size_t len = std::min(kBlock, count - base);
    const S* a = static_cast<const S*>(inputs_v[0]) + base;
    if (n == 1) {
      for (size_t j = 0; j < len; ++j) acc[j] = a[j];
    } else {
      const S* b = static_cast<const S*>(inputs_v[1]) + base;
      for (size_t j = 0; j < len; ++j) acc[j] = op(a[j], b[j]);
      for (int k = 2; k < n; ++k) {
        const S* in = static_cast<const S*>(inputs_v[k]) + base;
        for (size_t j = 0; j < len; ++j) acc[j] = op(acc[j], in[j]);
      }
    }
    emit_block(out + base, out2 ? out2 + base : nullptr, acc, len, stream);
  }
}

template <typename S, template <typename> class Op, bool kAverage = false>
void reduce_loop(void* out_v, void* out2_v, const void* const* inputs_v, int n, size_t count,
                 int avg_divisor, bool stream_out) {
  using A = AccumulatorOf<S, Op, kAverage>;
  S* out = static_cast<S*>(out_v);
  S* out2 = static_cast<S*>(out2_v);
  if constexpr (std::is_same_v<S, A> && !kAverage) {
    return reduce_direct<S, Op>(out, out2, inputs_v, n, count, stream_out);
  } else {
    const Op<A> op;
    alignas(64) A acc[kBlock];
    alignas(64) A tmp[kBlock];
    alignas(64) S result[kBlock];
    for (size_t base = 0; base < count; base += kBlock) {
      const size_t len = std::min(kBlock, count - base);
      load_block<S, A>(acc, static_cast<const S*>(inputs_v[0]) + base, len);
      for (int k = 1; k < n; ++k) {
        const S* in = static_cast<const S*>(inputs_v[k]) + base;
        if constexpr (std::is_arithmetic_v<S>) {
          for (size_t j = 0; j < len; ++j) acc[j] = op(acc[j], static_cast<A>(in[j]));
        } else {
          load_block<S, A>(tmp, in, len);
          for (size_t j = 0; j < len; ++j) acc[j] = op(acc[j], tmp[j]);
        }
      }
      if constexpr (kAverage) {
        if constexpr (std::is_floating_point_v<A>) {
          const A divisor = static_cast<A>(avg_divisor);
          for (size_t j = 0; j < len; ++j) acc[j] = acc[j] / divisor;
        } else if constexpr (std::is_signed_v<S>) {
          const int64_t divisor = avg_divisor;
          for (size_t j = 0; j < len; ++j)
            acc[j] = static_cast<uint64_t>(static_cast<int64_t>(acc[j]) / divisor);
        } else {
          const uint64_t divisor = static_cast<uint64_t>(avg_divisor);
          for (size_t j = 0; j < len; ++j) acc[j] = acc[j] / divisor;
        }
      }
      store_block<S, A>(result, acc, len);
      emit_block(out + base, out2 ? out2 + base : nullptr, result, len, stream_out);
    }
  }
}

template <typename S>
void reduce_typed(void* out, void* out2, const void* const* inputs, int n, size_t count, RedOp op,
                  int avg_divisor, bool stream_out) {
  switch (op) {
    case RedOp::kSum:
      return reduce_loop<S, SumOp>(out, out2, inputs, n, count, 0, stream_out);
    case RedOp::kAvg:
      return reduce_loop<S, SumOp, true>(out, out2, inputs, n, count, avg_divisor, stream_out);
    case RedOp::kProd:
      return reduce_loop<S, ProdOp>(out, out2, inputs, n, count, 0, stream_out);
    case RedOp::kMax:
      return reduce_loop<S, MaxOp>(out, out2, inputs, n, count, 0, stream_out);
    case RedOp::kMin:
      return reduce_loop<S, MinOp>(out, out2, inputs, n, count, 0, stream_out);
  }
}

// The entry point each ISA file exports under its own name.
inline void reduce_any(void* out, void* out2, const void* const* inputs, int n, size_t count,
                       DataType type, RedOp op, int avg_divisor, bool stream_out) {
  switch (type) {
    case DataType::kInt8:
      return reduce_typed<int8_t>(out, out2, inputs, n, count, op, avg_divisor, stream_out);
    case DataType::kUint8:
      return reduce_typed<uint8_t>(out, out2, inputs, n, count, op, avg_divisor, stream_out);
    case DataType::kInt32:
      return reduce_typed<int32_t>(out, out2, inputs, n, count, op, avg_divisor, stream_out);
    case DataType::kUint32:
      return reduce_typed<uint32_t>(out, out2, inputs, n, count, op, avg_divisor, stream_out);
    case DataType::kInt64:
      return reduce_typed<int64_t>(out, out2, inputs, n, count, op, avg_divisor, stream_out);
    case DataType::kUint64:
      return reduce_typed<uint64_t>(out, out2, inputs, n, count, op, avg_divisor, stream_out);
    case DataType::kFloat16:
      return reduce_typed<F16>(out, out2, inputs, n, count, op, avg_divisor, stream_out);
    case DataType::kFloat32:
      return reduce_typed<float>(out, out2, inputs, n, count, op, avg_divisor, stream_out);
    case DataType::kFloat64:
      return reduce_typed<double>(out, out2, inputs, n, count, op, avg_divisor, stream_out);
    case DataType::kBfloat16:
      return reduce_typed<BF16>(out, out2, inputs, n, count, op, avg_divisor, stream_out);
  }
}

}  // namespace
}  // namespace tessel::dist
