// The rendezvous store's server (one thread, poll(2) over all connections) and client
// (store.h).
#include "dist/store.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

namespace tessel::dist {

namespace {

enum Op : uint8_t { kSet = 1, kGet = 2, kAdd = 3, kContains = 4 };
enum Reply : uint8_t { kOk = 0, kMissing = 1, kTimedOut = 2, kBadRequest = 3 };
constexpr size_t kRequestHead = 9;  // op + key length + value length
constexpr uint32_t kMaxField = 64u << 20;

using Clock = std::chrono::steady_clock;

void put_u32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i)
    out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}
uint32_t get_u32(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i)
    v |= static_cast<uint32_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}
std::string encode_i64(int64_t v) {
  std::string out(8, '\0');
  std::memcpy(out.data(), &v, 8);
  return out;
}
int64_t decode_i64(std::string_view s) {
  int64_t v = 0;
  if (s.size() == 8) std::memcpy(&v, s.data(), 8);
  return v;
}

std::string make_reply(Reply status, std::string_view data) {
  std::string out;
  out.push_back(static_cast<char>(status));
  put_u32(out, static_cast<uint32_t>(data.size()));
  out.append(data);
  return out;
}

bool write_all(int fd, const std::string& data) {
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::send(fd, data.data() + done, data.size() - done, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd p{fd, POLLOUT, 0};
      ::poll(&p, 1, 1000);
      continue;
    }
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

Expected<addrinfo*> resolve(const std::string& host, int port, bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  if (passive) hints.ai_flags = AI_PASSIVE;
  addrinfo* result = nullptr;
  std::string service = std::to_string(port);
  int rc = ::getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &result);
  if (rc != 0)
    return not_found("cannot resolve rendezvous address '{}': {}", host, gai_strerror(rc));
  return result;
}

}  // namespace

// ---- server ----------------------------------------------------------------------------------

struct StoreServer::State {
  struct Waiter {
    int fd;
    Clock::time_point deadline;
  };
  struct Client {
    std::string in;
  };
  mutable std::mutex mu;  // guards the stop rule and `stopped`, read from other threads
  std::string stop_counter, stop_target;
  bool stopped = false;
  std::map<std::string, std::string> values;
  std::map<std::string, std::vector<Waiter>> waiters;  // key -> clients blocked in get
  std::map<int, Client> clients;
};

Expected<std::unique_ptr<StoreServer>> StoreServer::start(const std::string& host, int port) {
  TESSEL_ASSIGN_OR_RETURN(addrinfo * addresses, resolve(host, port, true));
  std::unique_ptr<StoreServer> server(new StoreServer());
  server->state_ = std::make_unique<State>();
  Status last = unavailable("no address to listen on for '{}'", host);
  for (addrinfo* a = addresses; a != nullptr; a = a->ai_next) {
    int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, 256) == 0) {
      server->listen_fd_ = fd;
      sockaddr_storage bound{};
      socklen_t len = sizeof(bound);
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len);
      server->port_ = bound.ss_family == AF_INET6
                          ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
                          : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
      break;
    }
    last = errno_error(fmt::format("listening for rendezvous on {}:{}", host, port));
    ::close(fd);
  }
  ::freeaddrinfo(addresses);
  if (server->listen_fd_ < 0) return last;
  if (::pipe2(server->wake_fds_, O_CLOEXEC | O_NONBLOCK) != 0)
    return errno_error("creating the rendezvous server's wake-up pipe");
  server->thread_ = std::thread([s = server.get()] { s->serve(); });
  return server;
}

StoreServer::~StoreServer() {
  if (thread_.joinable()) {
    char byte = 1;
    (void)!::write(wake_fds_[1], &byte, 1);
    thread_.join();
  }
  for (int fd : {listen_fd_, wake_fds_[0], wake_fds_[1]})
    if (fd >= 0) ::close(fd);
}

void StoreServer::stop_when_counter_reaches(const std::string& counter, const std::string& target) {
  std::lock_guard lock(state_->mu);
  state_->stop_counter = counter;
  state_->stop_target = target;
}

bool StoreServer::stopped() const {
  std::lock_guard lock(state_->mu);
  return state_->stopped;
}

