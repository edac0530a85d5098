// A small TCP key-value store for rendezvous: one server (in rank 0's process, in the process
// that called tesselGetUniqueId, or in `tessel launch`), every rank a client. Values are bytes;
// get() waits (up to a timeout) until the key is set; add() keeps counters; barrier() is built
// from both.
//
//   auto server = StoreServer::start("127.0.0.1", 0);          // port 0: any free port
//   auto store = StoreClient::connect("127.0.0.1", (*server)->port(), 30.0);
//   store->set("job/segment", "/tessel-1a2b");
//   std::string name = *store->get("job/segment", 30.0);
//
// Wire format, both directions little-endian: request = op (u8), key length (u32), value length
// (u32), key, value; reply = status (u8), length (u32), data. The store trusts its clients: it
// is meant for a private network or loopback.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <thread>

#include "support/status.h"

namespace tessel::dist {

class StoreServer {
 public:
  // Listens on host:port; port 0 picks a free port (see port()).
  static Expected<std::unique_ptr<StoreServer>> start(const std::string& host, int port);
  ~StoreServer();  // stops the server and closes every connection
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;

  int port() const { return port_; }
  // Makes the server stop by itself once the counter `counter` reaches the number stored (as
  // text) under `target`: used for the store of one communicator's set-up.
  void stop_when_counter_reaches(const std::string& counter, const std::string& target);
  bool stopped() const;

 private:
  StoreServer() = default;
  void serve();

  int listen_fd_ = -1;
  int wake_fds_[2] = {-1, -1};
  int port_ = 0;
  std::thread thread_;
  struct State;
  std::unique_ptr<State> state_;
};

class StoreClient {
 public:
  // Connects, retrying until `timeout_s` passes (the server may still be starting).
  static Expected<StoreClient> connect(const std::string& host, int port, double timeout_s);
  StoreClient(StoreClient&& other) noexcept;
  StoreClient& operator=(StoreClient&& other) noexcept;
  ~StoreClient();

  Status set(const std::string& key, std::string_view value);
  // Waits until `key` is set; kDeadlineExceeded after `timeout_s`.
  Expected<std::string> get(const std::string& key, double timeout_s);
  // Adds `delta` to the counter `key` (missing: 0) and returns the new value.
  Expected<int64_t> add(const std::string& key, int64_t delta);
  Expected<bool> contains(const std::string& key);
  // Returns when `count` clients have entered the barrier `key`.
  Status barrier(const std::string& key, int count, double timeout_s);

  const std::string& address() const { return address_; }

 private:
  StoreClient(int fd, std::string address) : fd_(fd), address_(std::move(address)) {}
  Expected<std::string> request(uint8_t op, const std::string& key, std::string_view value,
                                double timeout_s);
  int fd_ = -1;
  std::string address_;  // "host:port", for messages
};

}  // namespace tessel::dist
