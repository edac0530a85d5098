// Baseline (x86-64 / any ISA) build of the reduction loops, the f16/bf16 conversions, and the
// choice between this variant and the AVX2 one (reduce_avx2.cpp) made once from cpuid.
#include "dist/reduce.h"

#include "dist/reduce_kernels.h"

namespace tessel::dist {

using ReduceFn = void (*)(void*, void*, const void* const*, int, size_t, DataType, RedOp, int);

#if defined(__x86_64__)
void reduce_avx2(void* out, void* out2, const void* const* inputs, int n, size_t count,
                 DataType type, RedOp op, int avg_divisor);
#endif

namespace {

struct Variant {
  ReduceFn fn;
  const char* name;
};

Variant pick_variant() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c") &&
      __builtin_cpu_supports("fma"))
    return {reduce_avx2, "avx2"};
#endif
  return {reduce_any, "baseline"};
}

const Variant& variant() {
  static const Variant chosen = pick_variant();
  return chosen;
}

}  // namespace

void reduce(void* out, void* out2, const void* const* inputs, int ninputs, size_t count,
            DataType type, RedOp op, int avg_divisor) {
  if (count == 0 || ninputs <= 0) return;
  variant().fn(out, out2, inputs, ninputs, count, type, op, op == RedOp::kAvg ? avg_divisor : 0);
}

const char* reduce_variant() { return variant().name; }

void reduce_baseline(void* out, void* out2, const void* const* inputs, int ninputs, size_t count,
                     DataType type, RedOp op, int avg_divisor) {
  if (count == 0 || ninputs <= 0) return;
  reduce_any(out, out2, inputs, ninputs, count, type, op, op == RedOp::kAvg ? avg_divisor : 0);
}

}  // namespace tessel::dist
