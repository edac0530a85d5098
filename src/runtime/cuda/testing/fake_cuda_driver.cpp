// Test-only stand-in for libcuda (see fake_cuda_driver.h): the driver entry points tessel loads
// (hw/cuda_api.h), over host memory, checking what a real driver would refuse and recording the
// rest. Every handle is a heap object that is never freed, so a handle used after its destroy
// call is recognised, not reused.
#include "runtime/cuda/testing/fake_cuda_driver.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <mutex>
#include <regex>
#include <sstream>

namespace {

using tessel::fake_cuda::Entry;
using tessel::fake_cuda::kAddressTag;
using tessel::fake_cuda::Launch;
using tessel::fake_cuda::Log;
using tessel::fake_cuda::Module;
using tessel::fake_cuda::Param;

// cuda.h's codes for what the fake reports.
enum : int {
  kSuccess = 0,
  kInvalidValue = 1,
  kOutOfMemory = 2,
  kNotInitialized = 3,
  kInvalidDevice = 101,
  kInvalidImage = 200,
  kInvalidContext = 201,
  kInvalidPtx = 218,
  kInvalidHandle = 400,
  kNotFound = 500,
  kLaunchOutOfResources = 701,
  kContextIsDestroyed = 709,
};

struct Context {
  int device = 0;
  int retains = 0;
  bool destroyed = false;
};
struct Stream {
  Context* context = nullptr;
  bool destroyed = false;
};
struct Event {
  Context* context = nullptr;
  bool destroyed = false;
};
struct LoadedModule {
  int index = 0;  // into Log::modules
  Context* context = nullptr;
};
struct Function {
  LoadedModule* module = nullptr;
  std::string name;
  int max_dynamic_shared = 48 << 10;
};
struct Allocation {
  std::uint64_t size = 0;
  void* host = nullptr;
};

struct State {
  std::mutex mutex;
  Log log;
  bool initialised = false;
  int device_count = 1;
  int cc_major = 9, cc_minor = 0;
  std::vector<Context*> primary;               // one per device
  std::map<std::uint64_t, Allocation> memory;  // by device address
  // Every stream and event ever made, destroyed ones included: a destroyed handle stays readable
  // so that a use after destroy is reported as misuse rather than read from freed memory.
  std::vector<std::unique_ptr<Stream>> streams;
  std::vector<std::unique_ptr<Event>> events;
};

State& state() {
  static State* s = [] {
    auto* st = new State;  // never freed: the exit report and late releases still use it
    if (const char* n = std::getenv("TESSEL_FAKE_CUDA_DEVICES")) st->device_count = std::atoi(n);
    if (const char* cc = std::getenv("TESSEL_FAKE_CUDA_CC"))
      std::sscanf(cc, "%d.%d", &st->cc_major, &st->cc_minor);
    for (int d = 0; d < st->device_count; ++d) {
      st->primary.push_back(new Context);
      st->primary.back()->device = d;
    }
    return st;
  }();
  return *s;
}

thread_local Context* current_context = nullptr;

int violation(State& s, int code, const std::string& message) {
  s.log.violations.push_back(message);
  return code;
}

// The current context of this thread, or the code to return.
int need_context(State& s, const char* call) {
  if (!s.initialised) return violation(s, kNotInitialized, std::string(call) + ": before cuInit");
  if (!current_context)
    return violation(s, kInvalidContext, std::string(call) + ": no current context on this thread");
  if (current_context->destroyed)
    return violation(s, kContextIsDestroyed,
                     std::string(call) + ": the current context was released");
  return kSuccess;
}

int check_stream(State& s, const char* call, void* handle) {
  if (!handle) {
    ++s.log.default_stream_uses;
    return kSuccess;
  }
  auto* stream = static_cast<Stream*>(handle);
  if (stream->destroyed)
    return violation(s, kInvalidHandle, std::string(call) + ": a destroyed stream");
  if (stream->context != current_context)
    return violation(s, kInvalidHandle,
                     std::string(call) + ": a stream of another context than the current one");
  return kSuccess;
}

// The host address of [address, address + bytes) when it lies inside one allocation.
void* host_range(State& s, const char* call, std::uint64_t address, std::uint64_t bytes,
                 int* code) {
  auto it = s.memory.upper_bound(address);
  if (it != s.memory.begin()) {
    --it;
    std::uint64_t offset = address - it->first;
    if (address >= it->first && offset + bytes <= it->second.size) {
      *code = kSuccess;
      return static_cast<char*>(it->second.host) + offset;
    }
  }
  char text[160];
  std::snprintf(text, sizeof text, "%s: %llu bytes at 0x%llx are not inside one allocation", call,
                static_cast<unsigned long long>(bytes), static_cast<unsigned long long>(address));
  *code = violation(s, kInvalidValue, text);
  return nullptr;
}

// Bytes from `address` to the end of its allocation, or -1 when it is in none.
std::int64_t bytes_to_end(State& s, std::uint64_t address) {
  auto it = s.memory.upper_bound(address);
  if (it == s.memory.begin()) return -1;
  --it;
  if (address < it->first || address > it->first + it->second.size) return -1;
  return static_cast<std::int64_t>(it->first + it->second.size - address);
}

int type_bytes(const std::string& type) {
  if (type.size() < 3) return 0;
  return std::atoi(type.c_str() + 2) / 8;  // ".u64" -> 8, ".b8" -> 1, ".f16" -> 2
}

// The entries of a PTX module, their parameters and launch bounds.
void parse_ptx(const std::string& ptx, Module* m) {
  static const std::regex target(R"(\.target\s+(sm_\d+a?))");
  static const std::regex version(R"(\.version\s+(\d+\.\d+))");
  static const std::regex entry(R"(\.entry\s+([A-Za-z_$][\w$]*)\s*\(([^)]*)\))");
  static const std::regex param(
      R"(\.param\s+(?:\.align\s+(\d+)\s+)?(\.[usbf]\d+)(?:\s+\.ptr(?:\s+\.\w+)*(?:\s+\.align\s+\d+)?)?\s+[\w$]+(?:\[(\d+)\])?)");
  static const std::regex maxntid(R"(^\s*\.maxntid\s+(\d+)(?:,\s*(\d+))?(?:,\s*(\d+))?)");
  std::smatch match;
  if (std::regex_search(ptx, match, target)) m->target = match[1].str();
  if (std::regex_search(ptx, match, version)) m->version = match[1].str();
  for (auto it = std::sregex_iterator(ptx.begin(), ptx.end(), entry); it != std::sregex_iterator();
       ++it) {
    Entry e;
    std::string list = (*it)[2].str();
    int offset = 0;
    for (auto p = std::sregex_iterator(list.begin(), list.end(), param);
         p != std::sregex_iterator(); ++p) {
      Param prm;
      int element = type_bytes((*p)[2].str());
      int count = (*p)[3].matched ? std::atoi((*p)[3].str().c_str()) : 1;
      prm.size = element * count;
      prm.align = (*p)[1].matched ? std::atoi((*p)[1].str().c_str()) : element;
      offset = (offset + prm.align - 1) / prm.align * prm.align;
      prm.offset = offset;
      offset += prm.size;
      e.params.push_back(prm);
    }
    // Launch bounds follow the parameter list.
    std::string rest = ptx.substr(static_cast<size_t>(it->position(0) + it->length(0)), 200);
    std::smatch bounds;
    std::istringstream lines(rest);
    std::string line;
    for (int n = 0; n < 4 && std::getline(lines, line); ++n)
      if (std::regex_search(line, bounds, maxntid)) {
        e.max_threads = std::atoi(bounds[1].str().c_str());
        if (bounds[2].matched) e.max_threads *= std::atoi(bounds[2].str().c_str());
        if (bounds[3].matched) e.max_threads *= std::atoi(bounds[3].str().c_str());
      }
    m->entries[(*it)[1].str()] = e;
  }
}

int device_attribute(const State& s, int attribute) {
  switch (attribute) {
    case 1:
      return 1024;  // max threads per block
    case 5:
      return 2147483647;  // max grid x
    case 6:
    case 7:
      return 65535;  // max grid y, z
    case 8:
      return 48 << 10;  // shared memory per block
    case 10:
      return 32;  // warp size
    case 13:
      return 1980000;  // clock, kHz
    case 16:
      return 132;  // multiprocessors
    case 36:
      return 2619000;  // memory clock, kHz
    case 37:
      return 5120;  // bus width, bits
    case 38:
      return 50 << 20;  // L2
    case 75:
      return s.cc_major;
    case 76:
      return s.cc_minor;
    case 97:
      return s.cc_major >= 9 ? 227 << 10 : 163 << 10;  // shared memory opt-in
    default:
      return 0;
  }
}

constexpr std::uint64_t kTotalMemory = 80ull << 30;

int copy_bytes(const char* call, std::uint64_t dst, const void* host_src, std::uint64_t src,
               void* host_dst, std::size_t bytes, void* stream) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (int code = need_context(s, call)) return code;
  if (int code = check_stream(s, call, stream)) return code;
  ++s.log.copies;
  if (bytes == 0) return kSuccess;
  int code = kSuccess;
  void* to = host_dst ? host_dst : host_range(s, call, dst, bytes, &code);
  if (code) return code;
  const void* from = host_src ? host_src : host_range(s, call, src, bytes, &code);
  if (code) return code;
  std::memmove(to, from, bytes);
  return kSuccess;
}

