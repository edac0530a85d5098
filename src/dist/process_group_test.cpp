// The process group layer: asynchronous Work handles in order on the group's stream, a barrier,
// grouped send/recv, errors through wait(), and the element type mapping. Ranks are threads.
#include "dist/process_group.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

namespace tessel::dist {
namespace {

template <typename Body>
void on_ranks(std::vector<std::unique_ptr<ProcessGroup>>& groups, Body body) {
  std::vector<std::thread> threads;
  for (auto& group : groups)
    threads.emplace_back([&, g = group.get()] { body(*g); });
  for (auto& t : threads)
    t.join();
}

TEST(ProcessGroup, AllReduceAverageReturnsWorkThatWaits) {
  auto groups = ProcessGroup::in_process(3);
  ASSERT_TRUE(groups.ok()) << groups.status().to_string();
  on_ranks(*groups, [](ProcessGroup& g) {
    std::vector<float> grad(10000, static_cast<float>(g.rank() * 3));  // 0, 3, 6 -> mean 3
    auto work = g.all_reduce(grad.data(), grad.size(), DataType::kFloat32, RedOp::kAvg);
    ASSERT_TRUE(work.ok()) << work.status().to_string();
    ASSERT_TRUE(work->wait().ok());
    EXPECT_TRUE(work->done());
    for (float v : grad)
      ASSERT_EQ(v, 3.0f);
  });
}

TEST(ProcessGroup, OperationsRunInOrderAndBarrierWaitsForAll) {
  auto groups = ProcessGroup::in_process(2);
  ASSERT_TRUE(groups.ok());
  std::atomic<int> arrived{0};
  on_ranks(*groups, [&](ProcessGroup& g) {
    // Broadcast from rank 1, then gather every rank's value: the gather must see the broadcast.
    int64_t value = g.rank() == 1 ? 42 : 0;
    auto first = g.broadcast(&value, 1, DataType::kInt64, 1);
    int64_t gathered[2] = {};
    auto second = g.all_gather(&value, gathered, 1, DataType::kInt64);
    ASSERT_TRUE(first.ok() && second.ok());
    ASSERT_TRUE(second->wait().ok());
    EXPECT_TRUE(first->done());
    EXPECT_EQ(gathered[0], 42);
    EXPECT_EQ(gathered[1], 42);
    if (g.rank() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    arrived.fetch_add(1);
    ASSERT_TRUE(g.barrier().ok());
    EXPECT_EQ(arrived.load(), 2);  // nobody leaves the barrier before both arrived
  });
}

TEST(ProcessGroup, GroupedSendAndReceiveSwapBuffers) {
  auto groups = ProcessGroup::in_process(2);
  ASSERT_TRUE(groups.ok());
  on_ranks(*groups, [](ProcessGroup& g) {
    const int other = 1 - g.rank();
    std::vector<double> mine(300000, g.rank() + 0.5), theirs(300000, -1);
    Call out, in;
    out.kind = CallKind::kSend, out.send = mine.data(), out.count = mine.size(),
    out.dtype = DataType::kFloat64, out.peer = other;
    in.kind = CallKind::kRecv, in.recv = theirs.data(), in.count = theirs.size(),
    in.dtype = DataType::kFloat64, in.peer = other;
    auto work = g.group({out, in});  // both ranks send first: only works as one group
    ASSERT_TRUE(work.ok());
    ASSERT_TRUE(work->wait().ok());
    for (double v : theirs)
      ASSERT_EQ(v, other + 0.5);
  });
}

TEST(ProcessGroup, FailureReachesWaitAndLaterCalls) {
  auto groups = ProcessGroup::in_process(2);
  ASSERT_TRUE(groups.ok());
  on_ranks(*groups, [](ProcessGroup& g) {
    std::vector<int32_t> data(64);
    auto work = g.reduce_scatter(data.data(), data.data(), g.rank() == 0 ? 32 : 16,
                                 DataType::kInt32, RedOp::kSum);
    ASSERT_TRUE(work.ok());
    Status status = work->wait();
    EXPECT_EQ(status.code(), Code::kFailedPrecondition);
    EXPECT_NE(status.message().find("rank 0 called reduce_scatter(count=32, i32, sum); rank 1 "
                                    "called reduce_scatter(count=16, i32, sum)"),
              std::string::npos)
        << status.message();
    EXPECT_EQ(g.error().code(), Code::kFailedPrecondition);
    EXPECT_EQ(g.barrier().code(), Code::kFailedPrecondition);
  });
}

TEST(ProcessGroup, InvalidCallsFailBeforeRunning) {
  auto groups = ProcessGroup::in_process(2);
  ASSERT_TRUE(groups.ok());
  ProcessGroup& g = *(*groups)[0];
  float x = 0;
  EXPECT_EQ(g.broadcast(&x, 1, DataType::kFloat32, 5).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(g.send(&x, 1, DataType::kFloat32, -1).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(ProcessGroup::in_process(2, {Backend::kMpi}).status().code(), Code::kInvalidArgument);
}

TEST(ProcessGroup, TensorTypesMapToCollectiveTypes) {
  EXPECT_EQ(*ProcessGroup::comm_dtype(DType::kBF16), DataType::kBfloat16);
  EXPECT_EQ(*ProcessGroup::comm_dtype(DType::kF16), DataType::kFloat16);
  EXPECT_EQ(*ProcessGroup::comm_dtype(DType::kI64), DataType::kInt64);
  EXPECT_EQ(*ProcessGroup::comm_dtype(DType::kU8), DataType::kUint8);
  EXPECT_EQ(ProcessGroup::comm_dtype(DType::kBool).status().code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace tessel::dist
