// Finding and loading libtessel_mpi.so (mpi_loader.h).
#include "dist/mpi_loader.h"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

namespace tessel::dist {

namespace {

struct Plugin {
  MpiPluginCreateFn create = nullptr;
  MpiPluginWorldFn world = nullptr;
  Status status;
};

std::string directory_of_libtessel() {
  Dl_info info{};
  if (::dladdr(reinterpret_cast<void*>(&make_mpi_transport), &info) == 0 || !info.dli_fname)
    return "";
  std::string path = info.dli_fname;
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? "" : path.substr(0, slash + 1);
}

Plugin load_plugin() {
  std::vector<std::string> candidates;
  if (const char* path = std::getenv("TESSEL_MPI_PLUGIN"); path && *path) {
    candidates.push_back(path);
  } else {
    candidates.push_back(directory_of_libtessel() + "libtessel_mpi.so");
    candidates.push_back("libtessel_mpi.so");
  }
  std::string errors;
  for (const std::string& path : candidates) {
    // RTLD_GLOBAL: Open MPI loads its own components with dlopen and needs libmpi's symbols.
    void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL);
    if (!handle) {
      errors += fmt::format("\n  {}: {}", path, ::dlerror());
      continue;
    }
    auto abi = reinterpret_cast<MpiPluginAbiFn>(::dlsym(handle, "tessel_mpi_plugin_abi"));
    auto create =
        reinterpret_cast<MpiPluginCreateFn>(::dlsym(handle, "tessel_mpi_create_transport"));
    auto world = reinterpret_cast<MpiPluginWorldFn>(::dlsym(handle, "tessel_mpi_world"));
    if (!abi || !create || !world) {
      errors += fmt::format("\n  {}: not a tessel mpi plug-in", path);
      continue;
    }
    if (abi() != kMpiPluginAbi) {
      errors += fmt::format("\n  {}: plug-in interface version {}, libtessel expects {}", path,
                            abi(), kMpiPluginAbi);
      continue;
    }
    return {create, world, ok_status()};
  }
  return {nullptr, nullptr,
          unavailable("the mpi backend is not available (is Open MPI installed? build tessel "
                      "with it to get libtessel_mpi.so):{}",
                      errors)};
}

const Plugin& loaded_plugin() {
  static std::once_flag once;
  static Plugin loaded;
  std::call_once(once, [] { loaded = load_plugin(); });
  return loaded;
}

}  // namespace

Expected<MpiWorld> mpi_world() {
  const Plugin& plugin = loaded_plugin();
  if (!plugin.status.ok()) return plugin.status;
  MpiWorld world;
  char error[1024] = {};
  if (plugin.world(&world.rank, &world.size, error, sizeof(error)) != 0)
    return unavailable("mpi backend: {}", error);
  return world;
}

Expected<std::unique_ptr<Transport>> make_mpi_transport(int nranks, int rank,
                                                        const CommOptions& options) {
  const Plugin& plugin = loaded_plugin();
  if (!plugin.status.ok()) return plugin.status;
  char error[1024] = {};
  Transport* transport = plugin.create(nranks, rank, &options, error, sizeof(error));
  if (!transport) return unavailable("mpi backend: {}", error);
  return std::unique_ptr<Transport>(transport);
}

}  // namespace tessel::dist