void write_report() {
  const char* path = std::getenv("TESSEL_FAKE_CUDA_REPORT");
  if (!path) return;
  State& s = state();
  int loaded = static_cast<int>(s.log.modules.size()), unloaded = 0;
  for (const Module& m : s.log.modules)
    unloaded += m.unloaded;
  std::ofstream out(path);
  out << "modules_loaded " << loaded << "\nmodules_unloaded " << unloaded << "\nstreams_created "
      << s.log.streams_created << "\nstreams_destroyed " << s.log.streams_destroyed
      << "\nevents_created " << s.log.events_created << "\nevents_destroyed "
      << s.log.events_destroyed << "\nprimary_retains " << s.log.primary_retains
      << "\nprimary_releases " << s.log.primary_releases << "\nallocations " << s.log.allocations
      << "\nfrees " << s.log.frees << "\nlive_bytes " << s.log.live_bytes << "\nlaunches "
      << s.log.launches.size() << "\nviolations " << s.log.violations.size() << "\n";
  for (const std::string& v : s.log.violations)
    out << "violation " << v << "\n";
}

}  // namespace

#define FAKE_CUDA extern "C" __attribute__((visibility("default")))

FAKE_CUDA Log* tessel_fake_cuda_log() {
  return &state().log;
}

FAKE_CUDA void tessel_fake_cuda_reset() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.log.launches.clear();
  s.log.violations.clear();
  s.log.default_stream_uses = s.log.synchronizations = s.log.copies = 0;
}

