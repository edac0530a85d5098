// Shared memory inside a machine, the world transport between machines (hier_transport.h).
#include "dist/hier_transport.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <vector>

#include "dist/process_info.h"
#include "dist/reduce.h"
#include "dist/shm/shm_transport.h"

namespace tessel::dist {

namespace {

constexpr size_t kRecordBytes = 128;  // a host identity or a segment name, padded

class HierTransport final : public Transport {
 public:
  HierTransport(std::unique_ptr<Transport> world, std::unique_ptr<Transport> local, int nranks,
                int local_rank, std::vector<int> leaders, int machine, std::vector<int> neighbours)
      : world_(std::move(world)),
        local_(std::move(local)),
        nranks_(nranks),
        local_rank_(local_rank),
        leaders_(std::move(leaders)),
        machine_(machine),
        neighbours_(std::move(neighbours)) {}

  const char* name() const override { return "mpi+shm"; }
  void on_progress_thread() override {
    world_->on_progress_thread();
    local_->on_progress_thread();
  }
  void heartbeat() override {
    world_->heartbeat();
    local_->heartbeat();
  }
  void cancel(const Status& why) override {
    world_->cancel(why);
    local_->cancel(why);
  }
  void leave(bool aborted) override {
    local_->leave(aborted);
    world_->leave(aborted);
  }

  Status run(std::span<const Call> calls) override {
    std::vector<Call> point_to_point;
    for (const Call& call : calls) {
      if (is_point_to_point(call.kind)) {
        point_to_point.push_back(call);
      } else if (call.kind == CallKind::kAllReduce) {
        TESSEL_TRY(all_reduce(call));
      } else {
        TESSEL_TRY(world_->run(std::span<const Call>(&call, 1)));
      }
    }
    if (point_to_point.empty()) return ok_status();
    return world_->run(point_to_point);
  }

 private:
  // Reduce to the machine's leader, all-reduce among the leaders, broadcast from the leader.
  Status all_reduce(const Call& call) {
    const RedOp op = call.op == RedOp::kAvg ? RedOp::kSum : call.op;
    Call gather = call;
    gather.kind = CallKind::kReduce;
    gather.op = op;
    gather.peer = 0;
    TESSEL_TRY(on_this_machine(local_->run(std::span<const Call>(&gather, 1))));
    if (local_rank_ == 0) {
      if (leaders_.size() > 1) TESSEL_TRY(leaders_ring(call.recv, call.count, call.dtype, op));
      if (call.op == RedOp::kAvg) {
        const void* input[1] = {call.recv};
        reduce(call.recv, nullptr, input, 1, call.count, call.dtype, RedOp::kAvg, nranks_);
      }
    }
    Call spread = call;
    spread.kind = CallKind::kBroadcast;
    spread.peer = 0;
    spread.send = call.recv;
    return on_this_machine(local_->run(std::span<const Call>(&spread, 1)));
  }

  // The shm engine names ranks by their place on this machine: say which world ranks they are.
  Status on_this_machine(Status status) const {
    if (status.ok()) return status;
    std::string list;
    for (size_t i = 0; i < neighbours_.size(); ++i)
      list += fmt::format("{}{} = world rank {}", i ? ", " : "", i, neighbours_[i]);
    return status.with_context("inside this machine (its ranks: {})", list);
  }

  // Ring all-reduce of `buffer` among the leaders: L - 1 steps of reduce-scatter (each leader
  // sends one chunk to the next and adds the chunk it receives from the previous one), after
  // which leader i holds chunk i + 1 complete, then L - 1 steps of all-gather.
  Status leaders_ring(void* buffer, size_t count, DataType dtype, RedOp op) {
    const int L = static_cast<int>(leaders_.size());
    const size_t size = dtype_size(dtype);
    auto begin = [&](int chunk) { return count * size_t(chunk) / size_t(L); };
    auto length = [&](int chunk) { return begin(chunk + 1) - begin(chunk); };
    auto at = [&](int chunk) { return static_cast<unsigned char*>(buffer) + begin(chunk) * size; };
    scratch_.resize((count / size_t(L) + 1) * size);
    const int right = leaders_[size_t((machine_ + 1) % L)];
    const int left = leaders_[size_t((machine_ + L - 1) % L)];
    auto exchange = [&](int send_chunk, void* send_to, int recv_chunk, void* recv_into) {
      std::vector<Call> pair;
      if (length(send_chunk) > 0)
        pair.push_back({CallKind::kSend, dtype, op, right, length(send_chunk), send_to, nullptr});
      if (length(recv_chunk) > 0)
        pair.push_back({CallKind::kRecv, dtype, op, left, length(recv_chunk), nullptr, recv_into});
      return pair.empty() ? ok_status() : world_->run(pair);
    };
    for (int step = 0; step < L - 1; ++step) {
      const int send_chunk = (machine_ - step + L) % L,
                recv_chunk = (machine_ - step - 1 + 2 * L) % L;
      TESSEL_TRY(exchange(send_chunk, at(send_chunk), recv_chunk, scratch_.data()));
      const void* inputs[2] = {at(recv_chunk), scratch_.data()};
      reduce(at(recv_chunk), nullptr, inputs, 2, length(recv_chunk), dtype, op, 0);
    }
    for (int step = 0; step < L - 1; ++step) {
      const int send_chunk = (machine_ + 1 - step + L) % L, recv_chunk = (machine_ - step + L) % L;
      TESSEL_TRY(exchange(send_chunk, at(send_chunk), recv_chunk, at(recv_chunk)));
    }
    return ok_status();
  }

