// Element-wise reduction of n buffers into one: the arithmetic of every reducing collective.
//
//   const void* inputs[3] = {a, b, c};
//   reduce(out, nullptr, inputs, 3, count, DataType::kBfloat16, RedOp::kSum, 3);
//
// f16 and bf16 are widened to f32, combined in f32 across all n inputs and rounded once (to
// nearest even; the conversions are branch-free copies of support/dtype.h's, so the loops
// vectorize). Integers wrap on overflow like unsigned arithmetic. kAvg is the sum divided by
// `avg_divisor`; integers sum in 64 bits for it and the quotient truncates toward zero. `out` may
// be one of the inputs; `out2`, when not null, receives a second copy of the result. The loops are
// compiled twice, for baseline x86-64 and for AVX2+F16C+FMA, and the variant is chosen from cpuid
// at start-up.
#pragma once

#include <cstddef>
#include <cstdint>

#include "dist/types.h"

namespace tessel::dist {

// `stream_out`: write `out` with non-temporal stores (see copy_nontemporal).
void reduce(void* out, void* out2, const void* const* inputs, int ninputs, size_t count,
            DataType type, RedOp op, int avg_divisor, bool stream_out = false);

// memcpy with stores that bypass the cache: for outputs larger than the cache, whose lines would
// otherwise be read from memory before being overwritten and then evict data still needed.
// Call store_fence() before telling another thread that the data is there.
void copy_nontemporal(void* dst, const void* src, size_t bytes);
void store_fence();

// Name of the loop variant in use: "avx2" or "baseline".
const char* reduce_variant();
// The portable loops, whatever the CPU; for tests that check them where AVX2 is chosen.
void reduce_baseline(void* out, void* out2, const void* const* inputs, int ninputs, size_t count,
                     DataType type, RedOp op, int avg_divisor);

}  // namespace tessel::dist