__attribute__((destructor)) static void fake_cuda_at_exit() {
  write_report();
}

FAKE_CUDA int cuInit(unsigned flags) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (flags != 0) return kInvalidValue;
  s.initialised = true;
  return kSuccess;
}

FAKE_CUDA int cuDriverGetVersion(int* version) {
  *version = 13000;
  return kSuccess;
}

FAKE_CUDA int cuGetErrorName(int error, const char** name) {
  static const std::map<int, const char*> names = {
      {kSuccess, "CUDA_SUCCESS"},
      {kInvalidValue, "CUDA_ERROR_INVALID_VALUE"},
      {kOutOfMemory, "CUDA_ERROR_OUT_OF_MEMORY"},
      {kNotInitialized, "CUDA_ERROR_NOT_INITIALIZED"},
      {kInvalidDevice, "CUDA_ERROR_INVALID_DEVICE"},
      {kInvalidImage, "CUDA_ERROR_INVALID_IMAGE"},
      {kInvalidContext, "CUDA_ERROR_INVALID_CONTEXT"},
      {kInvalidPtx, "CUDA_ERROR_INVALID_PTX"},
      {kInvalidHandle, "CUDA_ERROR_INVALID_HANDLE"},
      {kNotFound, "CUDA_ERROR_NOT_FOUND"},
      {kLaunchOutOfResources, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES"},
      {kContextIsDestroyed, "CUDA_ERROR_CONTEXT_IS_DESTROYED"}};
  auto it = names.find(error);
  if (it == names.end()) return kInvalidValue;
  *name = it->second;
  return kSuccess;
}

FAKE_CUDA int cuGetErrorString(int error, const char** text) {
  if (cuGetErrorName(error, text) != kSuccess) return kInvalidValue;
  return kSuccess;
}

FAKE_CUDA int cuDeviceGetCount(int* count) {
  State& s = state();
  if (!s.initialised) return kNotInitialized;
  *count = s.device_count;
  return kSuccess;
}

FAKE_CUDA int cuDeviceGet(int* device, int ordinal) {
  State& s = state();
  if (!s.initialised) return kNotInitialized;
  if (ordinal < 0 || ordinal >= s.device_count) return kInvalidDevice;
  *device = ordinal;
  return kSuccess;
}

FAKE_CUDA int cuDeviceGetName(char* name, int length, int device) {
  State& s = state();
  if (device < 0 || device >= s.device_count) return kInvalidDevice;
  std::snprintf(name, static_cast<size_t>(length), "Fake CUDA device %d (sm_%d%d)", device,
                s.cc_major, s.cc_minor);
  return kSuccess;
}

FAKE_CUDA int cuDeviceTotalMem_v2(std::size_t* bytes, int device) {
  if (device < 0 || device >= state().device_count) return kInvalidDevice;
  *bytes = kTotalMemory;
  return kSuccess;
}

FAKE_CUDA int cuDeviceGetAttribute(int* value, int attribute, int device) {
  State& s = state();
  if (device < 0 || device >= s.device_count) return kInvalidDevice;
  *value = device_attribute(s, attribute);
  return kSuccess;
}

FAKE_CUDA int cuDevicePrimaryCtxRetain(void** context, int device) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (device < 0 || device >= s.device_count) return kInvalidDevice;
  Context* c = s.primary[static_cast<size_t>(device)];
  if (c->destroyed) {  // released to zero before: a fresh context, as the driver makes one
    c = s.primary[static_cast<size_t>(device)] = new Context;
    c->device = device;
  }
  ++c->retains;
  ++s.log.primary_retains;
  *context = c;
  return kSuccess;
}

