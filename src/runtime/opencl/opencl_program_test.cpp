// OpenCL program builds and the launch checks on the machine's OpenCL device (PoCL's CPU device
// in CI). Kernels that compute are run through the Device (opencl_device_test.cpp).
#include "runtime/opencl/opencl_program.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace tessel
