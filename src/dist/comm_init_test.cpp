// Options from configs and the environment, and the backend choice.
#include "dist/comm_init.h"

#include <gtest/gtest.h>

#include <cstdlib>

namespace tessel::dist {
namespace {

struct ScopedEnv {
  ScopedEnv(const char* name, const char* value) : name_(name) { setenv(name, value, 1); }
  ~ScopedEnv() { unsetenv(name_); }
  const char* name_;
};

TEST(CommOptions, DefaultsEnvironmentAndExplicitValues) {
  auto defaults = resolve_options(-1, -1, -1);
  ASSERT_TRUE(defaults.ok());
  EXPECT_EQ(defaults->timeout_s, 30);
  EXPECT_EQ(defaults->op_timeout_s, 0);
  EXPECT_TRUE(defaults->check_calls);
  {
    ScopedEnv timeout("TESSEL_COMM_TIMEOUT", "2.5");
    ScopedEnv op("TESSEL_COMM_OP_TIMEOUT", "60");
    ScopedEnv check("TESSEL_COMM_CHECK_CALLS", "0");
    auto from_env = resolve_options(-1, -1, -1);
    ASSERT_TRUE(from_env.ok());
    EXPECT_EQ(from_env->timeout_s, 2.5);
    EXPECT_EQ(from_env->op_timeout_s, 60);
    EXPECT_FALSE(from_env->check_calls);
    auto explicit_ones = resolve_options(7, 8, 1);  // the config wins over the environment
    EXPECT_EQ(explicit_ones->timeout_s, 7);
    EXPECT_EQ(explicit_ones->op_timeout_s, 8);
    EXPECT_TRUE(explicit_ones->check_calls);
  }
  {
    ScopedEnv bad("TESSEL_COMM_TIMEOUT", "soon");
    auto options = resolve_options(-1, -1, -1);
    EXPECT_EQ(options.status().code(), Code::kInvalidArgument);
    EXPECT_NE(options.status().message().find("TESSEL_COMM_TIMEOUT='soon'"), std::string::npos);
  }
  {
    ScopedEnv bad("TESSEL_COMM_CHECK_CALLS", "yes");
    EXPECT_EQ(resolve_options(-1, -1, -1).status().code(), Code::kInvalidArgument);
  }
  EXPECT_EQ(resolve_options(0, -1, -1).status().code(), Code::kInvalidArgument);
}

TEST(CommOptions, BackendFromChoiceOrEnvironment) {
  EXPECT_EQ(*resolve_backend(std::nullopt), Backend::kShm);
  EXPECT_EQ(*resolve_backend(Backend::kNccl), Backend::kNccl);
  {
    ScopedEnv env("TESSEL_BACKEND", "mpi");
    EXPECT_EQ(*resolve_backend(std::nullopt), Backend::kMpi);
    EXPECT_EQ(*resolve_backend(Backend::kShm), Backend::kShm);
  }
  ScopedEnv env("TESSEL_BACKEND", "gloo");
  auto backend = resolve_backend(std::nullopt);
  EXPECT_EQ(backend.status().code(), Code::kInvalidArgument);
  EXPECT_NE(backend.status().message().find("TESSEL_BACKEND: unknown backend 'gloo'"),
            std::string::npos)
      << backend.status().message();
}

TEST(CommOptions, ShmParametersAreChecked) {
  ScopedEnv env("TESSEL_SHM_CHUNK_BYTES", "12");
  auto comms = init_local_comms(2, CommOptions{});
  EXPECT_EQ(comms.status().code(), Code::kInvalidArgument);
  EXPECT_NE(comms.status().message().find("TESSEL_SHM_CHUNK_BYTES='12'"), std::string::npos);
  EXPECT_EQ(init_local_comms(65, CommOptions{}).status().code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace tessel::dist