FAKE_CUDA int cuDevicePrimaryCtxRelease_v2(int device) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (device < 0 || device >= s.device_count) return kInvalidDevice;
  Context* c = s.primary[static_cast<size_t>(device)];
  if (c->retains <= 0)
    return violation(s, kInvalidContext, "cuDevicePrimaryCtxRelease: not retained");
  ++s.log.primary_releases;
  if (--c->retains == 0) c->destroyed = true;
  return kSuccess;
}

FAKE_CUDA int cuCtxSetCurrent(void* context) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  auto* c = static_cast<Context*>(context);
  if (c && c->destroyed)
    return violation(s, kContextIsDestroyed, "cuCtxSetCurrent: a released context");
  current_context = c;
  return kSuccess;
}

FAKE_CUDA int cuCtxGetCurrent(void** context) {
  *context = current_context;
  return kSuccess;
}

FAKE_CUDA int cuCtxSynchronize() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (int code = need_context(s, "cuCtxSynchronize")) return code;
  ++s.log.synchronizations;
  return kSuccess;
}

FAKE_CUDA int cuMemGetInfo_v2(std::size_t* free_bytes, std::size_t* total) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (int code = need_context(s, "cuMemGetInfo")) return code;
  *total = kTotalMemory;
  *free_bytes = kTotalMemory - static_cast<std::size_t>(s.log.live_bytes);
  return kSuccess;
}

FAKE_CUDA int cuMemAlloc_v2(std::uint64_t* address, std::size_t bytes) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (int code = need_context(s, "cuMemAlloc")) return code;
  if (bytes == 0) return violation(s, kInvalidValue, "cuMemAlloc: 0 bytes");
  if (static_cast<std::uint64_t>(s.log.live_bytes) + bytes > kTotalMemory) return kOutOfMemory;
  std::size_t rounded = (bytes + 255) / 256 * 256;
  void* host = std::aligned_alloc(256, rounded);
  if (!host) return kOutOfMemory;
  std::memset(host, 0, rounded);
  *address = kAddressTag | reinterpret_cast<std::uintptr_t>(host);
  s.memory[*address] = {bytes, host};
  ++s.log.allocations;
  s.log.live_bytes += static_cast<std::int64_t>(bytes);
  return kSuccess;
}

FAKE_CUDA int cuMemFree_v2(std::uint64_t address) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (int code = need_context(s, "cuMemFree")) return code;
  auto it = s.memory.find(address);
  if (it == s.memory.end())
    return violation(s, kInvalidValue, "cuMemFree: not the start of a live allocation");
  std::free(it->second.host);
  s.log.live_bytes -= static_cast<std::int64_t>(it->second.size);
  ++s.log.frees;
  s.memory.erase(it);
  return kSuccess;
}

