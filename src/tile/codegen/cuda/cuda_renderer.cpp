// CUDA spellings for the GPU renderer (see cuda_renderer.h).
#include "tile/codegen/cuda/cuda_renderer.h"

#include "tile/codegen/gpu_renderer.h"

namespace tessel::tile {

namespace {

const char* kPrelude = R"(
#define TESSEL_D static __device__ __forceinline__
TESSEL_D float tessel_bits_f32(unsigned int u) { return __uint_as_float(u); }
TESSEL_D unsigned int tessel_f32_bits(float x) { return __float_as_uint(x); }
TESSEL_D float tessel_f16_to_f32(unsigned short h) {
  unsigned int sign = (unsigned int)(h & 0x8000) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff;
  if (e == 0x1f) return tessel_bits_f32(sign | 0x7f800000u | (m << 13));
  if (e != 0) return tessel_bits_f32(sign | ((e + 112) << 23) | (m << 13));
  return (sign ? -1.0f : 1.0f) * (float)m * 5.9604644775390625e-8f;
}
TESSEL_D unsigned short tessel_f32_to_f16(float x) {
  unsigned int u = tessel_f32_bits(x), sign = (u >> 16) & 0x8000, a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return (unsigned short)(sign | 0x7e00);
  if (a >= 0x477ff000u) return (unsigned short)(sign | 0x7c00);
  if (a < 0x38800000u) return (unsigned short)(sign | (unsigned int)rintf(tessel_bits_f32(a) * 16777216.0f));
  return (unsigned short)(sign | ((a + 0xfffu + ((a >> 13) & 1u) - 0x38000000u) >> 13));
}
TESSEL_D float tessel_bf16_to_f32(unsigned short b) { return tessel_bits_f32((unsigned int)b << 16); }
TESSEL_D unsigned short tessel_f32_to_bf16(float x) {
  unsigned int u = tessel_f32_bits(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40);
  return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
TESSEL_D float tessel_round_f16(float x) { return tessel_f16_to_f32(tessel_f32_to_f16(x)); }
TESSEL_D float tessel_round_bf16(float x) { return tessel_bf16_to_f32(tessel_f32_to_bf16(x)); }
TESSEL_D float tessel_exp(float x) { return expf(x); }
TESSEL_D double tessel_exp(double x) { return exp(x); }
TESSEL_D float tessel_log(float x) { return logf(x); }
TESSEL_D double tessel_log(double x) { return log(x); }
TESSEL_D float tessel_tanh(float x) { return tanhf(x); }
TESSEL_D double tessel_tanh(double x) { return tanh(x); }
TESSEL_D float tessel_erf(float x) { return erff(x); }
TESSEL_D double tessel_erf(double x) { return erf(x); }
TESSEL_D float tessel_sqrt(float x) { return sqrtf(x); }
TESSEL_D double tessel_sqrt(double x) { return sqrt(x); }
TESSEL_D float tessel_rsqrt(float x) { return rsqrtf(x); }
TESSEL_D double tessel_rsqrt(double x) { return rsqrt(x); }
TESSEL_D float tessel_abs(float x) { return fabsf(x); }
TESSEL_D double tessel_abs(double x) { return fabs(x); }
TESSEL_D float tessel_floor(float x) { return floorf(x); }
TESSEL_D double tessel_floor(double x) { return floor(x); }
TESSEL_D float tessel_ceil(float x) { return ceilf(x); }
TESSEL_D double tessel_ceil(double x) { return ceil(x); }
TESSEL_D float tessel_pow(float x, float y) { return powf(x, y); }
TESSEL_D double tessel_pow(double x, double y) { return pow(x, y); }
TESSEL_D float tessel_fmod(float x, float y) { return fmodf(x, y); }
TESSEL_D double tessel_fmod(double x, double y) { return fmod(x, y); }
TESSEL_D float tessel_fmin(float x, float y) { return fminf(x, y); }
TESSEL_D double tessel_fmin(double x, double y) { return fmin(x, y); }
TESSEL_D float tessel_fmax(float x, float y) { return fmaxf(x, y); }
TESSEL_D double tessel_fmax(double x, double y) { return fmax(x, y); }
TESSEL_D long long tessel_imin(long long x, long long y) { return x < y ? x : y; }
TESSEL_D long long tessel_imax(long long x, long long y) { return x > y ? x : y; }
TESSEL_D float tessel_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
TESSEL_D float tessel_relu(float x) { return x > 0.0f ? x : 0.0f; }
TESSEL_D float tessel_gelu(float x) {
  return 0.5f * x * (1.0f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x)));
}

)";

