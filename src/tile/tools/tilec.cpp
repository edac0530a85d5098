// tessel_tilec: the build step that renders the op library's most used kernels for the CPU
// ahead of time (tile/run/cpu_aot.h). It reads a list of specialisations, one per line
// ("gemm T=bf16 U=f32"; '#' starts a comment), lowers each kernel of kernels/*.tile with those
// compile-time parameters exactly as the CPU device does at run time (ops/device_kernel.h), and writes OUT_DIR/aot_<i>.cpp
// for the i-th line: the rendered C++ with the entry point renamed after the hash of the source
// the run time will render, so that the run time finds it by rendering, not by parameters.
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
#include "tile/parse/parser.h"
#include "tile/run/cpu_aot.h"
#include "tile/pipeline.h"

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

Status generate(const std::string& list_path, const std::string& kernel_dir, const std::string& out_dir) {
  std::ifstream list(list_path);
  if (!list) return not_found("cannot read {}", list_path);
  std::map<std::string, Kernel> kernels;
  for (const auto& entry : std::filesystem::directory_iterator(kernel_dir)) {
    if (entry.path().extension() != ".tile") continue;
    TESSEL_ASSIGN_OR_RETURN(std::vector<Kernel> parsed, parse_tile_file(entry.path().string()));
    for (Kernel& k : parsed) {
      std::string name = k.name;
      kernels.emplace(std::move(name), std::move(k));
    }
  }
  std::string line;
  int index = 0;
  for (int line_no = 1; std::getline(list, line); ++line_no) {
    line = line.substr(0, line.find('#'));
    std::istringstream words(line);
    std::string name;
    if (!(words >> name)) continue;
    auto it = kernels.find(name);
    if (it == kernels.end()) return not_found("{}:{}: no kernel '{}'", list_path, line_no, name);
    std::map<std::string, std::string> params;
    for (std::string word; words >> word;) {
      size_t eq = word.find('=');
      if (eq == std::string::npos)
        return invalid_argument("{}:{}: '{}' is not NAME=VALUE", list_path, line_no, word);
      params[word.substr(0, eq)] = word.substr(eq + 1);
    }
    Expected<Kernel> lowered = lower_for_cpu(it->second, params);
    if (!lowered.ok()) return lowered.status().with_context("{}:{}", list_path, line_no);
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