  std::unique_ptr<Transport> world_, local_;
  int nranks_, local_rank_;
  std::vector<int> leaders_;     // the world rank that leads each machine, by machine
  int machine_;                  // this rank's machine
  std::vector<int> neighbours_;  // the world ranks on this machine, by their rank on it
  std::vector<unsigned char> scratch_;
};

// Every rank's `record` (at most kRecordBytes - 1 characters), through the world transport.
Expected<std::vector<std::string>> all_gather_records(Transport& world, int nranks,
                                                      const std::string& record) {
  std::vector<char> mine(kRecordBytes, '\0'), all(kRecordBytes * size_t(nranks), '\0');
  std::memcpy(mine.data(), record.data(), std::min(record.size(), kRecordBytes - 1));
  Call gather{CallKind::kAllGather, DataType::kUint8, RedOp::kSum, 0,
              kRecordBytes,         mine.data(),      all.data()};
  TESSEL_TRY(world.run(std::span<const Call>(&gather, 1)));
  std::vector<std::string> out;
  for (int r = 0; r < nranks; ++r)
    out.emplace_back(all.data() + size_t(r) * kRecordBytes);
  return out;
}

}  // namespace

Expected<std::unique_ptr<Transport>> maybe_hierarchical(std::unique_ptr<Transport> world, int rank,
                                                        int nranks, const CommOptions& options,
                                                        const std::string& segment_name) {
  const char* flag = std::getenv("TESSEL_HIERARCHICAL");
  const std::string choice = flag ? flag : "";
  if (!choice.empty() && choice != "0" && choice != "1")
    return invalid_argument("TESSEL_HIERARCHICAL='{}': expected 0 (never) or 1 (required)", choice);
  if (choice == "0") return world;
  TESSEL_ASSIGN_OR_RETURN(std::vector<std::string> hosts,
                          all_gather_records(*world, nranks, host_identity()));
  // Machines in order of their first rank; the leader of each is that rank.
  std::map<std::string, int> machine_of;
  std::vector<int> leaders;
  std::vector<int> members;  // ranks per machine
  for (int r = 0; r < nranks; ++r) {
    auto [it, added] = machine_of.emplace(hosts[size_t(r)], static_cast<int>(leaders.size()));
    if (added) {
      leaders.push_back(r);
      members.push_back(0);
    }
    ++members[size_t(it->second)];
  }
  const int machine = machine_of[hosts[size_t(rank)]];
  const int local_n = members[size_t(machine)];
  std::vector<int> neighbours;
  for (int r = 0; r < nranks; ++r)
    if (hosts[size_t(r)] == hosts[size_t(rank)]) neighbours.push_back(r);
  const int local_rank =
      static_cast<int>(std::find(neighbours.begin(), neighbours.end(), rank) - neighbours.begin());
  bool shared = false;
  for (int n : members)
    shared = shared || n > 1;
  // One machine: the backend asked for runs as it is; one rank per machine: nothing to share.
  if (leaders.size() == 1 || !shared) {
    if (choice == "1")
      return failed_precondition(
          "TESSEL_HIERARCHICAL=1 needs ranks on more than one machine and more than one rank on "
          "some machine; these {} ranks run on {} machine(s)",
          nranks, leaders.size());
    return world;
  }
  if (local_n > 64)
    return invalid_argument("hierarchical collectives take up to 64 ranks per machine, not {}",
                            local_n);

  std::shared_ptr<shm::Segment> segment;
  Status made;
  if (local_rank == 0) {
    auto params = shm::params_from_env();
    auto created = params.ok()
                       ? shm::Segment::create(segment_name, shm::make_layout(local_n, *params))
                       : Expected<std::shared_ptr<shm::Segment>>(params.status());
    if (created.ok())
      segment = *created;
    else
      made = created.status();
  }
  TESSEL_ASSIGN_OR_RETURN(std::vector<std::string> names,
                          all_gather_records(*world, nranks, segment ? segment->name() : ""));
  const std::string& theirs = names[size_t(leaders[size_t(machine)])];
  if (local_rank != 0) {
    auto opened = theirs.empty()
                      ? Expected<std::shared_ptr<shm::Segment>>(unavailable(
                            "rank {}, which leads this machine, could not make its shared segment",
                            leaders[size_t(machine)]))
                      : shm::Segment::open(theirs);
    if (opened.ok())
      segment = *opened;
    else
      made = opened.status();
  }
  // Every rank attaches (marks itself active in its slot) before any rank may start a call, and
  // has mapped the segment before its name goes.
  std::unique_ptr<Transport> local;
  if (segment) local = std::make_unique<shm::ShmTransport>(segment, local_rank, options);
  Call barrier{CallKind::kBarrier, DataType::kUint8, RedOp::kSum, 0, 0, nullptr, nullptr};
  Status passed = world->run(std::span<const Call>(&barrier, 1));
  if (local_rank == 0 && segment) (void)segment->unlink();
  if (!made.ok() || !passed.ok()) {
    if (local) local->leave(/*aborted=*/true);
    return made.ok() ? passed : made;
  }
  return std::unique_ptr<Transport>(new HierTransport(std::move(world), std::move(local), nranks,
                                                      local_rank, std::move(leaders), machine,
                                                      std::move(neighbours)));
}

}  // namespace tessel::dist