void StoreServer::serve() {
  State& st = *state_;
  auto reply = [&](int fd, Reply status, std::string_view data) {
    if (!write_all(fd, make_reply(status, data))) {
      ::shutdown(fd, SHUT_RDWR);  // poll sees the hang-up and drops the client
    }
  };
  auto should_stop = [&] {
    std::lock_guard lock(st.mu);
    if (st.stop_counter.empty()) return false;
    auto counter = st.values.find(st.stop_counter);
    auto target = st.values.find(st.stop_target);
    if (counter == st.values.end() || target == st.values.end()) return false;
    return decode_i64(counter->second) >= std::strtoll(target->second.c_str(), nullptr, 10);
  };
  // Handles one complete request; returns false if the request is malformed.
  auto handle = [&](int fd, uint8_t op, std::string key, std::string value, Clock::time_point now) {
    switch (op) {
      case kSet: {
        st.values[key] = value;
        reply(fd, kOk, "");
        auto waiting = st.waiters.find(key);
        if (waiting != st.waiters.end()) {
          for (const auto& w : waiting->second)
            reply(w.fd, kOk, value);
          st.waiters.erase(waiting);
        }
        return true;
      }
      case kGet: {
        auto it = st.values.find(key);
        if (it != st.values.end()) {
          reply(fd, kOk, it->second);
        } else {
          double timeout_s = 0;
          if (value.size() == 8) std::memcpy(&timeout_s, value.data(), 8);
          auto deadline = now + std::chrono::duration_cast<Clock::duration>(
                                    std::chrono::duration<double>(timeout_s));
          st.waiters[key].push_back({fd, deadline});
        }
        return true;
      }
      case kAdd: {
        int64_t v = decode_i64(st.values[key]) + decode_i64(value);
        st.values[key] = encode_i64(v);
        reply(fd, kOk, encode_i64(v));
        return true;
      }
      case kContains:
        reply(fd, st.values.count(key) ? kOk : kMissing, "");
        return true;
      default:
        return false;
    }
  };
  auto drop = [&](int fd) {
    for (auto& [key, list] : st.waiters)
      std::erase_if(list, [&](const State::Waiter& w) { return w.fd == fd; });
    st.clients.erase(fd);
    ::close(fd);
  };

  for (;;) {
    std::vector<pollfd> fds{{wake_fds_[0], POLLIN, 0}, {listen_fd_, POLLIN, 0}};
    for (auto& [fd, client] : st.clients)
      fds.push_back({fd, POLLIN, 0});
    // Sleep until the nearest get() deadline.
    auto now = Clock::now();
    int timeout_ms = -1;
    for (auto& [key, list] : st.waiters)
      for (auto& w : list) {
        auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(w.deadline - now).count();
        ms = std::max<int64_t>(0, ms + 1);
        if (timeout_ms < 0 || ms < timeout_ms) timeout_ms = static_cast<int>(ms);
      }
    int rc = ::poll(fds.data(), fds.size(), timeout_ms);
    if (rc < 0 && errno != EINTR) break;
    if (fds[0].revents) break;  // the destructor wants us to stop
    now = Clock::now();
    for (auto it = st.waiters.begin(); it != st.waiters.end();) {
      auto& list = it->second;
      for (auto w = list.begin(); w != list.end();) {
        if (w->deadline <= now) {
          reply(w->fd, kTimedOut, "");
          w = list.erase(w);
        } else {
          ++w;
        }
      }
      it = list.empty() ? st.waiters.erase(it) : std::next(it);
    }
    if (fds[1].revents & POLLIN) {
      int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd >= 0) {
        int one = 1;
        ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        st.clients[fd] = {};
      }
    }
    bool stop = false;
    for (size_t i = 2; i < fds.size(); ++i) {
      if (!fds[i].revents) continue;
      int fd = fds[i].fd;
      char buffer[65536];
      ssize_t n = ::recv(fd, buffer, sizeof(buffer), 0);
      if (n <= 0) {
        if (n < 0 && errno == EINTR) continue;
        drop(fd);
        continue;
      }
      std::string& in = st.clients[fd].in;
      in.append(buffer, static_cast<size_t>(n));
      bool bad = false;
      while (in.size() >= kRequestHead) {
        uint8_t op = static_cast<uint8_t>(in[0]);
        uint32_t key_len = get_u32(in.data() + 1), value_len = get_u32(in.data() + 5);
        if (key_len > kMaxField || value_len > kMaxField) {
          bad = true;
          break;
        }
        if (in.size() < kRequestHead + key_len + value_len) break;
        std::string key = in.substr(kRequestHead, key_len);
        std::string value = in.substr(kRequestHead + key_len, value_len);
        in.erase(0, kRequestHead + key_len + value_len);
        if (!handle(fd, op, std::move(key), std::move(value), now)) {
          bad = true;
          break;
        }
        if (op == kAdd && should_stop()) stop = true;
      }
      if (bad) {
        reply(fd, kBadRequest, "");
        drop(fd);
      }
    }
    if (stop) break;
  }
  for (auto& [fd, client] : st.clients)
    ::close(fd);
  st.clients.clear();
  std::lock_guard lock(st.mu);
  st.stopped = true;
}

