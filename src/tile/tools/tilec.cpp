// tessel_tilec: the build step that renders the op library's most used kernels for the CPU
// ahead of time (tile/run/cpu_aot.h). It reads a list of specialisations, one per line
// ("gemm T=bf16 U=f32"; '#' starts a comment), lowers each kernel of kernels/*.tile with those
// compile-time parameters exactly as the CPU device does at run time (ops/device_kernel.h), and
// writes OUT_DIR/aot_<i>.cpp for the i-th line: the rendered C++ with the entry point renamed after
// the hash of the source the run time will render, so that the run time finds it by rendering, not
// by parameters.
//
//   tessel_tilec kernels/aot.txt kernels/ build/src/tile/aot/
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "support/atomic_file.h"
#include "tile/codegen/cpu/cpu_renderer.h"
#include "tile/parse/specialisations.h"
#include "tile/pipeline.h"
#include "tile/run/cpu_aot.h"

namespace {

using namespace tessel;
using namespace tessel::tile;

// Leaves a file that already holds `text` alone, so its time stamp stays and the build (which
// reruns this tool whenever libtessel, and so the renderer, changes) recompiles only what did.
Status write_if_changed(const std::string& path, const std::string& text) {
  std::ifstream in(path, std::ios::binary);
  if (in) {
    std::ostringstream old;
    old << in.rdbuf();
    if (old.str() == text) return ok_status();
  }
  return write_file_atomic(path, text);
}

Status generate(const std::string& list_path, const std::string& kernel_dir,
                const std::string& out_dir) {
  TESSEL_ASSIGN_OR_RETURN(std::vector<Specialisation> list, read_specialisations(list_path));
  // Named as the op library names its embedded copies (ops/kernel_cache.cpp): the file appears in
  // the rendered source, so any other name would give every kernel another hash, and none a hit.
  TESSEL_ASSIGN_OR_RETURN(auto kernels, parse_kernel_folder(kernel_dir, "kernels"));
  int index = 0;
  for (const Specialisation& s : list) {
    auto it = kernels.find(s.kernel);
    if (it == kernels.end()) return not_found("{}:{}: no kernel '{}'", list_path, s.line, s.kernel);
    Expected<Kernel> lowered = lower_for_cpu(it->second, s.params);
    if (!lowered.ok()) return lowered.status().with_context("{}:{}", list_path, s.line);
    Kernel renamed = *lowered;
    renamed.name = aot_kernel_name(render_cpu(*lowered));
    TESSEL_TRY(write_if_changed(out_dir + "/aot_" + std::to_string(index++) + ".cpp",
                                render_cpu(renamed)));
  }
  return ok_status();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: tessel_tilec SPECIALISATIONS KERNEL_DIR OUT_DIR\n");
    return 2;
  }
  Status s = generate(argv[1], argv[2], argv[3]);
  if (!s.ok()) {
    std::fprintf(stderr, "tessel_tilec: %s\n", s.to_string().c_str());
    return 1;
  }
  return 0;
}
