// AVX2+F16C+FMA build of the reduction loops (compiled with -mavx2 -mf16c -mfma, see
// CMakeLists.txt); reduce.cpp calls it only where cpuid reports those extensions.
#include "dist/reduce_kernels.h"

namespace tessel::dist {

void reduce_avx2(void* out, void* out2, const void* const* inputs, int n, size_t count,
                 DataType type, RedOp op, int avg_divisor, bool stream_out) {
  reduce_any(out, out2, inputs, n, count, type, op, avg_divisor, stream_out);
}

void copy_streaming_avx2(void* dst, const void* src, size_t bytes) {
  copy_streaming(dst, src, bytes);
}

}  // namespace tessel::dist
