// Collectives with ranks as threads of this process (tesselCommInitAll), every kind, type and
// reduction, checked against testing/collective_check.h. The multi-process tests
// (collectives_test.cpp) cover the same matrix with ranks as processes.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <thread>
#include <vector>

#include "dist/tessel_comm.h"
#include "dist/testing/collective_cases.h"

namespace tessel::dist {
namespace {

using testing::Case;

// Runs `body(rank, comm, stream)` on one thread per rank and collects the failures.
template <typename Body>
std::vector<std::string> on_threads(int nranks, Body body) {
  std::vector<tesselComm_t> comms(nranks);
  EXPECT_EQ(tesselCommInitAll(comms.data(), nranks, nullptr), tesselSuccess)
      << tesselGetLastError(nullptr);
  std::vector<std::string> failures(nranks);
  std::vector<std::thread> threads;
  for (int r = 0; r < nranks; ++r)
    threads.emplace_back([&, r] {
      tesselStream_t stream;
      tesselStreamCreate(&stream);
      failures[r] = body(r, comms[r], stream);
      tesselStreamDestroy(stream);
    });
  for (auto& t : threads)
    t.join();
  for (auto comm : comms)
    tesselCommDestroy(comm);
  std::vector<std::string> out;
  for (auto& f : failures)
    if (!f.empty()) out.push_back(f);
  return out;
}

std::string run_all(const std::vector<Case>& cases, tesselComm_t comm, tesselStream_t stream) {
  std::string failures;
  for (const Case& c : cases) {
    std::string f = testing::run_case(comm, stream, c);
    if (!f.empty()) failures += f + "\n";
  }
  return failures;
}

TEST(CommThreads, EveryCollectiveTypeAndReductionOnFourRanks) {
  // 1000 elements is past the slot size for wide types, so both algorithms run.
  auto cases = testing::case_matrix(4, {{0, 0}, {0, 1}, {0, 7}, {0, 1000}, {0, 70001}});
  auto failures = on_threads(4, [&](int, tesselComm_t comm, tesselStream_t stream) {
    return run_all(cases, comm, stream);
  });
  EXPECT_TRUE(failures.empty()) << failures.front();
}

// Small slots and chunks put every size on the pipelined path with many steps and wrap-arounds;
// without the call check the collectives still work.
TEST(CommThreads, TinyBuffersAndNoCallCheck) {
  setenv("TESSEL_SHM_LL_BYTES", "64", 1);
  setenv("TESSEL_SHM_CHUNK_BYTES", "4096", 1);
  setenv("TESSEL_SHM_DEPTH", "2", 1);
  setenv("TESSEL_SHM_CHANNEL_BYTES", "4096", 1);
  setenv("TESSEL_COMM_CHECK_CALLS", "0", 1);
  auto cases = testing::case_matrix(3, {{0, 1}, {0, 100}, {0, 5000}});
  auto failures = on_threads(3, [&](int, tesselComm_t comm, tesselStream_t stream) {
    return run_all(cases, comm, stream) + testing::run_ring(comm, stream, DataType::kFloat64, 3001);
  });
  for (const char* name : {"TESSEL_SHM_LL_BYTES", "TESSEL_SHM_CHUNK_BYTES", "TESSEL_SHM_DEPTH",
                           "TESSEL_SHM_CHANNEL_BYTES", "TESSEL_COMM_CHECK_CALLS"})
    unsetenv(name);
  EXPECT_TRUE(failures.empty()) << failures.front();
}

TEST(CommThreads, OneRankCopiesAndReduces) {
  auto cases = testing::case_matrix(1, {{0, 0}, {0, 5}, {0, 100000}});
  auto failures = on_threads(1, [&](int, tesselComm_t comm, tesselStream_t stream) {
    return run_all(cases, comm, stream);
  });
  EXPECT_TRUE(failures.empty()) << failures.front();
}

TEST(CommThreads, SendRecvRing) {
  auto failures = on_threads(3, [&](int, tesselComm_t comm, tesselStream_t stream) {
    std::string f;
    for (size_t count : {size_t{0}, size_t{1}, size_t{1000}, size_t{300000}})
      for (DataType t : {DataType::kUint8, DataType::kFloat32, DataType::kFloat64})
        f += testing::run_ring(comm, stream, t, count);
    return f;
  });
  EXPECT_TRUE(failures.empty()) << failures.front();
}

TEST(CommThreads, SendToSelf) {
  auto failures = on_threads(1, [&](int, tesselComm_t comm, tesselStream_t stream) {
    return testing::run_ring(comm, stream, DataType::kInt32, 200000);  // bigger than the channel
  });
  EXPECT_TRUE(failures.empty()) << failures.front();
}

TEST(CommThreads, CallsAreAsynchronousAndOrderedOnAStream) {
  // Rank 0 enqueues three all-reduces and returns before rank 1 has called anything; once rank
  // 1 joins, the stream finishes them in order (each one's input is the previous output).
  auto failures = on_threads(2, [&](int rank, tesselComm_t comm, tesselStream_t stream) {
    std::vector<float> value(1000, 1.0f);
    if (rank == 1) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    for (int i = 0; i < 3; ++i)
      if (tesselAllReduce(value.data(), value.data(), value.size(), tesselFloat32, tesselSum, comm,
                          stream) != tesselSuccess)
        return std::string("enqueue failed");
    if (rank == 0 && tesselStreamQuery(stream) != tesselInProgress)
      return std::string("rank 0's calls finished before rank 1 joined");
    if (tesselStreamSynchronize(stream) != tesselSuccess) return std::string("sync failed");
    for (float v : value)
      if (v != 8.0f) return "got " + std::to_string(v) + ", expected 8 (1 doubled three times)";
    return std::string();
  });
  EXPECT_TRUE(failures.empty()) << failures.front();
}

TEST(CommThreads, EventsMarkAPointOnTheStream) {
  // Rank 0 records an event after its first all-reduce and makes a second; rank 1 joins the
  // first at once and the second only after rank 0 has seen the event complete. So the event
  // must complete while the stream as a whole is still busy.
  std::atomic<bool> first_done{false};
  auto failures = on_threads(2, [&](int rank, tesselComm_t comm, tesselStream_t stream) {
    std::vector<float> a(1000, 1.0f), b(1000, 1.0f);
    tesselEvent_t event;
    tesselEventCreate(&event);
    tesselAllReduce(a.data(), a.data(), a.size(), tesselFloat32, tesselSum, comm, stream);
    tesselEventRecord(event, stream);
    if (rank == 1)
      while (!first_done.load())
        std::this_thread::yield();
    tesselAllReduce(b.data(), b.data(), b.size(), tesselFloat32, tesselSum, comm, stream);
    std::string error;
    if (rank == 0) {
      if (tesselEventSynchronize(event) != tesselSuccess) error = "event failed";
      if (tesselEventQuery(event) != tesselSuccess) error = "event not complete after sync";
      if (a[0] != 2.0f) error = "first all-reduce not done when its event was";
      if (tesselStreamQuery(stream) != tesselInProgress) error = "second call finished early";
      first_done = true;
    }
    if (tesselStreamSynchronize(stream) != tesselSuccess) error = "stream failed";
    if (b[999] != 2.0f) error = "second all-reduce wrong";
    tesselEventDestroy(event);
    return error;
  });
  EXPECT_TRUE(failures.empty()) << failures.front();
  int version = 0;
  EXPECT_EQ(tesselGetVersion(&version), tesselSuccess);
  EXPECT_EQ(version, 100);
}

TEST(CommThreads, MismatchedCountsFailOnEveryRankWithBothCalls) {
  auto failures = on_threads(2, [&](int rank, tesselComm_t comm, tesselStream_t stream) {
    std::vector<int32_t> data(100, 1);
    size_t count = rank == 0 ? 100 : 99;
    tesselAllReduce(data.data(), data.data(), count, tesselInt32, tesselSum, comm, stream);
    tesselResult_t result = tesselStreamSynchronize(stream);
    std::string error = tesselGetLastError(nullptr);
    if (result != tesselInvalidUsage) return "result " + std::to_string(result) + ": " + error;
    for (const char* part :
         {"mismatched collective #1", "rank 0 called all_reduce(count=100, i32, sum)",
          "rank 1 called all_reduce(count=99, i32, sum)"})
      if (error.find(part) == std::string::npos)
        return "missing '" + std::string(part) + "' in " + error;
    // The communicator is broken: the next call fails at once.
    if (tesselAllReduce(data.data(), data.data(), 1, tesselInt32, tesselSum, comm, stream) !=
        tesselInvalidUsage)
      return std::string("the next call did not fail");
    tesselResult_t async = tesselSuccess;
    tesselCommGetAsyncError(comm, &async);
    if (async != tesselInvalidUsage) return std::string("no async error");
    return std::string();
  });
  EXPECT_TRUE(failures.empty()) << failures.front();
}

// NCCL's way: one unique id, each rank calls tesselCommInitRank (here on its own thread, through
// the store and a named shared-memory segment as separate processes would).
TEST(CommThreads, UniqueIdRendezvous) {
  setenv("TESSEL_MASTER_ADDR", "127.0.0.1", 1);
  tesselUniqueId id;
  ASSERT_EQ(tesselGetUniqueId(&id), tesselSuccess) << tesselGetLastError(nullptr);
  std::vector<std::string> failures(3);
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r)
    threads.emplace_back([&, r] {
      tesselComm_t comm;
      if (tesselCommInitRank(&comm, 3, id, r) != tesselSuccess) {
        failures[r] = tesselGetLastError(nullptr);
        return;
      }
      tesselStream_t stream;
      tesselStreamCreate(&stream);
      failures[r] = testing::run_case(
          comm, stream, {CallKind::kAllReduce, DataType::kFloat32, RedOp::kSum, 100000, 0, false});
      tesselStreamDestroy(stream);
      tesselCommDestroy(comm);
    });
  for (auto& t : threads)
    t.join();
  for (auto& f : failures)
    EXPECT_EQ(f, "");
  tesselUniqueId garbage = {};
  tesselComm_t comm;
  EXPECT_EQ(tesselCommInitRank(&comm, 2, garbage, 0), tesselInvalidArgument);
  EXPECT_NE(std::string(tesselGetLastError(nullptr)).find("not a tessel unique id"),
            std::string::npos);
}

TEST(CommThreads, RanksThatDisagreeOnTheSizeFailToJoin) {
  setenv("TESSEL_MASTER_ADDR", "127.0.0.1", 1);
  tesselUniqueId id;
  ASSERT_EQ(tesselGetUniqueId(&id), tesselSuccess);
  tesselConfig_t config = TESSEL_CONFIG_INITIALIZER;
  config.timeoutSeconds = 1;
  tesselResult_t results[2];
  std::string errors[2];
  std::thread zero([&] {
    tesselComm_t comm;
    results[0] = tesselCommInitRankConfig(&comm, 2, id, 0, &config);
    errors[0] = tesselGetLastError(nullptr);
    if (results[0] == tesselSuccess) tesselCommAbort(comm);
  });
  std::thread one([&] {
    tesselComm_t comm;
    results[1] = tesselCommInitRankConfig(&comm, 3, id, 1, &config);
    errors[1] = tesselGetLastError(nullptr);
    if (results[1] == tesselSuccess) tesselCommAbort(comm);
  });
  zero.join();
  one.join();
  EXPECT_EQ(results[1], tesselInvalidArgument);
  EXPECT_NE(errors[1].find("rank 1 was told the communicator has 3 ranks, rank 0 made it for 2"),
            std::string::npos)
      << errors[1];
  EXPECT_NE(results[0], tesselSuccess);  // rank 0 waits for a rank 1 that never attaches
}

TEST(CommThreads, ArgumentsAreCheckedBeforeEnqueueing) {
  tesselComm_t comms[2];
  ASSERT_EQ(tesselCommInitAll(comms, 2, nullptr), tesselSuccess);
  float x = 0;
  EXPECT_EQ(tesselAllReduce(nullptr, &x, 1, tesselFloat32, tesselSum, comms[0], nullptr),
            tesselInvalidArgument);
  EXPECT_NE(std::string(tesselGetLastError(comms[0])).find("send buffer is null"),
            std::string::npos);
  EXPECT_EQ(tesselBroadcast(&x, &x, 1, tesselFloat32, 2, comms[0], nullptr), tesselInvalidArgument);
  EXPECT_NE(std::string(tesselGetLastError(comms[0])).find("root 2 is outside"), std::string::npos);
  EXPECT_EQ(
      tesselAllReduce(&x, &x, 1, static_cast<tesselDataType_t>(11), tesselSum, comms[0], nullptr),
      tesselInvalidArgument);
  EXPECT_EQ(tesselSend(&x, 1, tesselFloat32, 2, comms[0], nullptr), tesselInvalidArgument);
  EXPECT_EQ(tesselAllReduce(&x, &x, 1, tesselFloat32, tesselSum, nullptr, nullptr),
            tesselInvalidArgument);
  // Zero elements need no buffers. One thread drives both ranks, so the calls go in a group.
  EXPECT_EQ(tesselGroupStart(), tesselSuccess);
  EXPECT_EQ(tesselAllReduce(nullptr, nullptr, 0, tesselFloat32, tesselSum, comms[0], nullptr),
            tesselSuccess);
  EXPECT_EQ(tesselAllReduce(nullptr, nullptr, 0, tesselFloat32, tesselSum, comms[1], nullptr),
            tesselSuccess);
  EXPECT_EQ(tesselGroupEnd(), tesselSuccess);
  EXPECT_EQ(tesselStreamSynchronize(nullptr), tesselSuccess);
  int count = 0, rank = -1;
  EXPECT_EQ(tesselCommCount(comms[1], &count), tesselSuccess);
  EXPECT_EQ(tesselCommUserRank(comms[1], &rank), tesselSuccess);
  EXPECT_EQ(count, 2);
  EXPECT_EQ(rank, 1);
  for (auto comm : comms)
    EXPECT_EQ(tesselCommDestroy(comm), tesselSuccess);
  EXPECT_STREQ(tesselGetErrorString(tesselRemoteError),
               "remote process exited or there was a network error");
}

}  // namespace
}  // namespace tessel::dist