FAKE_CUDA int cuMemcpyHtoD_v2(std::uint64_t dst, const void* src, std::size_t bytes) {
  return copy_bytes("cuMemcpyHtoD", dst, src, 0, nullptr, bytes, nullptr);
}
FAKE_CUDA int cuMemcpyDtoH_v2(void* dst, std::uint64_t src, std::size_t bytes) {
  return copy_bytes("cuMemcpyDtoH", 0, nullptr, src, dst, bytes, nullptr);
}
FAKE_CUDA int cuMemcpyDtoD_v2(std::uint64_t dst, std::uint64_t src, std::size_t bytes) {
  return copy_bytes("cuMemcpyDtoD", dst, nullptr, src, nullptr, bytes, nullptr);
}
FAKE_CUDA int cuMemcpyHtoDAsync_v2(std::uint64_t dst, const void* src, std::size_t bytes,
                                   void* stream) {
  return copy_bytes("cuMemcpyHtoDAsync", dst, src, 0, nullptr, bytes, stream);
}
FAKE_CUDA int cuMemcpyDtoHAsync_v2(void* dst, std::uint64_t src, std::size_t bytes, void* stream) {
  return copy_bytes("cuMemcpyDtoHAsync", 0, nullptr, src, dst, bytes, stream);
}
FAKE_CUDA int cuMemcpyDtoDAsync_v2(std::uint64_t dst, std::uint64_t src, std::size_t bytes,
                                   void* stream) {
  return copy_bytes("cuMemcpyDtoDAsync", dst, nullptr, src, nullptr, bytes, stream);
}

int fill(const char* call, std::uint64_t dst, unsigned char value, std::size_t n, void* stream) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (int code = need_context(s, call)) return code;
  if (int code = check_stream(s, call, stream)) return code;
  int code = kSuccess;
  void* to = n ? host_range(s, call, dst, n, &code) : nullptr;
  if (code) return code;
  if (to) std::memset(to, value, n);
  return kSuccess;
}
FAKE_CUDA int cuMemsetD8_v2(std::uint64_t dst, unsigned char value, std::size_t n) {
  return fill("cuMemsetD8", dst, value, n, nullptr);
}
FAKE_CUDA int cuMemsetD8Async(std::uint64_t dst, unsigned char value, std::size_t n, void* stream) {
  return fill("cuMemsetD8Async", dst, value, n, stream);
}

FAKE_CUDA int cuStreamCreate(void** stream, unsigned flags) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (int code = need_context(s, "cuStreamCreate")) return code;
  if (flags > 1) return kInvalidValue;
  auto* st = s.streams.emplace_back(std::make_unique<Stream>()).get();
  st->context = current_context;
  ++s.log.streams_created;
  *stream = st;
  return kSuccess;
}

FAKE_CUDA int cuStreamDestroy_v2(void* stream) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (int code = need_context(s, "cuStreamDestroy")) return code;
  if (!stream) return violation(s, kInvalidHandle, "cuStreamDestroy: stream 0");
  if (int code = check_stream(s, "cuStreamDestroy", stream)) return code;
  static_cast<Stream*>(stream)->destroyed = true;
  ++s.log.streams_destroyed;
  return kSuccess;
}

FAKE_CUDA int cuStreamSynchronize(void* stream) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (int code = need_context(s, "cuStreamSynchronize")) return code;
  if (int code = check_stream(s, "cuStreamSynchronize", stream)) return code;
  ++s.log.synchronizations;
  return kSuccess;
}

FAKE_CUDA int cuEventCreate(void** event, unsigned flags) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (int code = need_context(s, "cuEventCreate")) return code;
  if (flags > 7) return kInvalidValue;
  auto* e = s.events.emplace_back(std::make_unique<Event>()).get();
  e->context = current_context;
  ++s.log.events_created;
  *event = e;
  return kSuccess;
}

FAKE_CUDA int cuEventDestroy_v2(void* event) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  auto* e = static_cast<Event*>(event);
  if (!e || e->destroyed) return violation(s, kInvalidHandle, "cuEventDestroy: not a live event");
  e->destroyed = true;
  ++s.log.events_destroyed;
  return kSuccess;
}

FAKE_CUDA int cuEventRecord(void* event, void* stream) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (int code = need_context(s, "cuEventRecord")) return code;
  if (int code = check_stream(s, "cuEventRecord", stream)) return code;
  auto* e = static_cast<Event*>(event);
  if (!e || e->destroyed) return violation(s, kInvalidHandle, "cuEventRecord: not a live event");
  if (e->context != current_context)
    return violation(s, kInvalidHandle, "cuEventRecord: an event of another context");
  return kSuccess;
}

