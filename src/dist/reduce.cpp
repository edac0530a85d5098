// Baseline (x86-64 / any ISA) build of the reduction loops, the f16/bf16 conversions, and the
// choice between this variant and the AVX2 one (reduce_avx2.cpp) made once from cpuid.
#include "dist/reduce.h"

#include <atomic>

#include "dist/reduce_kernels.h"
#include "hw/cpu_features.h"

namespace tessel::dist {

using ReduceFn = void (*)(void*, void*, const void* const*, int, size_t, DataType, RedOp, int,
                          bool);
using CopyFn = void (*)(void*, const void*, size_t);

#if defined(__x86_64__)
void reduce_avx2(void* out, void* out2, const void* const* inputs, int n, size_t count,
                 DataType type, RedOp op, int avg_divisor, bool stream_out);
void copy_streaming_avx2(void* dst, const void* src, size_t bytes);
#endif

namespace {

struct Variant {
  ReduceFn reduce;
  CopyFn copy;
  const char* name;
};

Variant pick_variant() {
#if defined(__x86_64__)
  // hw's cpuid reading, not __builtin_cpu_supports: clang does not know "f16c" there.
  const CpuFeatureSet cpu = detect_cpu_features();
  if (cpu.has(CpuFeature::kAvx2) && cpu.has(CpuFeature::kF16c) && cpu.has(CpuFeature::kFma))
    return {reduce_avx2, copy_streaming_avx2, "avx2"};
#endif
  return {reduce_any, copy_streaming, "baseline"};
}

const Variant& variant() {
  static const Variant chosen = pick_variant();
  return chosen;
}

}  // namespace

void reduce(void* out, void* out2, const void* const* inputs, int ninputs, size_t count,
            DataType type, RedOp op, int avg_divisor, bool stream_out) {
  if (count == 0 || ninputs <= 0) return;
  variant().reduce(out, out2, inputs, ninputs, count, type, op, op == RedOp::kAvg ? avg_divisor : 0,
                   stream_out);
}

void copy_nontemporal(void* dst, const void* src, size_t bytes) {
  if (bytes) variant().copy(dst, src, bytes);
}

void store_fence() {
#if defined(__x86_64__)
  _mm_sfence();
#else
  std::atomic_thread_fence(std::memory_order_seq_cst);
#endif
}

const char* reduce_variant() {
  return variant().name;
}

void reduce_baseline(void* out, void* out2, const void* const* inputs, int ninputs, size_t count,
                     DataType type, RedOp op, int avg_divisor) {
  if (count == 0 || ninputs <= 0) return;
  reduce_any(out, out2, inputs, ninputs, count, type, op, op == RedOp::kAvg ? avg_divisor : 0,
             false);
}

}  // namespace tessel::dist
