// Compiling generated C++ for this CPU at run time: the system C++ compiler builds a shared
// object, which is loaded with dlopen. Results are cached on disk under $TESSEL_CACHE_DIR, else
// $XDG_CACHE_HOME/tessel, else ~/.cache/tessel, keyed by a hash of the source, the entry point,
// the ISA flags, the embedded headers and the compiler's identity. Processes may share the cache
// and compile the same kernel at the same time: each compiles to a private temporary name and
// renames it into place, which is atomic.
//
//   Expected<CpuModule> m = jit_compile_cpu(source, "tessel_gemm");
//   m->entry(args, 0, blocks);
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "support/status.h"
#include "tile/codegen/cpu/abi.h"

namespace tessel::tile {

// An instruction-set variant for generated code: a name and the compiler flags that select it.
struct CpuIsa {
  std::string name;  // "avx512bf16", "avx512", "avx2", "portable"
  std::vector<std::string> flags;
};

// The best variant the host CPU runs (from hw/ feature detection).
const CpuIsa& host_cpu_isa();

// The variant called `name` ("avx512bf16", "avx512", "avx2", "portable"); an error names the
// known ones. Whether this CPU runs it is the caller's concern.
Expected<CpuIsa> cpu_isa_named(std::string_view name);

struct CpuJitOptions {
  CpuIsa isa = host_cpu_isa();
  std::string compiler;   // default: $TESSEL_CXX, else "c++"
  std::string cache_dir;  // default: see above
};

// A loaded kernel. Loaded objects stay loaded for the life of the process.
struct CpuModule {
  tessel_cpu::KernelEntry entry = nullptr;
  void* handle = nullptr;      // from dlopen, for symbols other than the entry point
  std::string library_path;    // the cached shared object
  bool from_cache = false;     // true when no compiler ran
  bool ahead_of_time = false;  // compiled into a libtessel_cpu_kernels_<isa>.so (cpu_aot.h)
  std::string entry_name;      // the entry point's symbol; others are <entry_name>_<suffix>
};

Expected<CpuModule> jit_compile_cpu(const std::string& source, const std::string& entry,
                                    const CpuJitOptions& options = {});

// Another symbol of a loaded module, or null when it has none.
void* module_symbol(const CpuModule& module, const std::string& name);

// The cache directory used when options name none.
std::string default_cache_dir();

}  // namespace tessel::tile