FAKE_CUDA int cuStreamWaitEvent(void* stream, void* event, unsigned) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (int code = need_context(s, "cuStreamWaitEvent")) return code;
  if (int code = check_stream(s, "cuStreamWaitEvent", stream)) return code;
  auto* e = static_cast<Event*>(event);
  if (!e || e->destroyed)
    return violation(s, kInvalidHandle, "cuStreamWaitEvent: not a live event");
  return kSuccess;
}

FAKE_CUDA int cuEventSynchronize(void* event) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  auto* e = static_cast<Event*>(event);
  if (!e || e->destroyed)
    return violation(s, kInvalidHandle, "cuEventSynchronize: not a live event");
  ++s.log.synchronizations;
  return kSuccess;
}

FAKE_CUDA int cuEventElapsedTime(float* milliseconds, void* start, void* end) {
  if (!start || !end) return kInvalidHandle;
  *milliseconds = 0;
  return kSuccess;
}

FAKE_CUDA int cuModuleLoadDataEx(void** module, const void* image, unsigned count, int* options,
                                 void** values) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (int code = need_context(s, "cuModuleLoadDataEx")) return code;
  std::string ptx(static_cast<const char*>(image));
  Module m;
  m.id = static_cast<int>(s.log.modules.size()) + 1;
  m.context = current_context;
  parse_ptx(ptx, &m);
  std::string error;
  if (m.target.empty() || m.entries.empty()) {
    error = "not a PTX module with .target and an .entry";
  } else {
    int target = std::atoi(m.target.c_str() + 3);
    if (target > s.cc_major * 10 + s.cc_minor)
      error = "ptxas fatal: SM version specified by .target (" + m.target +
              ") is higher than the device's (sm_" + std::to_string(s.cc_major) +
              std::to_string(s.cc_minor) + ")";
  }
  if (!error.empty()) {
    for (unsigned i = 0; i + 1 < count; ++i)
      if (options[i] == 5 && options[i + 1] == 6) {  // CU_JIT_ERROR_LOG_BUFFER (+ its size)
        auto size = reinterpret_cast<std::uintptr_t>(values[i + 1]);
        std::snprintf(static_cast<char*>(values[i]), size, "%s", error.c_str());
      }
    return kInvalidPtx;
  }
  s.log.modules.push_back(m);
  auto* loaded = new LoadedModule;
  loaded->index = static_cast<int>(s.log.modules.size()) - 1;
  loaded->context = current_context;
  *module = loaded;
  return kSuccess;
}

FAKE_CUDA int cuModuleUnload(void* module) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (int code = need_context(s, "cuModuleUnload")) return code;
  auto* loaded = static_cast<LoadedModule*>(module);
  if (!loaded) return violation(s, kInvalidHandle, "cuModuleUnload: null module");
  Module& m = s.log.modules[static_cast<size_t>(loaded->index)];
  if (m.unloaded) return violation(s, kInvalidHandle, "cuModuleUnload: unloaded twice");
  if (loaded->context != current_context)
    return violation(s, kInvalidContext, "cuModuleUnload: current context is not the module's");
  m.unloaded = true;
  return kSuccess;
}

FAKE_CUDA int cuModuleGetFunction(void** function, void* module, const char* name) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (int code = need_context(s, "cuModuleGetFunction")) return code;
  auto* loaded = static_cast<LoadedModule*>(module);
  const Module& m = s.log.modules[static_cast<size_t>(loaded->index)];
  if (m.unloaded) return violation(s, kInvalidHandle, "cuModuleGetFunction: unloaded module");
  if (!m.entries.count(name)) return kNotFound;
  auto* f = new Function;
  f->module = loaded;
  f->name = name;
  *function = f;
  return kSuccess;
}

FAKE_CUDA int cuFuncSetAttribute(void* function, int attribute, int value) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  auto* f = static_cast<Function*>(function);
  if (!f) return kInvalidHandle;
  if (attribute == 8) {  // CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
    if (value > device_attribute(s, 97)) return kInvalidValue;
    f->max_dynamic_shared = value;
  }
  return kSuccess;
}

