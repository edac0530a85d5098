// Kernels compiled ahead of time for the CPU. At build time tessel_tilec (tile/tools/) renders
// the specialisations listed in kernels/aot.txt and the build compiles them once per ISA variant
// into libtessel_cpu_kernels_<isa>.so, next to libtessel.so. At run time the variant this CPU
// runs best (host_cpu_isa()) is loaded once, and a kernel whose rendered C++ is one of those
// compiled ahead of time runs from it instead of the JIT. The match is on the source itself
// (its hash names the entry point), so a stale or foreign library can only miss, never run
// the wrong code.
//
//   std::string source = render_cpu(ir);
//   if (Expected<CpuModule> m = aot_cpu_module(source, host_cpu_isa()); m.ok()) ...  // no compiler
#pragma once

#include <string>

#include "support/status.h"
#include "tile/run/cpu_jit.h"

namespace tessel::tile {

// The symbol prefix of a kernel compiled ahead of time: "aot_<hash of the source>", used as the
// kernel's name when the build renders it (its entry point is then "tessel_aot_<hash>").
std::string aot_kernel_name(const std::string& source);

// The kernel whose source is `source`, from the ahead-of-time library of `isa`; not_found when
// that library lacks it, unavailable when the library is absent ($TESSEL_AOT_DIR, else the
// folder of libtessel.so, is where it is looked for; TESSEL_AOT=0 turns the lookup off).
Expected<CpuModule> aot_cpu_module(const std::string& source, const CpuIsa& isa);

}  // namespace tessel::tile
