// Test-only program: one rank of a multi-process test. The tests start N copies with `launch()`
// (or mpirun) and read what they print. Usage: tessel_dist_rank_helper SCENARIO [ARGS...]
//
//   matrix SIZE...         every collective x type x reduction x SIZE (case_matrix), SIZE =
//                          ELEMENTS or BYTES+ELEMENTS (1048576+3: 1 MiB and 3 elements);
//                          then a send/recv ring
//   cases SPEC...          chosen cases, SPEC = kind:type:op:count[:inplace], kind one of
//                          all_reduce, reduce, broadcast, all_gather, reduce_scatter
//   kill VICTIM COUNT      all ranks run all-reduces of COUNT floats; VICTIM kills itself with
//                          SIGKILL in the middle; the others report the error
//   stop VICTIM            VICTIM stops itself with SIGSTOP; the others report the error
//   slow VICTIM SECONDS    all-reduces for SECONDS; VICTIM computes 20 ms before each, so it
//                          arrives last at every one; every rank prints "OK slow N calls"
//   mismatch COUNT         the last rank passes COUNT - 1
//   leave VICTIM           VICTIM destroys its communicator instead of calling all-reduce
//   abort VICTIM           VICTIM aborts its communicator instead of calling all-reduce
//   absent VICTIM          VICTIM exits before joining the communicator
//
// Lines the tests parse: "OK <what>", "FAIL <what>", and
// "RESULT rank=R result=CODE at_ns=T next=CODE" followed by "MESSAGE <text>".
// Config: TESSEL_COMM_TIMEOUT etc. from the environment, as any program.
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "dist/tessel_comm.h"
#include "dist/testing/collective_cases.h"

using namespace tessel::dist;

namespace {

uint64_t monotonic_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + ts.tv_nsec;
}

int fail(const std::string& what) {
  std::printf("FAIL %s\n", what.c_str());
  std::fflush(stdout);
  return 1;
}

tessel::Expected<testing::Case> parse_case(const std::string& spec) {
  std::vector<std::string> parts;
  size_t start = 0;
  for (size_t colon; (colon = spec.find(':', start)) != std::string::npos; start = colon + 1)
    parts.push_back(spec.substr(start, colon - start));
  parts.push_back(spec.substr(start));
  if (parts.size() < 4) return tessel::invalid_argument("bad case '{}'", spec);
  testing::Case c{};
  const std::pair<const char*, CallKind> kinds[] = {{"all_reduce", CallKind::kAllReduce},
                                                    {"reduce", CallKind::kReduce},
                                                    {"broadcast", CallKind::kBroadcast},
                                                    {"all_gather", CallKind::kAllGather},
                                                    {"reduce_scatter", CallKind::kReduceScatter}};
  bool known = false;
  for (auto& [name, kind] : kinds)
    if (parts[0] == name) c.kind = kind, known = true;
  if (!known) return tessel::invalid_argument("bad kind '{}'", parts[0]);
  TESSEL_ASSIGN_OR_RETURN(c.type, parse_dtype(parts[1]));
  TESSEL_ASSIGN_OR_RETURN(c.op, parse_redop(parts[2]));
  c.count = std::strtoull(parts[3].c_str(), nullptr, 10);
  c.in_place = parts.size() > 4 && parts[4] == "inplace";
  c.root = 0;
  return c;
}

