// The nccl backend without GPUs: NCCL is absent here, and the calls tessel makes are checked
// against a host-memory stand-in (testing/fake_nccl.cpp) that records its arguments.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "dist/nccl/nccl_library.h"
#include "dist/tessel_comm.h"

extern "C" struct FakeNcclLog {
  int init_nranks, init_rank;
  char init_id[128];
  int group_starts, group_ends;
  const char* last_call;
  const void* send;
  void* recv;
  size_t count;
  int datatype, op, root_or_peer;
  void* comm;
  void* stream;
  void* synchronized_stream;
  int destroyed, aborted;
  int async_error;
};

namespace tessel::dist {
namespace {

// Here either libnccl is missing, or it is present (the CUDA toolkit ships it) but there is no
// GPU: either way a communicator cannot be made, and the error says why.
TEST(Nccl, ReportsUnavailableWithoutNcclOrGpu) {
  if (access("/dev/nvidia0", F_OK) == 0) GTEST_SKIP() << "a GPU is present";
  unsetenv("TESSEL_NCCL_LIBRARY");
  setenv("TESSEL_MASTER_ADDR", "127.0.0.1", 1);
  auto library = nccl::open_library("libnccl.so.2");
  tesselUniqueId id;
  ASSERT_EQ(tesselGetUniqueId(&id), tesselSuccess);
  tesselConfig_t config = TESSEL_CONFIG_INITIALIZER;
  config.backend = tesselBackendNccl;
  tesselComm_t comm = nullptr;
  tesselResult_t result = tesselCommInitRankConfig(&comm, 1, id, 0, &config);
  EXPECT_NE(result, tesselSuccess);
  EXPECT_EQ(comm, nullptr);
  const std::string error = tesselGetLastError(nullptr);
  if (library.ok()) {
    EXPECT_NE(error.find("ncclCommInitRank"), std::string::npos) << error;
  } else {
    EXPECT_EQ(result, tesselSystemError);
    EXPECT_NE(error.find("libnccl.so.2"), std::string::npos) << error;
  }
  auto not_nccl = nccl::open_library(TESSEL_DIST_RANK_HELPER);  // an executable, not NCCL
  EXPECT_EQ(not_nccl.status().code(), Code::kUnavailable);
}

TEST(Nccl, TypesAndOperatorsHaveNcclsNumbers) {
  // ncclInt8 = 0, ncclUint8 = 1, ncclInt32 = 2, ncclUint32 = 3, ncclInt64 = 4, ncclUint64 = 5,
  // ncclFloat16 = 6, ncclFloat32 = 7, ncclFloat64 = 8, ncclBfloat16 = 9 (nccl.h).
  const std::pair<DataType, int> types[] = {{DataType::kInt8, 0},    {DataType::kUint8, 1},
                                            {DataType::kInt32, 2},   {DataType::kUint32, 3},
                                            {DataType::kInt64, 4},   {DataType::kUint64, 5},
                                            {DataType::kFloat16, 6}, {DataType::kFloat32, 7},
                                            {DataType::kFloat64, 8}, {DataType::kBfloat16, 9}};
  for (auto [type, number] : types)
    EXPECT_EQ(*nccl::to_nccl(type, 21803), number);
  const std::pair<RedOp, int> ops[] = {
      {RedOp::kSum, 0}, {RedOp::kProd, 1}, {RedOp::kMax, 2}, {RedOp::kMin, 3}, {RedOp::kAvg, 4}};
  for (auto [op, number] : ops)
    EXPECT_EQ(*nccl::to_nccl(op, 21803), number);
  // bf16 and avg arrived in NCCL 2.10.
  EXPECT_EQ(nccl::to_nccl(DataType::kBfloat16, 20907).status().code(), Code::kUnimplemented);
  EXPECT_EQ(nccl::to_nccl(RedOp::kAvg, 20907).status().code(), Code::kUnimplemented);
  EXPECT_TRUE(nccl::to_nccl(DataType::kFloat16, 20907).ok());
  // The C API's values are NCCL's too.
  EXPECT_EQ(static_cast<int>(tesselBfloat16), 9);
  EXPECT_EQ(static_cast<int>(tesselAvg), 4);
  EXPECT_EQ(static_cast<int>(tesselRemoteError), 6);
}

TEST(Nccl, CallsReachNcclWithTheirArguments) {
  setenv("TESSEL_NCCL_LIBRARY", TESSEL_FAKE_NCCL, 1);
  setenv("TESSEL_CUDA_LIBRARY", TESSEL_FAKE_NCCL, 1);
  setenv("TESSEL_MASTER_ADDR", "127.0.0.1", 1);
  void* fake = dlopen(TESSEL_FAKE_NCCL, RTLD_NOW);
  ASSERT_NE(fake, nullptr) << dlerror();
  auto* log = static_cast<FakeNcclLog*>(dlsym(fake, "fake_nccl_log"));
  ASSERT_NE(log, nullptr);

  tesselUniqueId id;
  ASSERT_EQ(tesselGetUniqueId(&id), tesselSuccess) << tesselGetLastError(nullptr);
  tesselConfig_t config = TESSEL_CONFIG_INITIALIZER;
  config.backend = tesselBackendNccl;
  tesselComm_t comm = nullptr;
  ASSERT_EQ(tesselCommInitRankConfig(&comm, 1, id, 0, &config), tesselSuccess)
      << tesselGetLastError(nullptr);
  EXPECT_EQ(log->init_nranks, 1);
  EXPECT_EQ(log->init_rank, 0);
  for (int i = 0; i < 128; ++i)
    ASSERT_EQ(log->init_id[i], static_cast<char>(i * 7 + 1));

  // A host stream is refused: NCCL runs on CUDA streams.
  float a[7] = {1, 2, 3, 4, 5, 6, 7}, b[7] = {};
  EXPECT_EQ(tesselAllReduce(a, b, 7, tesselFloat32, tesselSum, comm, nullptr),
            tesselInvalidArgument);
  EXPECT_NE(std::string(tesselGetLastError(comm)).find("CUDA stream"), std::string::npos);

  auto* cuda_stream = reinterpret_cast<void*>(0x5eed);
  tesselStream_t stream;
  ASSERT_EQ(tesselStreamCreateFromCuda(cuda_stream, &stream), tesselSuccess);
  ASSERT_EQ(tesselAllReduce(a, b, 7, tesselBfloat16, tesselAvg, comm, stream), tesselSuccess);
  EXPECT_STREQ(log->last_call, "ncclAllReduce");
  EXPECT_EQ(log->send, a);
  EXPECT_EQ(log->recv, b);
  EXPECT_EQ(log->count, 7u);
  EXPECT_EQ(log->datatype, 9);
  EXPECT_EQ(log->op, 4);
  EXPECT_EQ(log->stream, cuda_stream);
  EXPECT_EQ(log->group_starts, 1);
  EXPECT_EQ(log->group_ends, 1);

  int64_t c[5] = {1, 2, 3, 4, 5}, d[5] = {};
  ASSERT_EQ(tesselBroadcast(c, d, 5, tesselInt64, 0, comm, stream), tesselSuccess);
  EXPECT_STREQ(log->last_call, "ncclBroadcast");
  EXPECT_EQ(log->datatype, 4);
  EXPECT_EQ(log->root_or_peer, 0);
  ASSERT_EQ(tesselReduceScatter(a, b, 3, tesselUint8, tesselMin, comm, stream), tesselSuccess);
  EXPECT_STREQ(log->last_call, "ncclReduceScatter");
  EXPECT_EQ(log->op, 3);
  EXPECT_EQ(log->count, 3u);

  // Calls of one group go to NCCL inside one ncclGroupStart/End.
  const int starts = log->group_starts;
  tesselGroupStart();
  tesselAllGather(a, b, 1, tesselFloat16, comm, stream);
  tesselReduce(c, d, 2, tesselFloat64, tesselMax, 0, comm, stream);
  ASSERT_EQ(tesselGroupEnd(), tesselSuccess);
  EXPECT_EQ(log->group_starts, starts + 1);
  EXPECT_STREQ(log->last_call, "ncclReduce");
  EXPECT_EQ(log->datatype, 8);
  EXPECT_EQ(log->op, 2);

  // The fake copies (a collective of one rank), so the data shows the call really ran.
  float in[3] = {1.5f, -2, 3}, out[3] = {};
  ASSERT_EQ(tesselAllReduce(in, out, 3, tesselFloat32, tesselSum, comm, stream), tesselSuccess);
  EXPECT_EQ(out[1], -2.0f);

  // Synchronising asks the CUDA driver about the wrapped stream.
  ASSERT_EQ(tesselStreamSynchronize(stream), tesselSuccess) << tesselGetLastError(nullptr);
  EXPECT_EQ(log->synchronized_stream, cuda_stream);

  // NCCL's asynchronous errors come back as tessel's result codes.
  tesselResult_t async = tesselInternalError;
  ASSERT_EQ(tesselCommGetAsyncError(comm, &async), tesselSuccess);
  EXPECT_EQ(async, tesselSuccess);
  log->async_error = 6;  // ncclRemoteError
  ASSERT_EQ(tesselCommGetAsyncError(comm, &async), tesselSuccess);
  EXPECT_EQ(async, tesselRemoteError);
  EXPECT_NE(std::string(tesselGetLastError(comm)).find("remote process exited"), std::string::npos);
  log->async_error = 0;

  const int destroyed = log->destroyed;
  EXPECT_EQ(tesselCommDestroy(comm), tesselSuccess);
  EXPECT_EQ(log->destroyed, destroyed + 1);
  EXPECT_EQ(tesselStreamDestroy(stream), tesselSuccess);

  // NCCL's own refusals arrive with NCCL's words: the fake takes one rank only.
  tesselUniqueId id2;
  ASSERT_EQ(tesselGetUniqueId(&id2), tesselSuccess);
  tesselComm_t two = nullptr;
  // Rank 1 of 2 waits for rank 0's NCCL id in the store: give it a short timeout.
  config.timeoutSeconds = 0.5;
  EXPECT_EQ(tesselCommInitRankConfig(&two, 2, id2, 1, &config), tesselRemoteError);
  EXPECT_NE(std::string(tesselGetLastError(nullptr)).find("nccl_id"), std::string::npos)
      << tesselGetLastError(nullptr);
}

}  // namespace
}  // namespace tessel::dist
