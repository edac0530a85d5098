// What the fake CUDA driver (fake_cuda_driver.cpp, built as libtessel_fake_cuda.so) records: a
// stand-in for libcuda that tests load instead of the real one (TESSEL_CUDA_LIBRARY=<its path>)
// to check, on a machine without a GPU, what tessel asks of the driver: which context is current
// on which thread, which stream each launch and copy goes to, which modules are loaded and
// unloaded, and each launch's arguments. Device memory is host memory, but device addresses are
// tagged (kAddressTag) so that a kernel argument can be recognised as a pointer and checked to
// land inside an allocation, and so that the host dereferencing one crashes. Kernels do not run:
// what a launch would write stays as it was (zeros), so no result can be checked through it.
//
// Its environment: TESSEL_FAKE_CUDA_DEVICES (default 1), TESSEL_FAKE_CUDA_CC ("9.0": compute
// capability of every device; a module whose PTX targets a newer one fails to load, as on a real
// driver), TESSEL_FAKE_CUDA_REPORT (a file the fake writes a one-line summary of what is still
// alive to when the process exits).
//
//   auto log = reinterpret_cast<FakeCudaLogFn>(dlsym(handle, "tessel_fake_cuda_log"))();
//   EXPECT_TRUE(log->violations.empty()) << log->violations.front();
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <thread>
#include <vector>

namespace tessel::fake_cuda {

// Bits 56..63 of every fake device address; host addresses never have them.
inline constexpr std::uint64_t kAddressTag = 0xd1ull << 56;
inline bool is_device_address(std::uint64_t value) {
  return (value >> 56) == (kAddressTag >> 56);
}

// One parameter of a kernel entry, as its PTX declares it.
struct Param {
  int size = 0;    // bytes
  int align = 0;   // bytes
  int offset = 0;  // in the packed parameter buffer
};

struct Entry {
  std::vector<Param> params;
  int max_threads = 0;  // .maxntid x*y*z, 0 when the PTX sets none
};

struct Module {
  int id = 0;
  const void* context = nullptr;
  std::string target;   // "sm_90" from the PTX's .target
  std::string version;  // PTX ISA version, "9.0"
  std::map<std::string, Entry> entries;
  bool unloaded = false;
};

struct Launch {
  std::string kernel;             // the entry's name
  int module = 0;                 // Module::id
  const void* context = nullptr;  // the context current on the launching thread
  const void* stream = nullptr;   // nullptr: the legacy default stream
  std::thread::id thread;
  unsigned grid[3] = {0, 0, 0};
  unsigned block[3] = {0, 0, 0};
  unsigned shared_bytes = 0;
  bool packed = false;                          // arguments came as one buffer through `extra`
  std::vector<std::vector<std::uint8_t>> args;  // each parameter's bytes, PTX sizes
  // For each parameter that holds a device address: how many bytes of its allocation lie from
  // the address to the allocation's end (-1: not a device address).
  std::vector<std::int64_t> bytes_to_end;
};

struct Log {
  std::vector<Launch> launches;
  std::vector<Module> modules;
  // API misuse the fake detected, one message each ("cuLaunchKernel: no current context").
  std::vector<std::string> violations;
  int primary_retains = 0, primary_releases = 0;
  int streams_created = 0, streams_destroyed = 0;
  int events_created = 0, events_destroyed = 0;
  std::int64_t allocations = 0, frees = 0, live_bytes = 0;
  int default_stream_uses = 0;  // copies, launches and waits on stream 0
  int synchronizations = 0;     // cuStreamSynchronize, cuCtxSynchronize, cuEventSynchronize
  int copies = 0;
};

}  // namespace tessel::fake_cuda

// The fake's exports besides the driver API: its log (read it with no launch in flight) and a
// reset between test cases (clears what was recorded, keeps live objects).
extern "C" {
using FakeCudaLogFn = tessel::fake_cuda::Log* (*)();
using FakeCudaResetFn = void (*)();
}
