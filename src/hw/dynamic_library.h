// A shared library opened at run time with dlopen, so one tessel binary runs with or without
// OpenCL or CUDA installed. Opening tries candidates in order and, when all fail, says what it
// tried and why each failed; binding a missing symbol names the library and the symbol.
//
//   TESSEL_ASSIGN_OR_RETURN(DynamicLibrary lib,
//                           DynamicLibrary::open_first({"libOpenCL.so.1"}, "the OpenCL ICD
//                           loader"));
//   TESSEL_TRY(lib.bind(api.clGetPlatformIDs, "clGetPlatformIDs"));
//
// Libraries are never closed: GPU drivers and ICD loaders keep threads and exit handlers that
// outlive dlclose, and unloading them is a known source of crashes at exit.
#pragma once

#include <string>
#include <vector>

#include "support/status.h"

namespace tessel {

class DynamicLibrary {
 public:
  // A bare name ("libcuda.so.1") is searched by the dynamic linker (LD_LIBRARY_PATH, the
  // ld.so.cache, /lib and /usr/lib); a name with a slash is opened as that file. `what` names the
  // library in the error: "the CUDA driver (libcuda)".
  static Expected<DynamicLibrary> open_first(const std::vector<std::string>& candidates,
                                             const std::string& what);

  // The address of `name`, or nullptr.
  void* symbol(const char* name) const;

  // Points `fn` at symbol `name`; not_found naming library and symbol when it is absent.
  template <typename Fn>
  Status bind(Fn& fn, const char* name) const {
    void* p = symbol(name);
    if (!p) return not_found("{} has no symbol {}", name_, name);
    fn = reinterpret_cast<Fn>(p);
    return ok_status();
  }

  // The candidate that opened.
  const std::string& name() const { return name_; }

 private:
  DynamicLibrary(void* handle, std::string name) : handle_(handle), name_(std::move(name)) {}
  void* handle_ = nullptr;
  std::string name_;
};

}  // namespace tessel