// Prints how the call failed (or did not), and what the next call returns.
void report(tesselComm_t comm, tesselStream_t stream, tesselResult_t result) {
  int rank = -1;
  tesselCommUserRank(comm, &rank);
  uint64_t at = monotonic_ns();
  std::string message = result == tesselSuccess ? "" : tesselGetLastError(nullptr);
  float x = 1;
  auto started = std::chrono::steady_clock::now();
  tesselResult_t next = tesselAllReduce(&x, &x, 1, tesselFloat32, tesselSum, comm, stream);
  if (next == tesselSuccess) next = tesselStreamSynchronize(stream);
  double next_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  std::printf("RESULT rank=%d result=%d at_ns=%llu next=%d next_s=%.3f\nMESSAGE %s\n", rank,
              static_cast<int>(result), static_cast<unsigned long long>(at), static_cast<int>(next),
              next_s, message.c_str());
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return fail("usage: tessel_dist_rank_helper SCENARIO [ARGS...]");
  const std::string scenario = argv[1];
  const int victim = argc > 2 ? std::atoi(argv[2]) : 0;

  if (scenario == "absent") {
    const char* rank = std::getenv("TESSEL_RANK");
    if (rank && std::atoi(rank) == victim) return 0;
  }
  tesselComm_t comm = nullptr;
  tesselResult_t init = tesselCommInitFromEnv(&comm, nullptr);
  if (scenario == "absent") {
    std::printf("RESULT rank=%s result=%d at_ns=0 next=0 next_s=0\nMESSAGE %s\n",
                std::getenv("TESSEL_RANK"), static_cast<int>(init), tesselGetLastError(nullptr));
    return init == tesselSuccess ? 1 : 0;
  }
  if (init != tesselSuccess) return fail(std::string("init: ") + tesselGetLastError(nullptr));
  int rank = 0, nranks = 1;
  tesselCommUserRank(comm, &rank);
  tesselCommCount(comm, &nranks);
  tesselStream_t stream;
  tesselStreamCreate(&stream);
  int status = 0;

  if (scenario == "matrix" || scenario == "cases") {
    std::vector<testing::Case> cases;
    if (scenario == "matrix") {
      std::vector<testing::Size> sizes;
      for (int i = 2; i < argc; ++i) {
        std::string arg = argv[i];
        size_t plus = arg.find('+');
        if (plus == std::string::npos)
          sizes.push_back({0, std::strtoull(arg.c_str(), nullptr, 10)});
        else
          sizes.push_back({std::strtoull(arg.substr(0, plus).c_str(), nullptr, 10),
                           std::strtoull(arg.substr(plus + 1).c_str(), nullptr, 10)});
      }
      cases = testing::case_matrix(nranks, sizes);
    } else {
      for (int i = 2; i < argc; ++i) {
        auto c = parse_case(argv[i]);
        if (!c.ok()) return fail(c.status().to_string());
        c->root = (i - 2) % nranks;
        cases.push_back(*c);
      }
    }
    size_t failures = 0;
    for (const testing::Case& c : cases) {
      std::string f = testing::run_case(comm, stream, c);
      if (!f.empty() && failures++ < 5) fail(f);
    }
    if (scenario == "matrix")
      for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{300001}})
        for (DataType t : {DataType::kUint8, DataType::kFloat32, DataType::kFloat64}) {
          std::string f = testing::run_ring(comm, stream, t, count);
          if (!f.empty() && failures++ < 5) fail(f);
        }
    if (failures) {
      fail(std::to_string(failures) + " failures");
      status = 1;
    } else {
      std::printf("OK %zu cases\n", cases.size());
    }
  } else if (scenario == "kill") {
    const size_t count = argc > 3 ? std::strtoull(argv[3], nullptr, 10) : (16u << 20);
    std::vector<float> data(count, 1.0f);
    tesselResult_t result = tesselSuccess;
    for (int i = 0; i < 64 && result == tesselSuccess; ++i)
      result =
          tesselAllReduce(data.data(), data.data(), count, tesselFloat32, tesselMax, comm, stream);
    if (rank == victim) {
      std::this_thread::sleep_for(std::chrono::milliseconds(30));
      std::printf("KILLED at_ns=%llu\n", static_cast<unsigned long long>(monotonic_ns()));
      std::fflush(stdout);
      ::kill(::getpid(), SIGKILL);
    }
    if (result == tesselSuccess) result = tesselStreamSynchronize(stream);
    report(comm, stream, result);
  } else if (scenario == "stop") {
    // Learn the victim's pid first, so that a survivor can end it once the test is over.
    std::vector<int64_t> pids(nranks);
    pids[rank] = ::getpid();
    tesselAllGather(&pids[rank], pids.data(), 1, tesselInt64, comm, stream);
    tesselStreamSynchronize(stream);
    if (rank == victim) {
      std::printf("STOPPED at_ns=%llu\n", static_cast<unsigned long long>(monotonic_ns()));
      std::fflush(stdout);
      ::kill(::getpid(), SIGSTOP);
    }
    std::vector<float> data(1000, 1.0f);
    tesselResult_t result = tesselAllReduce(data.data(), data.data(), data.size(), tesselFloat32,
                                            tesselSum, comm, stream);
    if (result == tesselSuccess) result = tesselStreamSynchronize(stream);
    report(comm, stream, result);
    if (rank == (victim + 1) % nranks) ::kill(static_cast<pid_t>(pids[victim]), SIGKILL);
  } else if (scenario == "slow") {
    const double seconds = argc > 3 ? std::atof(argv[3]) : 3.0;
    const uint64_t end = monotonic_ns() + static_cast<uint64_t>(seconds * 1e9);
    tesselResult_t result = tesselSuccess;
    int calls = 0;
    // The same number of calls on every rank: the loop count comes from rank 0's clock.
    for (int more = 1; more && result == tesselSuccess; ++calls) {
      if (rank == victim) {
        const uint64_t busy_until = monotonic_ns() + 20'000'000;
        while (monotonic_ns() < busy_until) {
        }
      }
      more = rank == 0 ? monotonic_ns() < end : 0;
      result = tesselAllReduce(&more, &more, 1, tesselInt32, tesselMax, comm, stream);
      if (result == tesselSuccess) result = tesselStreamSynchronize(stream);
    }
    if (result != tesselSuccess) {
      report(comm, stream, result);
      status = 1;
    } else {
      std::printf("OK slow %d calls\n", calls);
    }
  } else if (scenario == "mismatch") {
    const size_t count = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 1000;
    std::vector<float> data(count, 1.0f);
    size_t mine = rank == nranks - 1 ? count - 1 : count;
    tesselResult_t result =
        tesselAllReduce(data.data(), data.data(), mine, tesselFloat32, tesselSum, comm, stream);
    if (result == tesselSuccess) result = tesselStreamSynchronize(stream);
    report(comm, stream, result);
  } else if (scenario == "leave" || scenario == "abort") {
    if (rank == victim) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      if (scenario == "leave")
        tesselCommDestroy(comm);
      else
        tesselCommAbort(comm);
      comm = nullptr;
    } else {
      std::vector<float> data(100000, 1.0f);
      tesselResult_t result = tesselAllReduce(data.data(), data.data(), data.size(), tesselFloat32,
                                              tesselSum, comm, stream);
      if (result == tesselSuccess) result = tesselStreamSynchronize(stream);
      report(comm, stream, result);
    }
  } else {
    return fail("unknown scenario " + scenario);
  }
  tesselStreamDestroy(stream);
  if (comm) tesselCommDestroy(comm);
  std::fflush(stdout);
  return status;
}
