// dlopen/dlsym behind DynamicLibrary, with errors that list every candidate tried.
#include "hw/dynamic_library.h"

#include <dlfcn.h>

namespace tessel {

Expected<DynamicLibrary> DynamicLibrary::open_first(const std::vector<std::string>& candidates,
                                                    const std::string& what) {
  std::string tried;
  for (const std::string& name : candidates) {
    // RTLD_LOCAL: the library's symbols must not satisfy other libraries' references.
    void* handle = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle) return DynamicLibrary(handle, name);
    // dlerror's text starts with the name it tried: "libx.so.1: cannot open shared object ...".
    const char* why = dlerror();
    tried += "\n  " + (why ? std::string(why) : name + ": unknown error");
  }
  return unavailable(
      "{} could not be loaded; tried (bare names through the dynamic linker: LD_LIBRARY_PATH, "
      "ld.so.cache, /lib, /usr/lib):{}",
      what, tried);
}

void* DynamicLibrary::symbol(const char* name) const {
  return dlsym(handle_, name);
}

}  // namespace tessel