FAKE_CUDA int cuLaunchKernel(void* function, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                             unsigned by, unsigned bz, unsigned shared, void* stream, void** params,
                             void** extra) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (int code = need_context(s, "cuLaunchKernel")) return code;
  auto* f = static_cast<Function*>(function);
  if (!f) return violation(s, kInvalidHandle, "cuLaunchKernel: null function");
  const Module& m = s.log.modules[static_cast<size_t>(f->module->index)];
  const std::string call = "cuLaunchKernel(" + f->name + ")";
  if (m.unloaded) return violation(s, kInvalidHandle, call + ": its module was unloaded");
  if (f->module->context != current_context)
    return violation(s, kInvalidContext, call + ": the current context is not the module's");
  if (int code = check_stream(s, call.c_str(), stream)) return code;
  const Entry& entry = m.entries.at(f->name);
  if (gx == 0 || gy == 0 || gz == 0 || bx == 0 || by == 0 || bz == 0 || gy > 65535 || gz > 65535 ||
      gx > 2147483647u)
    return violation(s, kInvalidValue,
                     call + ": grid " + std::to_string(gx) + "x" + std::to_string(gy) + "x" +
                         std::to_string(gz) + " or block outside the device's limits");
  unsigned threads = bx * by * bz;
  if (threads > 1024 ||
      (entry.max_threads > 0 && threads > static_cast<unsigned>(entry.max_threads)))
    return violation(s, kLaunchOutOfResources,
                     call + ": " + std::to_string(threads) +
                         " threads per block, more than the "
                         "kernel's launch bounds (" +
                         std::to_string(entry.max_threads) + ")");
  if (shared > static_cast<unsigned>(f->max_dynamic_shared))
    return violation(
        s, kInvalidValue,
        call + ": " + std::to_string(shared) + " bytes of dynamic shared memory without opting in");

  Launch launch;
  launch.kernel = f->name;
  launch.module = m.id;
  launch.context = current_context;
  launch.stream = stream;
  launch.thread = std::this_thread::get_id();
  launch.grid[0] = gx, launch.grid[1] = gy, launch.grid[2] = gz;
  launch.block[0] = bx, launch.block[1] = by, launch.block[2] = bz;
  launch.shared_bytes = shared;
  const std::uint8_t* packed = nullptr;
  if (extra) {
    std::size_t size = 0;
    bool has_size = false;
    for (int i = 0; extra[i] != nullptr; i += 2) {
      auto key = reinterpret_cast<std::uintptr_t>(extra[i]);
      if (key == 1)
        packed = static_cast<const std::uint8_t*>(extra[i + 1]);
      else if (key == 2)
        size = *static_cast<std::size_t*>(extra[i + 1]), has_size = true;
      else
        return violation(s, kInvalidValue, call + ": unknown key in extra");
    }
    std::size_t want =
        entry.params.empty()
            ? 0
            : static_cast<std::size_t>(entry.params.back().offset + entry.params.back().size);
    if (!packed || !has_size)
      return violation(s, kInvalidValue, call + ": extra without buffer pointer and size");
    if (size != want)
      return violation(s, kInvalidValue,
                       call + ": packed arguments of " + std::to_string(size) +
                           " bytes, the kernel's parameters take " + std::to_string(want));
    if (params) return violation(s, kInvalidValue, call + ": both kernelParams and extra");
    launch.packed = true;
  } else if (!params && !entry.params.empty()) {
    return violation(s, kInvalidValue, call + ": no arguments for its parameters");
  }
  for (size_t i = 0; i < entry.params.size(); ++i) {
    const Param& p = entry.params[i];
    const auto* bytes = packed ? packed + p.offset : static_cast<const std::uint8_t*>(params[i]);
    launch.args.emplace_back(bytes, bytes + p.size);
    std::int64_t to_end = -1;
    if (p.size == 8) {
      std::uint64_t value;
      std::memcpy(&value, bytes, 8);
      if (tessel::fake_cuda::is_device_address(value)) {
        to_end = bytes_to_end(s, value);
        if (to_end < 0) {
          char text[200];
          std::snprintf(text, sizeof text, "%s: argument %zu (0x%llx) is in no allocation",
                        call.c_str(), i, static_cast<unsigned long long>(value));
          violation(s, kSuccess, text);
        }
      }
    }
    launch.bytes_to_end.push_back(to_end);
  }
  s.log.launches.push_back(std::move(launch));
  return kSuccess;
}