CDialect cuda_dialect() {
  CDialect d;
  d.target = "cuda";
  d.bool_type = "bool";
  d.i8 = "signed char";
  d.u8 = "unsigned char";
  d.i16 = "short";
  d.i32 = "int";
  d.i64 = "long long";
  d.f32 = "float";
  d.f64 = "double";
  d.f16_storage = d.bf16_storage = "unsigned short";
  d.f16_load = "tessel_f16_to_f32";
  d.bf16_load = "tessel_bf16_to_f32";
  d.f16_store = "tessel_f32_to_f16";
  d.bf16_store = "tessel_f32_to_bf16";
  d.f16_round = "tessel_round_f16";
  d.bf16_round = "tessel_round_bf16";
  d.i64_literal_suffix = "LL";
  d.infinity = "__int_as_float(0x7f800000)";
  d.restrict_keyword = "__restrict__";
  d.int_min = "tessel_imin";
  d.int_max = "tessel_imax";
  d.float_min = "tessel_fmin";
  d.float_max = "tessel_fmax";
  d.math = {{MathFn::kExp, "tessel_exp"},   {MathFn::kLog, "tessel_log"},
            {MathFn::kTanh, "tessel_tanh"}, {MathFn::kErf, "tessel_erf"},
            {MathFn::kSqrt, "tessel_sqrt"}, {MathFn::kRsqrt, "tessel_rsqrt"},
            {MathFn::kAbs, "tessel_abs"},   {MathFn::kFloor, "tessel_floor"},
            {MathFn::kCeil, "tessel_ceil"}, {MathFn::kSigmoid, "tessel_sigmoid"},
            {MathFn::kRelu, "tessel_relu"}, {MathFn::kGelu, "tessel_gelu"},
            {MathFn::kPow, "tessel_pow"},   {MathFn::kFmod, "tessel_fmod"}};
  d.reserved = {
      "alignas", "alignof",  "asm",     "auto",      "bool",     "break",    "case",    "catch",
      "char",    "class",    "const",   "constexpr", "continue", "default",  "delete",  "do",
      "double",  "else",     "enum",    "explicit",  "extern",   "false",    "float",   "for",
      "friend",  "goto",     "if",      "inline",    "int",      "long",     "mutable", "namespace",
      "new",     "operator", "private", "protected", "public",   "register", "return",  "short",
      "signed",  "sizeof",   "static",  "struct",    "switch",   "template", "this",    "throw",
      "true",    "try",      "typedef", "typename",  "union",    "unsigned", "using",   "virtual",
      "void",    "volatile", "while",   "threadIdx", "blockIdx", "blockDim", "gridDim", "warpSize",
      "dim3",    "min",      "max",     "exp",       "log",      "sqrt"};
  return d;
}

GpuDialect cuda_gpu_dialect() {
  GpuDialect g;
  g.prelude = kPrelude;
  g.kernel_prefix = "extern \"C\" __global__ void __launch_bounds__({threads})";
  g.global_pointer = "";
  g.shared_array = "__shared__ ";
  g.barrier = "__syncthreads();";
  g.thread_index = "(int)threadIdx.x";
  g.block_index[0] = "(long long)blockIdx.x";
  g.block_index[1] = "(long long)blockIdx.y";
  g.block_index[2] = "(long long)blockIdx.z";
  // gridDim.y and .z stop at 65535 (im2col over a ResNet batch needs more): kernels unflatten a
  // linear block index (unsigned: the device launches fewer than 2^32 blocks), and the device
  // folds any grid into a launch within the limits.
  g.linear_block_index = "blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z)";
  g.unroll = "#pragma unroll";
  return g;
}

}  // namespace

std::string render_cuda(const Kernel& lowered, const Target& target) {
  static const CDialect c = cuda_dialect();
  static const GpuDialect g = cuda_gpu_dialect();
  return render_gpu(lowered, target, c, g);
}

}  // namespace tessel::tile
