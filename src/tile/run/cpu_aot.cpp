// Finding kernels compiled ahead of time (see cpu_aot.h).
#include "tile/run/cpu_aot.h"

#include <dlfcn.h>

#include <cstdlib>
#include <map>
#include <mutex>

#include "support/hash.h"
#include "support/log.h"

namespace tessel::tile {
namespace {

std::string directory_of_libtessel() {
  Dl_info info{};
  if (::dladdr(reinterpret_cast<void*>(&aot_cpu_module), &info) == 0 || !info.dli_fname) return "";
  std::string path = info.dli_fname;
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? "" : path.substr(0, slash + 1);
}

struct AotLibrary {
  void* handle = nullptr;
  std::string path;
  Status status;
};

// One load attempt per variant for the life of the process; the libraries stay loaded.
const AotLibrary& aot_library(const std::string& isa) {
  static std::mutex mutex;
  static std::map<std::string, AotLibrary> libraries;
  std::lock_guard<std::mutex> lock(mutex);
  auto [it, inserted] = libraries.try_emplace(isa);
  AotLibrary& lib = it->second;
  if (!inserted) return lib;
  if (const char* off = std::getenv("TESSEL_AOT"); off && std::string(off) == "0") {
    lib.status = unavailable("ahead-of-time kernels are turned off (TESSEL_AOT=0)");
    return lib;
  }
  std::string dir;
  if (const char* d = std::getenv("TESSEL_AOT_DIR"); d && *d)
    dir = std::string(d) + "/";
  else
    dir = directory_of_libtessel();
  lib.path = dir + "libtessel_cpu_kernels_" + isa + ".so";
  lib.handle = ::dlopen(lib.path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib.handle) {
    lib.status = unavailable("no ahead-of-time kernels for {}: {}", isa, ::dlerror());
    // Said at the default level: without the library every kernel is compiled at its first use,
    // which takes tens of seconds before a first training step and would otherwise look like a
    // hang.
    log_warn(
        "tile: {}; CPU kernels will be compiled at first use (slow). Install "
        "libtessel_cpu_kernels_{}.so beside libtessel, or point TESSEL_AOT_DIR at it",
        lib.status.message(), isa);
  }
  return lib;
}

}  // namespace

std::string aot_kernel_name(const std::string& source) {
  return "aot_" + hash_hex(hash_text(source));
}

Expected<CpuModule> aot_cpu_module(const std::string& source, const CpuIsa& isa) {
  const AotLibrary& lib = aot_library(isa.name);
  if (!lib.handle) return lib.status;
  std::string entry = "tessel_" + aot_kernel_name(source);
  void* symbol = ::dlsym(lib.handle, entry.c_str());
  if (!symbol) return not_found("{} has no kernel {}", lib.path, entry);
  CpuModule m;
  m.entry = reinterpret_cast<tessel_cpu::KernelEntry>(symbol);
  m.handle = lib.handle;
  m.library_path = lib.path;
  m.from_cache = true;
  m.ahead_of_time = true;
  m.entry_name = entry;
  return m;
}

}  // namespace tessel::tile
