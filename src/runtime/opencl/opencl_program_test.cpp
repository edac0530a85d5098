// OpenCL buffers, program builds and kernel launches on the machine's OpenCL device (PoCL's CPU
// device in CI). Results are checked against the same arithmetic done on the host.
#include "runtime/opencl/opencl_program.h"

#include <gtest/gtest.h>

#include <numeric>
#include <vector>

namespace tessel {
namespace {

std::shared_ptr<OpenClContext> context_or_skip() {
  Expected<std::shared_ptr<OpenClContext>> ctx = OpenClContext::create_default();
  if (!ctx) return nullptr;
  return *ctx;
}

#define SKIP_WITHOUT_OPENCL(ctx) \
  if (!(ctx)) GTEST_SKIP() << OpenClContext::create_default().status().to_string()

constexpr const char* kVectorAdd = R"(
__kernel void vector_add(__global const float* a, __global const float* b, __global float* c,
                         const int n) {
  int i = get_global_id(0);
  if (i < n) c[i] = a[i] + b[i];
}
)";

TEST(OpenClProgram, VectorAddMatchesTheHost) {
  auto ctx = context_or_skip();
  SKIP_WITHOUT_OPENCL(ctx);
  const int n = 1000;  // not a multiple of the work-group size: the kernel's guard matters
  std::vector<float> a(n), b(n), c(n, -1.0f);
  for (int i = 0; i < n; ++i) {
    a[i] = 0.5f * static_cast<float>(i);
    b[i] = 1000.0f - static_cast<float>(i);
  }
  auto da = OpenClBuffer::create(ctx, n * sizeof(float));
  auto db = OpenClBuffer::create(ctx, n * sizeof(float));
  auto dc = OpenClBuffer::create(ctx, n * sizeof(float));
  ASSERT_TRUE(da.ok() && db.ok() && dc.ok());
  ASSERT_TRUE(da->write(0, a.data(), n * sizeof(float)).ok());
  ASSERT_TRUE(db->write(0, b.data(), n * sizeof(float)).ok());

  Expected<OpenClProgram> program = OpenClProgram::build(ctx, kVectorAdd, "", "vector_add.cl");
  ASSERT_TRUE(program.ok()) << program.status().to_string();
  Expected<OpenClKernel> kernel = program->kernel("vector_add");
  ASSERT_TRUE(kernel.ok()) << kernel.status().to_string();
  ASSERT_TRUE(kernel->set_args(da->mem(), db->mem(), dc->mem(), n).ok());
  Expected<std::size_t> max_group = kernel->max_work_group_size();
  ASSERT_TRUE(max_group.ok());
  std::size_t group = std::min<std::size_t>(64, *max_group);
  std::size_t global = (n + group - 1) / group * group;
  Status launched = kernel->launch({global}, {group});
  ASSERT_TRUE(launched.ok()) << launched.to_string();
  ASSERT_TRUE(ctx->finish().ok());
  ASSERT_TRUE(dc->read(0, c.data(), n * sizeof(float)).ok());
  for (int i = 0; i < n; ++i)
    ASSERT_EQ(c[i], a[i] + b[i]) << "at " << i;
}

TEST(OpenClProgram, BuildErrorCarriesTheLog) {
  auto ctx = context_or_skip();
  SKIP_WITHOUT_OPENCL(ctx);
  Expected<OpenClProgram> program = OpenClProgram::build(
      ctx, "__kernel void broken(__global float* x) { x[0] = undefined_name; }\n", "", "broken.cl");
  ASSERT_FALSE(program.ok());
  EXPECT_EQ(program.status().code(), Code::kInvalidArgument);
  const std::string& m = program.status().message();
  EXPECT_NE(m.find("broken.cl"), std::string::npos) << m;
  EXPECT_NE(m.find("undefined_name"), std::string::npos) << m;  // from the driver's build log
}

TEST(OpenClProgram, UnknownKernelIsNotFound) {
  auto ctx = context_or_skip();
  SKIP_WITHOUT_OPENCL(ctx);
  Expected<OpenClProgram> program = OpenClProgram::build(ctx, kVectorAdd, "", "vector_add.cl");
  ASSERT_TRUE(program.ok());
  Expected<OpenClKernel> kernel = program->kernel("vector_sub");
  ASSERT_FALSE(kernel.ok());
  EXPECT_EQ(kernel.status().code(), Code::kNotFound);
}

TEST(OpenClProgram, LaunchShapeErrorsAreCaughtBeforeTheDriver) {
  auto ctx = context_or_skip();
  SKIP_WITHOUT_OPENCL(ctx);
  auto program = OpenClProgram::build(ctx, kVectorAdd, "", "vector_add.cl");
  ASSERT_TRUE(program.ok());
  auto kernel = program->kernel("vector_add");
  ASSERT_TRUE(kernel.ok());
  EXPECT_EQ(kernel->launch({}).code(), Code::kInvalidArgument);
  EXPECT_EQ(kernel->launch({100}, {64}).code(), Code::kInvalidArgument);
  EXPECT_EQ(kernel->launch({128, 2}, {64}).code(), Code::kInvalidArgument);
}

TEST(OpenClBuffer, CopiesWithOffsetsRoundTrip) {
  auto ctx = context_or_skip();
  SKIP_WITHOUT_OPENCL(ctx);
  std::vector<unsigned char> host(4096);
  std::iota(host.begin(), host.end(), 0);  // wraps at 256: every byte differs from its neighbour
  auto src = OpenClBuffer::create(ctx, host.size());
  auto dst = OpenClBuffer::create(ctx, host.size());
  ASSERT_TRUE(src.ok() && dst.ok());
  ASSERT_TRUE(src->write(0, host.data(), host.size()).ok());
  std::vector<unsigned char> zeros(host.size(), 0);
  ASSERT_TRUE(dst->write(0, zeros.data(), zeros.size()).ok());
  // Device-to-device from byte 100 to byte 1000, 777 bytes; then read back a window around it.
  ASSERT_TRUE(src->copy_to(*dst, 100, 1000, 777).ok());
  std::vector<unsigned char> back(1000);
  ASSERT_TRUE(dst->read(900, back.data(), back.size()).ok());
  for (std::size_t i = 0; i < back.size(); ++i) {
    std::size_t at = 900 + i;
    unsigned char want = (at >= 1000 && at < 1777) ? host[at - 1000 + 100] : 0;
    ASSERT_EQ(back[i], want) << "byte " << at;
  }
  // A write at an offset lands there and nowhere else.
  unsigned char marker[3] = {0xAB, 0xCD, 0xEF};
  ASSERT_TRUE(src->write(4093, marker, 3).ok());
  unsigned char tail[4];
  ASSERT_TRUE(src->read(4092, tail, 4).ok());
  EXPECT_EQ(tail[0], host[4092]);
  EXPECT_EQ(tail[1], 0xAB);
  EXPECT_EQ(tail[3], 0xEF);
}

TEST(OpenClBuffer, OutOfRangeIsAnErrorNotACrash) {
  auto ctx = context_or_skip();
  SKIP_WITHOUT_OPENCL(ctx);
  auto buf = OpenClBuffer::create(ctx, 256);
  ASSERT_TRUE(buf.ok());
  char bytes[16] = {};
  EXPECT_EQ(buf->write(250, bytes, 16).code(), Code::kOutOfRange);
  EXPECT_EQ(buf->read(257, bytes, 0).code(), Code::kOutOfRange);
  auto other = OpenClBuffer::create(ctx, 8);
  ASSERT_TRUE(other.ok());
  EXPECT_EQ(buf->copy_to(*other, 0, 0, 16).code(), Code::kOutOfRange);
}

}  // namespace
}  // namespace tessel