// ---- client ----------------------------------------------------------------------------------

Expected<StoreClient> StoreClient::connect(const std::string& host, int port, double timeout_s) {
  const std::string address = fmt::format("{}:{}", host, port);
  auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                     std::chrono::duration<double>(timeout_s));
  auto pause = std::chrono::milliseconds(5);
  for (;;) {
    TESSEL_ASSIGN_OR_RETURN(addrinfo * addresses, resolve(host, port, false));
    int last_errno = 0;
    for (addrinfo* a = addresses; a != nullptr; a = a->ai_next) {
      int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
      if (fd < 0) continue;
      if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
        ::freeaddrinfo(addresses);
        int one = 1;
        ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        return StoreClient(fd, address);
      }
      last_errno = errno;
      ::close(fd);
    }
    ::freeaddrinfo(addresses);
    if (Clock::now() + pause > deadline)
      return deadline_exceeded("could not reach the rendezvous store at {} within {:.1f} s: {}",
                               address, timeout_s, std::strerror(last_errno));
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(200));
  }
}

StoreClient::StoreClient(StoreClient&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), address_(std::move(other.address_)) {}

StoreClient& StoreClient::operator=(StoreClient&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    address_ = std::move(other.address_);
  }
  return *this;
}

StoreClient::~StoreClient() {
  if (fd_ >= 0) ::close(fd_);
}

Expected<std::string> StoreClient::request(uint8_t op, const std::string& key,
                                           std::string_view value, double timeout_s) {
  if (fd_ < 0) return failed_precondition("the rendezvous store connection is closed");
  std::string out;
  out.push_back(static_cast<char>(op));
  put_u32(out, static_cast<uint32_t>(key.size()));
  put_u32(out, static_cast<uint32_t>(value.size()));
  out += key;
  out.append(value);
  if (!write_all(fd_, out))
    return errno_error(fmt::format("sending to the rendezvous store at {}", address_));
  // The server answers a get() by its deadline, so a reply later than that plus a margin
  // means the server is gone or stuck.
  auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                     std::chrono::duration<double>(timeout_s + 10.0));
  std::string in;
  size_t want = 5;
  while (in.size() < want) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) {
      ::close(fd_);
      fd_ = -1;
      return deadline_exceeded("the rendezvous store at {} did not answer", address_);
    }
    pollfd p{fd_, POLLIN, 0};
    int rc = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count(), 1000)));
    if (rc < 0 && errno == EINTR) continue;
    if (rc <= 0) continue;
    char buffer[65536];
    ssize_t n = ::recv(fd_, buffer, sizeof(buffer), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ::close(fd_);
      fd_ = -1;
      return unavailable(
          "the rendezvous store at {} closed the connection (did the process "
          "hosting it exit?)",
          address_);
    }
    in.append(buffer, static_cast<size_t>(n));
    if (in.size() >= 5) want = 5 + get_u32(in.data() + 1);
  }
  uint8_t status = static_cast<uint8_t>(in[0]);
  std::string data = in.substr(5, want - 5);
  switch (status) {
    case kOk:
      return data;
    case kMissing:
      return not_found("key '{}' is not in the rendezvous store", key);
    case kTimedOut:
      return deadline_exceeded("waited {:.1f} s for key '{}' in the rendezvous store at {}",
                               timeout_s, key, address_);
    default:
      return internal_error("the rendezvous store at {} rejected a request", address_);
  }
}

Status StoreClient::set(const std::string& key, std::string_view value) {
  TESSEL_TRY(request(kSet, key, value, 0));
  return ok_status();
}

Expected<std::string> StoreClient::get(const std::string& key, double timeout_s) {
  std::string timeout(8, '\0');
  std::memcpy(timeout.data(), &timeout_s, 8);
  return request(kGet, key, timeout, timeout_s);
}

Expected<int64_t> StoreClient::add(const std::string& key, int64_t delta) {
  TESSEL_ASSIGN_OR_RETURN(std::string value, request(kAdd, key, encode_i64(delta), 0));
  return decode_i64(value);
}

Expected<bool> StoreClient::contains(const std::string& key) {
  auto reply = request(kContains, key, "", 0);
  if (reply.ok()) return true;
  if (reply.status().code() == Code::kNotFound) return false;
  return reply.status();
}

Status StoreClient::barrier(const std::string& key, int count, double timeout_s) {
  TESSEL_ASSIGN_OR_RETURN(int64_t arrived, add(key, 1));
  if (arrived == count) TESSEL_TRY(set(key + "/open", "1"));
  auto open = get(key + "/open", timeout_s);
  if (!open.ok()) return open.status();
  return ok_status();
}

}  // namespace tessel::dist
