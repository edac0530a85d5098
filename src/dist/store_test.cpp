// The rendezvous store: values, waiting gets, counters, barriers, timeouts, and the stop rule
// used by the store of a single communicator. Clients are threads of this test.
#include "dist/store.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

namespace tessel::dist {
namespace {

TEST(Store, SetGetAddContains) {
  auto server = StoreServer::start("127.0.0.1", 0);
  ASSERT_TRUE(server.ok()) << server.status().to_string();
  ASSERT_GT((*server)->port(), 0);
  auto client = StoreClient::connect("127.0.0.1", (*server)->port(), 5);
  ASSERT_TRUE(client.ok()) << client.status().to_string();
  ASSERT_TRUE(client->set("a", std::string("x\0y", 3)).ok());
  EXPECT_EQ(*client->get("a", 1), std::string("x\0y", 3));
  EXPECT_EQ(*client->add("n", 5), 5);
  EXPECT_EQ(*client->add("n", -2), 3);
  EXPECT_TRUE(*client->contains("a"));
  EXPECT_FALSE(*client->contains("b"));
  std::string big(3 << 20, 'z');  // bigger than one read
  ASSERT_TRUE(client->set("big", big).ok());
  EXPECT_EQ(*client->get("big", 1), big);
}

TEST(Store, GetWaitsForASetFromAnotherClient) {
  auto server = StoreServer::start("127.0.0.1", 0);
  ASSERT_TRUE(server.ok());
  const int port = (*server)->port();
  std::thread setter([port] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    auto c = StoreClient::connect("127.0.0.1", port, 5);
    ASSERT_TRUE(c->set("late", "here").ok());
  });
  auto client = StoreClient::connect("127.0.0.1", port, 5);
  auto start = std::chrono::steady_clock::now();
  auto value = client->get("late", 5);
  double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  setter.join();
  ASSERT_TRUE(value.ok()) << value.status().to_string();
  EXPECT_EQ(*value, "here");
  EXPECT_GE(waited, 0.09);
}

TEST(Store, GetTimesOutWithTheKeyInTheMessageAndTheConnectionStaysUsable) {
  auto server = StoreServer::start("127.0.0.1", 0);
  ASSERT_TRUE(server.ok());
  auto client = StoreClient::connect("127.0.0.1", (*server)->port(), 5);
  auto start = std::chrono::steady_clock::now();
  auto value = client->get("never", 0.2);
  double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(value.status().code(), Code::kDeadlineExceeded);
  EXPECT_NE(value.status().message().find("'never'"), std::string::npos);
  EXPECT_GE(waited, 0.19);
  EXPECT_LT(waited, 2.0);
  EXPECT_TRUE(client->set("after", "1").ok());
  EXPECT_EQ(*client->get("after", 1), "1");
}

TEST(Store, BarrierReleasesEveryoneOnlyWhenAllArrived) {
  auto server = StoreServer::start("127.0.0.1", 0);
  ASSERT_TRUE(server.ok());
  const int port = (*server)->port();
  std::atomic<int> arrived{0}, early{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i)
    threads.emplace_back([&, i] {
      auto c = StoreClient::connect("127.0.0.1", port, 5);
      std::this_thread::sleep_for(std::chrono::milliseconds(20 * i));
      arrived.fetch_add(1);
      ASSERT_TRUE(c->barrier("b", 4, 5).ok());
      if (arrived.load() != 4) early.fetch_add(1);
    });
  for (auto& t : threads)
    t.join();
  EXPECT_EQ(early.load(), 0);
}

TEST(Store, ConnectGivesUpWithTheAddress) {
  int port = 0;
  {
    auto server = StoreServer::start("127.0.0.1", 0);
    port = (*server)->port();
  }  // closed: nothing listens there now
  auto client = StoreClient::connect("127.0.0.1", port, 0.2);
  EXPECT_EQ(client.status().code(), Code::kDeadlineExceeded);
  EXPECT_NE(client.status().message().find(fmt::format("127.0.0.1:{}", port)), std::string::npos);
  EXPECT_EQ(StoreServer::start("no-such-host.invalid", 0).status().code(), Code::kNotFound);
}

TEST(Store, StopsOnceTheCounterReachesTheTarget) {
  auto server = StoreServer::start("127.0.0.1", 0);
  ASSERT_TRUE(server.ok());
  (*server)->stop_when_counter_reaches("done", "n");
  auto client = StoreClient::connect("127.0.0.1", (*server)->port(), 5);
  ASSERT_TRUE(client->set("n", "2").ok());
  EXPECT_EQ(*client->add("done", 1), 1);
  EXPECT_FALSE((*server)->stopped());
  EXPECT_EQ(*client->add("done", 1), 2);
  for (int i = 0; i < 100 && !(*server)->stopped(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_TRUE((*server)->stopped());
}

}  // namespace
}  // namespace tessel::dist
