// OpenCL C spellings for the GPU renderer (see opencl_renderer.h).
#include "tile/codegen/opencl/opencl_renderer.h"

#include "tile/codegen/gpu_renderer.h"

namespace tessel::tile {

namespace {

const char* kPrelude = R"(
inline float tessel_f16_to_f32(ushort h) {
  uint sign = (uint)(h & 0x8000) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff;
  if (e == 0x1f) return as_float(sign | 0x7f800000u | (m << 13));
  if (e != 0) return as_float(sign | ((e + 112) << 23) | (m << 13));
  return (sign ? -1.0f : 1.0f) * (float)m * 5.9604644775390625e-8f;
}
inline ushort tessel_f32_to_f16(float x) {
  uint u = as_uint(x), sign = (u >> 16) & 0x8000, a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return (ushort)(sign | 0x7e00);
  if (a >= 0x477ff000u) return (ushort)(sign | 0x7c00);
  if (a < 0x38800000u) return (ushort)(sign | (uint)rint(as_float(a) * 16777216.0f));
  return (ushort)(sign | ((a + 0xfffu + ((a >> 13) & 1u) - 0x38000000u) >> 13));
}
inline float tessel_bf16_to_f32(ushort b) { return as_float((uint)b << 16); }
inline ushort tessel_f32_to_bf16(float x) {
  uint u = as_uint(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (ushort)((u >> 16) | 0x40);
  return (ushort)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
inline float tessel_round_f16(float x) { return tessel_f16_to_f32(tessel_f32_to_f16(x)); }
inline float tessel_round_bf16(float x) { return tessel_bf16_to_f32(tessel_f32_to_bf16(x)); }
inline float tessel_sigmoid(float x) { return 1.0f / (1.0f + exp(-x)); }
inline float tessel_relu(float x) { return x > 0.0f ? x : 0.0f; }
inline float tessel_gelu(float x) {
  return 0.5f * x * (1.0f + tanh(0.7978845608028654f * (x + 0.044715f * x * x * x)));
}

)";

CDialect opencl_dialect() {
  CDialect d;
  d.target = "opencl";
  d.bool_type = "bool";
  d.i8 = "char";
  d.u8 = "uchar";
  d.i16 = "short";
  d.i32 = "int";
  d.i64 = "long";
  d.f32 = "float";
  d.f64 = "double";
  d.f16_storage = d.bf16_storage = "ushort";
  d.f16_load = "tessel_f16_to_f32";
  d.bf16_load = "tessel_bf16_to_f32";
  d.f16_store = "tessel_f32_to_f16";
  d.bf16_store = "tessel_f32_to_bf16";
  d.f16_round = "tessel_round_f16";
  d.bf16_round = "tessel_round_bf16";
  d.i64_literal_suffix = "L";
  d.suffix_every_i64 = true;
  d.infinity = "INFINITY";
  d.restrict_keyword = "restrict";
  d.int_min = "min";
  d.int_max = "max";
  d.float_min = "fmin";
  d.float_max = "fmax";
  d.math = {{MathFn::kAbs, "fabs"},
            {MathFn::kSigmoid, "tessel_sigmoid"},
            {MathFn::kRelu, "tessel_relu"},
            {MathFn::kGelu, "tessel_gelu"}};
  d.reserved = {"auto",       "break",     "case",      "char",     "const",   "continue",
                "default",    "do",        "double",    "else",     "enum",    "extern",
                "float",      "for",       "goto",      "if",       "inline",  "int",
                "long",       "register",  "restrict",  "return",   "short",   "signed",
                "sizeof",     "static",    "struct",    "switch",   "typedef", "union",
                "unsigned",   "void",      "volatile",  "while",    "bool",    "half",
                "uchar",      "ushort",    "uint",      "ulong",    "global",  "local",
                "constant",   "private",   "kernel",    "__global", "__local", "read_only",
                "write_only", "image2d_t", "sampler_t", "event_t",  "true",    "false",
                "min",        "max",       "exp",       "log",      "sqrt"};
  return d;
}

GpuDialect opencl_gpu_dialect() {
  GpuDialect g;
  g.prelude = kPrelude;
  g.kernel_prefix =
      "__kernel __attribute__((reqd_work_group_size({threads_x}, {threads_y}, 1))) void";
  g.global_pointer = "__global ";
  g.shared_array = "__local ";
  g.barrier = "barrier(CLK_LOCAL_MEM_FENCE);";
  g.thread_index = "(int)get_local_id(0)";
  g.thread_xy[0] = "(int)get_local_id(0)";
  g.thread_xy[1] = "(int)get_local_id(1)";
  g.block_index[0] = "(long)get_group_id(0)";
  g.block_index[1] = "(long)get_group_id(1)";
  g.block_index[2] = "(long)get_group_id(2)";
  g.unroll = "#pragma unroll";
  return g;
}

}  // namespace

std::string render_opencl(const Kernel& lowered, const Target& target) {
  static const CDialect c = opencl_dialect();
  static const GpuDialect g = opencl_gpu_dialect();
  return render_gpu(lowered, target, c, g);
}

}  // namespace tessel::tile
